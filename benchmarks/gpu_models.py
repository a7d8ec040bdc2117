"""The architecture corpus of issue 23: fusegraph's gpu target against PyTorch eager and
torch.compile on torchvision and transformers families, fp16, random weights, offline, each row
measured by gpu_vs_torch.measure_row (export with torch.onnx.export(dynamo=False, opset 17), compile
with fp16=True, contenders alternated with CUDA events) and followed by fusegraph's per-step profile.

    python benchmarks/gpu_models.py [--rows efficientnet_b0:1,efficientnet_b0:32,vit_b_16:1,vit_b_16:32]
                                    [--modes reduce-overhead] [--profile 15] [--out-dir DIR]
    python benchmarks/gpu_models.py --list            # the registry: name, family, batches, inputs
    python benchmarks/gpu_models.py --check           # build + export every row at batch 1 (no GPU timing)
    python benchmarks/gpu_models.py --rows all --prepare 6   # compile every row in 6 processes first
    python benchmarks/gpu_models.py --cold-table A.json,B.json  # what --prepare runs wrote, as a table

`--prepare N` first compiles every row (export, fusegraph, the torch.compile modes) in N processes at
once, recording those cold compile times (`cold_compile_s`, taken N at a time: CPU and GPU shared;
`--prepare-only` stops there, `--cold FILE` attaches an earlier prepare's times; `--fresh` gives each
row's process empty caches of its own, fusegraph's, Triton's and inductor's, and `--apart` with it
compiles each engine of a row in a process of its own: `--prepare 1 --fresh --apart --prepare-only`
is each engine's compile on a new machine, one at a time (without `--apart`, torch.compile compiles
after fusegraph and eager in their process and finds the libraries they share set up by them; with
it, the rows' ONNX exports are made first, a few at a time, and the shared libraries are read into
memory once, so neither engine of any row waits for the disk or the exporter);
`--logs` writes each row's fusegraph compile log into --out-dir, which phases and kernels its
compile waited on),
then times the rows one by one: their compiles (`compile_s`) find Triton's and inductor's caches
warm; fusegraph's autotuning cache is the children's own, so each row's GEMM choices are timed again
on a quiet GPU, never taken from timings made while other compiles ran.

The cold-compile side (`--prepare`, `--apart`, `--cold-table`) is gpu_models_cold.py's.

A row is a registry entry (`MODELS`): a builder of the torch module, its batch sizes and input maker,
whether it is a conv net (channels-last on the torch side). gpu_vs_torch.build takes these names too.
torchvision and transformers are imported only when a row needs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tests.corpus.build import perturb  # noqa: E402

DEFAULT_ROWS = "efficientnet_b0:1,efficientnet_b0:32,vit_b_16:1,vit_b_16:32"


@dataclasses.dataclass(frozen=True)
class ModelRow:
    family: str
    builder: Callable[[], nn.Module | tuple[nn.Module, nn.Module]]  # a module, or (to time, to export)
    inputs: Callable[[int], tuple[tuple[torch.Tensor, ...], list[str]]]  # batch -> (inputs, names)
    batches: tuple[int, ...] = (1, 32)
    convnet: bool = False

    def build(self, batch: int):
        """gpu_vs_torch.build's tuple: (module to time, module to export, inputs, input names, conv net?)."""
        torch.manual_seed(0)
        torch.backends.mha.set_fastpath_enabled(False)  # MHA's fused fast path has no ONNX export
        built = self.builder()
        timed, export = (m.eval() for m in (built if isinstance(built, tuple) else (built, built)))
        # zero-initialized heads (torchvision's ViT, ...) output zeros whatever the body computes: the
        # accuracy columns would compare nothing (rel L2 0/0)
        perturb(export)
        if timed is not export:
            timed.load_state_dict(export.state_dict())
        inputs, names = self.inputs(batch)
        for m in (timed, export):
            if isinstance(m, FirstTensor) and m.keywords:
                m.names = tuple(names)
        return timed, export, inputs, names, self.convnet


