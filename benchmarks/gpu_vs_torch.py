"""fusegraph's gpu target against PyTorch eager, torch.compile(mode="reduce-overhead") and
torch.compile(mode="max-autotune") on one NVIDIA GPU, same weights, fp16 (issue 6).

    python benchmarks/gpu_vs_torch.py [--rows resnet50:1,resnet50:32,bert:1,bert:32,yolo:1,yolo:16]
                                      [--deadline SECONDS] [--out-dir DIR]

Each model is built in torch (torchvision ResNet-50 with its batch norms folded into the convolutions,
transformers' BertModel (base, random weights), a YOLOv8n-size detector written here), exported to
ONNX with torch.onnx.export(dynamo=False), and compiled by fusegraph with fp16=True; the torch
contenders run the same module in fp16 (channels-last for the conv nets). Timing: CUDA events around
each call, contenders alternated in rounds after warm-up, median of >= 60 calls. Reported per row:
latency of each contender, the ratio fusegraph / best torch.compile mode, compile times, peak GPU
memory (allocator peak while the contender was built and run, its weights included; held_mb: what it
still holds afterwards, compile-time transients gone), and the fp16 error of fusegraph and of torch
against the fp32 torch module (relative L2). max-autotune's logs go
to gpu_vs_torch-autotune.log. Rows are written as they finish, so a run cut short keeps its rows;
a max-autotune compile that would run past --deadline is skipped and marked so (the other
contenders compile in seconds and always run, so every row keeps its reduce-overhead figure).
Writes benchmarks/results/gpu_vs_torch-<host>.json (and a copy under --out-dir).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import phase_summary, write_compile_log, write_results  # noqa: E402

ROWS = "resnet50:1,resnet50:32,bert:1,bert:32,yolo:1,yolo:16"
ROUNDS, PER_ROUND, WARMUP = 5, 12, 10
LOG = Path("gpu_vs_torch-autotune.log")
MAX_AUTOTUNE_GUESS = 150  # seconds a max-autotune compile may take (52-349 s seen on an H200), for --deadline


# -- models --------------------------------------------------------------------------------------------
def fold_batchnorms(model: nn.Module) -> nn.Module:
    """Fold every Conv2d -> BatchNorm2d pair of a torchvision ResNet (eval) into the convolution."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    pairs = [("conv1", "bn1"), ("conv2", "bn2"), ("conv3", "bn3")]
    for m in [model, *model.modules()]:
        for c, b in pairs:
            if isinstance(getattr(m, c, None), nn.Conv2d) and isinstance(getattr(m, b, None), nn.BatchNorm2d):
                setattr(m, c, fuse_conv_bn_eval(getattr(m, c), getattr(m, b)))
                setattr(m, b, nn.Identity())
        ds = getattr(m, "downsample", None)
        if isinstance(ds, nn.Sequential) and len(ds) == 2:
            m.downsample = nn.Sequential(fuse_conv_bn_eval(ds[0], ds[1]))
    return model


def resnet50() -> nn.Module:
    import torchvision

    return fold_batchnorms(torchvision.models.resnet50(weights=None).eval())


