"""Building corpus models lazily, cached on disk, and the torch export they share.

The cache key is the entry's name plus a hash of the source of its family file and of this package's
shared files, and the torch / transformers / onnxruntime versions: edit a builder or upgrade torch and
the model is rebuilt. The cache lives in $FUSEGRAPH_CORPUS_CACHE, else ~/.cache/fusegraph/corpus.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

from .registry import Entry, Feeds

_SHARED = ("registry.py", "build.py")
_VERSIONED = ("torch", "transformers", "onnxruntime", "onnx")


class CorpusUnavailable(Exception):
    """The entry's builder needs a package that is not installed (the test skips with this)."""


def cache_dir() -> Path:
    return Path(os.environ.get("FUSEGRAPH_CORPUS_CACHE") or Path.home() / ".cache" / "fusegraph" / "corpus")


def missing(entry: Entry) -> list[str]:
    return [m for m in entry.needs if importlib.util.find_spec(m) is None]


def _key(entry: Entry) -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for f in sorted({Path(inspect.getsourcefile(entry.build)), *(here / s for s in _SHARED)}):
        h.update(f.read_bytes())
    if entry.base:
        from .registry import ENTRIES

        h.update(_key(ENTRIES[entry.base]).encode())
    for pkg in _VERSIONED:
        try:
            h.update(f"{pkg}={importlib.metadata.version(pkg)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{pkg}=none;".encode())
    return h.hexdigest()[:16]


def model_path(entry: Entry) -> Path:
    """The entry's .onnx file, built (and cached) on first use."""
    gone = missing(entry)
    if gone:
        raise CorpusUnavailable(f"{entry.name} needs {', '.join(gone)} (not installed)")
    path = cache_dir() / f"{entry.name}-{_key(entry)}.onnx"
    if path.is_file():
        return path
    if "torch" in entry.needs:
        import torch

        torch.manual_seed(0)
    model = entry.build(entry.feeds())
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(model.SerializeToString())  # written whole, then renamed: concurrent runs never see half a file
    os.replace(f.name, path)
    return path


def export(module, feeds: Feeds, outputs: list[str], opset: int = 17, **kwargs) -> onnx.ModelProto:
    """torch.onnx.export (TorchScript exporter) of `module` called with `feeds` in order, static shapes,
    constant-initialized tensors perturbed first (see `perturb`)."""
    import torch

    module = module.eval()
    perturb(module)
    args = tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in feeds.values())
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, args, f, input_names=list(feeds), output_names=outputs, dynamo=False,
                          opset_version=opset, **kwargs)
    return onnx.load_from_string(f.getvalue())


def perturb(module) -> None:
    """Make constant-initialized tensors random (seeded by the caller): zero biases, unit norm scales,
    batch-norm statistics and zero-initialized heads would otherwise leave paths untested (a
    classifier of zeros outputs zeros whatever the body computes)."""
    import torch

    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if not t.is_floating_point() or t.numel() == 0 or bool((t != t.flatten()[0]).any()):
                continue
            noise = torch.randn_like(t) * 0.1
            if name.endswith("running_var"):
                t.copy_(1.0 + noise.abs())  # variances stay positive
            else:
                t.add_(noise)


def hf_export(model, feeds: Feeds, outputs: list[str], **kwargs) -> onnx.ModelProto:
    """Export a transformers model called with `feeds` as keyword arguments; `outputs` are attributes
    of its output object (e.g. "last_hidden_state", "logits")."""
    import torch

    class Wrapper(torch.nn.Module):  # keywords, not positions: forward's argument order varies by model
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *args):
            out = self.m(**dict(zip(feeds, args)), **kwargs)
            return tuple(getattr(out, k) for k in outputs)

    return export(Wrapper(), feeds, outputs)


def hf_config(cls, **kwargs):
    """A transformers config with eager attention (the exportable one) and no cache."""
    kwargs.setdefault("use_cache", False)
    cfg = cls(**kwargs)
    cfg._attn_implementation = "eager"
    return cfg