class FirstTensor(nn.Module):
    """A module whose output is a dict / tuple / model output, reduced to one tensor for export."""

    def __init__(self, model: nn.Module, key: str | int = 0, keywords: bool = False):
        super().__init__()
        self.model, self.key = model, key
        self.keywords, self.names = keywords, ()  # keywords: pass the inputs by their names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args))) if self.keywords else self.model(*args)
        if isinstance(out, dict) or hasattr(out, "keys"):
            return out[self.key] if isinstance(self.key, str) else next(iter(out.values()))
        return out[self.key] if isinstance(out, (tuple, list)) else out


def image(size: int = 224, name: str = "input") -> Callable[[int], tuple[tuple[torch.Tensor, ...], list[str]]]:
    return lambda b: ((torch.randn(b, 3, size, size),), [name])


def tokens(seq: int = 128, vocab: int = 30522):
    """Token ids and an all-ones mask (a causal decoder without a mask exports transformers' packed-
    sequence detection, aten::diff, which opset 17 lacks)."""
    def make(b: int):
        ids = torch.randint(0, vocab, (b, seq))
        return (ids, torch.ones(b, seq, dtype=torch.int64)), ["input_ids", "attention_mask"]
    return make


def tv(name: str, section: str = "", key: str | int = 0, **kwargs) -> Callable[[], nn.Module]:
    """A torchvision model (random weights); segmentation / detection models reduced to one tensor."""
    def build() -> nn.Module:
        import torchvision

        models = getattr(torchvision.models, section) if section else torchvision.models
        m = getattr(models, name)(weights=None, **kwargs)
        return FirstTensor(m, key) if section else m
    return build


def hf(config: str, model: str, key: str | int = 0, **overrides) -> Callable[[], tuple[nn.Module, nn.Module]]:
    """A transformers model from its default config, random weights, called with its inputs by name:
    (module to time: SDPA attention where the model has it, module to export: the same weights, eager
    attention, the form the ONNX exporter takes), as gpu_vs_torch's BERT row."""
    def build() -> tuple[nn.Module, nn.Module]:
        import transformers

        def make(attention: str) -> nn.Module:
            cfg = getattr(transformers, config)(**overrides)
            cfg._attn_implementation = attention
            return getattr(transformers, model)(cfg)

        export = make("eager")
        try:
            timed = make("sdpa")
            timed.load_state_dict(export.state_dict())
        except (ValueError, NotImplementedError, KeyError):  # no SDPA form: both run eager attention
            timed = export
        return FirstTensor(timed, key, keywords=True), FirstTensor(export, key, keywords=True)
    return build