class Conv(nn.Sequential):
    def __init__(self, c1, c2, k=1, s=1):  # conv + (folded) batch norm + SiLU, as ultralytics' Conv
        super().__init__(nn.Conv2d(c1, c2, k, s, k // 2, bias=True), nn.SiLU())


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False):
        super().__init__()
        self.c = c2 // 2
        self.cv1, self.cv2 = Conv(c1, 2 * self.c, 1), Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c1 // 2, 1), Conv(c1 // 2 * 4, c2, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class YoloV8n(nn.Module):
    """YOLOv8n's layers (width 0.25, depth 0.33, 80 classes, DFL head with 16 bins) at 640x640; output
    [B, 84, 8400] as ultralytics exports it (decoded boxes, class probabilities)."""

    def __init__(self, size=640, nc=80, reg=16):
        super().__init__()
        self.b = nn.ModuleList([Conv(3, 16, 3, 2), Conv(16, 32, 3, 2), C2f(32, 32, 1, True), Conv(32, 64, 3, 2),
                                C2f(64, 64, 2, True), Conv(64, 128, 3, 2), C2f(128, 128, 2, True),
                                Conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256)])
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12, self.h15 = C2f(384, 128), C2f(192, 64)
        self.d16, self.h18, self.d19, self.h21 = Conv(64, 64, 3, 2), C2f(192, 128), Conv(128, 128, 3, 2), C2f(384, 256)
        self.nc, self.reg = nc, reg
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(c, 64, 3), Conv(64, 64, 3), nn.Conv2d(64, 4 * reg, 1))
                                 for c in (64, 128, 256))
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(c, 80, 3), Conv(80, 80, 3), nn.Conv2d(80, nc, 1))
                                 for c in (64, 128, 256))
        self.dfl = nn.Conv2d(reg, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(reg, dtype=torch.float32).view(1, reg, 1, 1)
        anchors, strides = [], []
        for s in (8, 16, 32):
            n = size // s
            sy, sx = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
            anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((n * n, 1), float(s)))
        self.register_buffer("anchors", torch.cat(anchors).T.unsqueeze(0))
        self.register_buffer("strides", torch.cat(strides).T.unsqueeze(0))

    def forward(self, x):
        feats = []
        for m in self.b:
            x = m(x)
            feats.append(x)
        p3, p4, p5 = feats[4], feats[6], feats[9]
        h12 = self.h12(torch.cat([self.up(p5), p4], 1))
        h15 = self.h15(torch.cat([self.up(h12), p3], 1))
        h18 = self.h18(torch.cat([self.d16(h15), h12], 1))
        h21 = self.h21(torch.cat([self.d19(h18), p5], 1))
        b = x.shape[0]
        out = torch.cat([torch.cat([self.cv2[i](f), self.cv3[i](f)], 1).view(b, 4 * self.reg + self.nc, -1)
                         for i, f in enumerate((h15, h18, h21))], 2)
        box, cls = out.split((4 * self.reg, self.nc), 1)
        a = box.shape[-1]
        dist = self.dfl(box.view(b, 4, self.reg, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        anchors, strides = self.grid((h15, h18, h21))
        x1y1, x2y2 = anchors - lt, anchors + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)

    def grid(self, feats):
        """Anchor centres [1, 2, A] and strides [1, 1, A] for these feature maps: built for `size`."""
        return self.anchors, self.strides


class BertLastHidden(nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def bert() -> tuple[nn.Module, nn.Module]:
    """(module to time: SDPA attention, module to export: the same weights, eager attention)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    export = BertModel(BertConfig(attn_implementation="eager"), add_pooling_layer=False).eval()
    timed = BertModel(BertConfig(attn_implementation="sdpa"), add_pooling_layer=False).eval()
    timed.load_state_dict(export.state_dict())
    return BertLastHidden(timed), BertLastHidden(export)


def build(name: str, batch: int):
    """(module to time, module to export, example inputs (fp32 / int64, CPU), input names, conv net?)"""
    from benchmarks.gpu_models import MODELS  # the architecture corpus (torchvision / transformers rows)

    if name in MODELS:
        return MODELS[name].build(batch)
    torch.manual_seed(0)
    if name == "bert":
        timed, export = bert()
        ids = torch.randint(0, 30522, (batch, 128))
        return timed, export, (ids, torch.ones(batch, 128, dtype=torch.int64)), ["input_ids", "attention_mask"], False
    if name not in ("resnet50", "yolo"):
        raise ValueError(f"no row named {name!r}: resnet50, bert, yolo or one of {', '.join(MODELS)}")
    model = resnet50() if name == "resnet50" else YoloV8n().eval()
    size = 224 if name == "resnet50" else 640
    return model, model, (torch.randn(batch, 3, size, size),), ["input"], True


def export_onnx(model: nn.Module, inputs, names) -> bytes:
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, inputs, f, input_names=names, output_names=["output"], opset_version=17,
                          dynamo=False)
    return f.getvalue()


# -- measuring ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def quiet(path: Path):
    """Send this process' stdout and stderr (and its children's) to `path` for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.double().cpu(), ref.double().cpu()
    return float((a - ref).norm() / ref.norm())


def memory_base() -> int:
    """Bytes allocated before a contender is built, with the peak reset and no cuBLAS workspace left
    by an earlier one: cuBLAS keeps a workspace per stream for the life of the process, and
    fusegraph's and reduce-overhead's captures drop those they find, so without this a contender
    could be credited for dropping another's workspace, or use one it never paid for. The collection
    first: an earlier row's CUDA-graph pools freed later, during this contender's build, would hide
    its allocations under the peak (a peak of 0 MiB was seen so)."""
    gc.collect()
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def time_alternating(fns: dict, rounds: int = ROUNDS) -> dict[str, list[float]]:
    for fn in fns.values():
        for _ in range(WARMUP):
            fn()
    torch.cuda.synchronize()
    events = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(PER_ROUND):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fns[name]()
                e1.record()
                events[name].append((e0, e1))
        torch.cuda.synchronize()
    return {k: [a.elapsed_time(b) for a, b in v] for k, v in events.items()}


def half_on_device(timed: nn.Module, inputs, convnet: bool, dev) -> tuple[nn.Module, tuple]:
    """The torch contenders' module and inputs: float16 on `dev`, channels-last for a conv net."""
    fmt = torch.channels_last if convnet else torch.contiguous_format
    model = timed.to(dev).half().to(memory_format=fmt)
    return model, tuple(x.to(dev).half().contiguous(memory_format=fmt) if x.is_floating_point() else x.to(dev)
                        for x in inputs)


def measure_row(name: str, batch: int, deadline: float, modes: list[str], inspect=None,
                compile_only: bool = False, fp16_io: bool = False, log_to: str | None = None) -> dict:
    """One row; `inspect(row, executable, inputs, names)`, if given, runs once the timing is done.
    `compile_only`: the row with its compile times alone (a run that fills the compile caches).
    `log_to`: a path for every span of fusegraph's compile log (_common.write_compile_log).
    `fp16_io`: fusegraph compiled with CompileOptions(fp16_io=True), fed float16 inputs and giving
    float16 outputs, as the torch contenders are (else float32 ones, as the ONNX graph declares)."""
    row: dict = {"model": name, "batch": batch, "dtype": "float16", "fp16_io": fp16_io}
    timed, export, inputs, names, convnet = build(name, batch)
    t0 = time.perf_counter()
    onnx_bytes = export_onnx(export, inputs, names)
    row["export_s"] = round(time.perf_counter() - t0, 2)
    dev = torch.device("cuda")
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        torch.backends.cuda.matmul.allow_tf32 = False  # the accuracy reference: true fp32 on the GPU
        ref = timed.to(dev)(*[x.to(dev) for x in inputs]).float().cpu()
    timed.cpu()
    torch.cuda.empty_cache()
    fns, compile_s, peak_mb, held_mb = {}, {}, {}, {}

    # fusegraph: parse + fp16 passes + lowering + kernels + graph capture, from the ONNX bytes
    base = memory_base()
    t0 = time.perf_counter()
    program = fusegraph.parse_onnx(onnx_bytes)
    row["fusegraph_parse_s"] = round(time.perf_counter() - t0, 3)
    program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True, fp16_io=fp16_io))
    compile_s["fusegraph"] = time.perf_counter() - t0
    exe = program.executable
    row["fusegraph_phases_s"] = phase_summary(exe)  # where its compile went (Executable.compile_log)
    if log_to:
        write_compile_log(exe, log_to)
    feeds = {n: x.to(dev).half() if fp16_io and x.is_floating_point() else x.to(dev) for n, x in zip(names, inputs)}
    out = exe.run_device(feeds)[0]
    torch.cuda.synchronize()
    peak_mb["fusegraph"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    held_mb["fusegraph"] = (torch.cuda.memory_allocated() - base) / 2**20
    row["fusegraph_fp16_rel_err"] = rel_err(out, ref)
    fns["fusegraph"] = lambda: exe.run_device(feeds)

    # torch: the module in fp16 on the GPU (channels-last for conv nets)
    base = memory_base()
    model, targs = half_on_device(timed, inputs, convnet, dev)
    weights = torch.cuda.memory_allocated() - base
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(*targs)
        torch.cuda.synchronize()
        compile_s["eager"] = time.perf_counter() - t0
        peak_mb["eager"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        held_mb["eager"] = (torch.cuda.memory_allocated() - base) / 2**20
        row["torch_fp16_rel_err"] = rel_err(out.float(), ref)
        fns["eager"] = lambda: model(*targs)
        for mode in ("reduce-overhead", "max-autotune"):
            if mode not in modes:
                row.setdefault("skipped", []).append(f"{mode}: not asked for (--modes)")
                continue
            if mode == "max-autotune" and time.perf_counter() + MAX_AUTOTUNE_GUESS > deadline:
                row.setdefault("skipped", []).append(f"{mode}: would pass the deadline")
                continue
            torch._dynamo.reset()
            base = memory_base() - weights
            compiled = torch.compile(model, mode=mode)
            t0 = time.perf_counter()
            with quiet(LOG) if mode == "max-autotune" else contextlib.nullcontext():
                for _ in range(3):  # reduce-overhead records its graph on the later calls
                    compiled(*targs)
                torch.cuda.synchronize()
            compile_s[mode] = time.perf_counter() - t0
            peak_mb[mode] = (torch.cuda.max_memory_allocated() - base) / 2**20
            held_mb[mode] = (torch.cuda.memory_allocated() - base) / 2**20
            fns[mode] = (lambda c: lambda: c(*targs))(compiled)
        if compile_only:
            torch._dynamo.reset()
            return {**row, "compile_s": {k: round(v, 2) for k, v in compile_s.items()}}
        times = time_alternating(fns)
    if inspect is not None:
        inspect(row, exe, inputs, names)
    row["ms"] = {k: round(statistics.median(v), 4) for k, v in times.items()}
    row["runs"] = {k: len(v) for k, v in times.items()}
    row["compile_s"] = {k: round(v, 2) for k, v in compile_s.items()}
    row["peak_mb"] = {k: round(v, 1) for k, v in peak_mb.items()}
    row["held_mb"] = {k: round(v, 1) for k, v in held_mb.items()}  # still allocated once built and run
    best = min((m for m in ("reduce-overhead", "max-autotune") if m in row["ms"]), key=lambda m: row["ms"][m],
               default=None)
    if best:
        row["best_compile_mode"] = best
        row["ratio_vs_best_compile"] = round(row["ms"]["fusegraph"] / row["ms"][best], 3)
    row["ratio_vs_eager"] = round(row["ms"]["fusegraph"] / row["ms"]["eager"], 3)
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | batch | fusegraph ms | eager | reduce-overhead | max-autotune | ratio vs best compile | "
             "compile s (fg / ro / ma) | peak MiB (fg / eager) |", "|" + " --- |" * 9]
    for r in rows:
        if "ms" not in r:
            lines.append(f"| {r['model']} | {r['batch']} | error: {r.get('error', '?')[:60]} |")
            continue
        ms, cs, pm = r["ms"], r["compile_s"], r["peak_mb"]
        lines.append(f"| {r['model']} | {r['batch']} | {ms['fusegraph']:.3f} | {ms['eager']:.3f} | "
                     f"{ms.get('reduce-overhead', float('nan')):.3f} | {ms.get('max-autotune', float('nan')):.3f} | "
                     f"{r.get('ratio_vs_best_compile', float('nan')):.2f} | {cs['fusegraph']:.1f} / "
                     f"{cs.get('reduce-overhead', float('nan')):.1f} / {cs.get('max-autotune', float('nan')):.1f} | "
                     f"{pm['fusegraph']:.0f} / {pm['eager']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds from now to stop starting max-autotune compiles")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--modes", default="reduce-overhead,max-autotune", help="torch.compile modes to run")
    ap.add_argument("--merge", default=None, help="an earlier results file: keep its rows not measured now")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    deadline = time.perf_counter() + args.deadline
    rows: list[dict] = []
    earlier = json.loads(Path(args.merge).read_text())["rows"] if args.merge and Path(args.merge).exists() else []
    payload = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "rows": rows}
    for spec in args.rows.split(","):
        name, batch = spec.split(":")
        try:
            row = measure_row(name, int(batch), deadline, args.modes.split(","))
        except Exception as e:  # one broken row must not lose the others
            row = {"model": name, "batch": int(batch), "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-2000:]}
        rows.append(row)
        measured = {(r["model"], r["batch"]) for r in rows}
        payload["rows"] = [r for r in earlier if (r["model"], r["batch"]) not in measured] + rows
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
        path = write_results("gpu_vs_torch", payload)
        if args.out_dir:
            shutil.copy(path, Path(args.out_dir) / path.name)
    print(table(payload["rows"]))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