IMG, TXT, PIXELS = image(), tokens(), image(name="pixel_values")  # transformers' name for images
MODELS: dict[str, ModelRow] = {
    # depthwise / squeeze-excite CNNs
    "efficientnet_b0": ModelRow("depthwise+SE CNN", tv("efficientnet_b0"), IMG, convnet=True),
    "mobilenet_v3_large": ModelRow("depthwise+SE CNN", tv("mobilenet_v3_large"), IMG, convnet=True),
    "mobilenet_v2": ModelRow("depthwise CNN", tv("mobilenet_v2"), IMG, convnet=True),
    "regnet_y_400mf": ModelRow("grouped+SE CNN", tv("regnet_y_400mf"), IMG, convnet=True),
    "convnext_tiny": ModelRow("depthwise 7x7 + LayerNorm CNN", tv("convnext_tiny"), IMG, convnet=True),
    "shufflenet_v2_x1_0": ModelRow("channel-shuffle CNN", tv("shufflenet_v2_x1_0"), IMG, convnet=True),
    "densenet121": ModelRow("dense-concat CNN", tv("densenet121"), IMG, convnet=True),
    "resnext50_32x4d": ModelRow("grouped CNN", tv("resnext50_32x4d"), IMG, convnet=True),
    # vision transformers
    "vit_b_16": ModelRow("ViT", tv("vit_b_16"), IMG),
    "swin_t": ModelRow("windowed ViT", tv("swin_t"), IMG),
    "deit_small": ModelRow("ViT (DeiT)", hf("DeiTConfig", "DeiTModel", hidden_size=384, num_attention_heads=6,
                                            intermediate_size=1536), PIXELS),
    "hf_swin_tiny": ModelRow("windowed ViT", hf("SwinConfig", "SwinModel"), PIXELS),
    "mobilevit_s": ModelRow("conv+attention hybrid", hf("MobileViTConfig", "MobileViTModel", image_size=256),
                            image(256, "pixel_values"), convnet=True),
    # text encoders and decoders
    "distilbert": ModelRow("encoder", hf("DistilBertConfig", "DistilBertModel"), TXT),
    "roberta_base": ModelRow("encoder", hf("RobertaConfig", "RobertaModel", vocab_size=50265), tokens(vocab=50265)),
    "gpt2": ModelRow("decoder (causal)", hf("GPT2Config", "GPT2Model", use_cache=False),
                     tokens(vocab=50257)),
    "llama_small": ModelRow("decoder (RoPE, RMSNorm, SwiGLU)",
                            hf("LlamaConfig", "LlamaModel", hidden_size=512, intermediate_size=1408,
                               num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                               vocab_size=32000, use_cache=False), tokens(vocab=32000)),
    # segmenters
    "deeplabv3_mobilenet_v3": ModelRow("segmenter", tv("deeplabv3_mobilenet_v3_large", "segmentation", "out",
                                                       weights_backbone=None, aux_loss=False), IMG, convnet=True),
    "lraspp_mobilenet_v3": ModelRow("segmenter", tv("lraspp_mobilenet_v3_large", "segmentation", "out",
                                                    weights_backbone=None), IMG, convnet=True),
    "segformer_b0": ModelRow("segmenter (transformer)", hf("SegformerConfig", "SegformerForSemanticSegmentation",
                                                           "logits"), image(512, "pixel_values"), (1, 8)),
    # detectors (dense heads; the NMS-free outputs)
    "yolos_tiny": ModelRow("detector (ViT)", hf("YolosConfig", "YolosForObjectDetection", "logits", hidden_size=192,
                                                num_attention_heads=3, intermediate_size=768,
                                                image_size=[512, 512]), image(512, "pixel_values"), (1, 8)),
}


def build(name: str, batch: int):
    return MODELS[name].build(batch)


def profile_lines(exe, inputs, names, top: int) -> list[str]:
    """fusegraph's slowest `top` steps (eager, step by step: each small step also carries its
    launch cost, which the CUDA graph removes) and its time by ONNX op."""
    from fusegraph.profile.summary import as_dict

    feeds = {n: x.numpy() for n, x in zip(names, inputs)}
    d = as_dict(exe.profile(feeds, runs=5, warmup=1))
    lines = ["  by ONNX op:"]
    lines += [f"    {r['key'][:50]:50s} {r['seconds'] * 1e3:8.3f} ms  share {r['share']:.2f}  steps={r['count']}"
              for r in d["by_onnx_op"][:12]]
    lines.append(f"  slowest {top} steps:")
    lines += [f"    {r['seconds'] * 1e6:9.1f} us  {r['kernel']:16s} {r['key'][:110]}" for r in d["steps"][:top]]
    return lines


def check_rows(rows: list[tuple[str, int]]) -> None:
    """Build and export each row (no timing): that the harness takes it on this machine."""
    from benchmarks.gpu_vs_torch import export_onnx

    for name, _ in rows:
        t0 = time.perf_counter()
        try:
            _, export, inputs, names, _ = build(name, 1)
            size = len(export_onnx(export, inputs, names))
            print(f"ok   {name:26s} {size / 2**20:7.1f} MiB ONNX  {time.perf_counter() - t0:5.1f} s", flush=True)
        except Exception as e:  # report every row
            print(f"FAIL {name:26s} {type(e).__name__}: {str(e)[:150]}", flush=True)


def main() -> None:
    from benchmarks.gpu_models_cold import cold_table, compile_alone, export_rows, prepare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="name:batch,... ('all': every model at its batches)")
    ap.add_argument("--modes", default="reduce-overhead", help="torch.compile modes (max-autotune is slow)")
    ap.add_argument("--profile", type=int, default=15, help="fusegraph steps to list per row (0: none)")
    ap.add_argument("--deadline", type=float, default=1e9)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--prepare", type=int, default=0, help="compile the rows in this many processes first")
    ap.add_argument("--prepare-only", action="store_true", help="stop after --prepare")
    ap.add_argument("--fresh", action="store_true", help="(for --prepare) each row with empty caches of its own")
    ap.add_argument("--apart", action="store_true",
                    help="(for --prepare --fresh) each engine of a row in a process of its own (compile_alone)")
    ap.add_argument("--engine", default=None, help="(for --compile-only) this engine's compile alone: fusegraph | "
                    "eager | a torch.compile mode")
    ap.add_argument("--cold", default=None, help="a gpu_models_cold JSON of an earlier --prepare: its times")
    ap.add_argument("--compile-only", action="store_true", help="(for --prepare) print each row's compile times")
    ap.add_argument("--logs", action="store_true", help="(for --prepare, with --out-dir) each row's compile log there")
    ap.add_argument("--log-dir", default=None, help="(for --compile-only) write each row's compile log here")
    ap.add_argument("--export-to", default=None, help="write each row's ONNX export into this folder (no GPU)")
    ap.add_argument("--onnx-dir", default=None, help="(for --engine fusegraph) read the row's export from here")
    ap.add_argument("--cold-table", default=None, help="FILE,...: the cold compiles of --prepare runs as a table")
    ap.add_argument("--fp16-io", action="store_true",
                    help="fusegraph with float16 inputs and outputs, as the torch contenders (CompileOptions.fp16_io)")
    args = ap.parse_args()
    if args.rows == "all":
        rows = [(n, b) for n, m in MODELS.items() for b in m.batches]
    else:
        rows = [(s.split(":")[0], int(s.split(":")[1])) for s in args.rows.split(",")]
    if args.list:
        for n, m in MODELS.items():
            shapes = [tuple(x.shape) for x in m.inputs(1)[0]]
            print(f"{n:26s} {m.family:32s} batches {m.batches}  inputs {shapes}")
        return
    if args.cold_table:
        print(cold_table(args.cold_table.split(",")))
        return
    if args.export_to:
        export_rows(rows, args.export_to)
        return
    if args.check:
        check_rows(sorted({(n, 1) for n, _ in rows}) if args.rows != "all" else [(n, 1) for n in MODELS])
        return
    from benchmarks._common import write_results
    from benchmarks.gpu_vs_torch import measure_row, table

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (--check and --list run anywhere)")
    deadline = time.perf_counter() + args.deadline
    if args.compile_only:
        for name, batch in rows:
            log_to = str(Path(args.log_dir) / f"{name}_{batch}_log.json") if args.log_dir else None
            if args.engine:
                print(json.dumps(compile_alone(name, batch, args.engine, args.fp16_io, log_to, args.onnx_dir)),
                      flush=True)
                continue
            print(json.dumps(measure_row(name, batch, deadline, args.modes.split(","), compile_only=True,
                                         fp16_io=args.fp16_io, log_to=log_to)), flush=True)
        return
    os.environ.setdefault("TRITON_CACHE_DIR", str(Path.home() / ".triton" / "cache"))  # shared with --prepare's
    cold = json.loads(Path(args.cold).read_text())["rows"] if args.cold else {}
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    if args.prepare:
        cold = prepare(rows, args.prepare, args.modes, args.out_dir, args.fresh, args.fp16_io, args.logs,
                       args.apart)
        if args.prepare_only:
            return
    payload = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    for name, batch in rows:
        profile: list[str] = []

        def inspect(row, exe, inputs, names, profile=profile):
            if args.profile:
                profile.extend(profile_lines(exe, inputs, names, args.profile))
        try:
            row = measure_row(name, batch, deadline, args.modes.split(","), inspect=inspect, fp16_io=args.fp16_io)
        except Exception as e:  # one broken row must not lose the others
            row = {"model": name, "batch": batch, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-2000:]}
        if f"{name}:{batch}" in cold:  # compiled by --prepare, with others at once
            row["cold_compile_s"] = cold[f"{name}:{batch}"]
        payload["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
        print("\n".join(profile), flush=True)
        path = write_results("gpu_models", payload)
        if args.out_dir:
            (Path(args.out_dir) / path.name).write_text(path.read_text())
    print(table(payload["rows"]))


if __name__ == "__main__":
    main()
