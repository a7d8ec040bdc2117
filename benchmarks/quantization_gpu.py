"""int8 and fp8 against fp16 (and fp32) on one NVIDIA GPU: fusegraph's gpu target (issue 17).

    python benchmarks/quantization_gpu.py [--models resnet50,bert_base] [--batches 32,1]
                                          [--schemes fp16,int8,fp8 (and fp32)] [--gemm library|auto|triton]
                                          [--deadline SECONDS] [--out FILE]

Each model (fusegraph.models: ResNet-50 224², BERT-base seq 128, random weights) is parsed at each
batch and compiled per scheme: fp32 (with --schemes); fp16 (CompileOptions(fp16=True)); int8 (what quantize_int8
writes: QDQ, per-channel symmetric int8 weights, asymmetric int8 activations, MinMax) and fp8 (what
quantize_fp8 writes: e4m3fn), whose products run as int8 / fp8 GEMMs (lower_quant.py) and the rest
in float32. The ranges come from one batch-1 sample of the model's sampler, calibrated once per
model on ref and given to each batch's program by position. Quantized: every product with constant
weights (conv, MatMul, Gemm; heads included), as quantize_int8(keep_heads=False) picks them but
without attention's activation x activation products, which stay float (as TensorRT's int8 BERT
keeps them in fp16). keep_heads=True is not used: on BERT it keeps every attention-output and
FFN-down projection float (select.heads_of walks the residual stream back from the output), 24 of
72 weight matmuls. `--gemm` picks how those
GEMMs run: "library" (cuBLASLt: torch._int_mm / _scaled_mm + the epilogue's pointwise kernel, no
Triton GEMM compiles: the default, to keep the run short), "auto" (autotuned against the Triton
template's int8 / fp8 dot with the epilogue fused) or "triton". Timing: CUDA events around each run_device call, the schemes alternated in rounds after warm-up
(benchmarks/gpu_vs_torch.py's time_alternating). Per row: median / p90 latency, throughput,
the speedup over fp16, peak GPU memory while that program was compiled and run (weights
included), and the output's rel L2 against fp32 (fp16 when fp32 is not run). Rows are written as
they finish; none starts past --deadline seconds.
Writes benchmarks/results/quantization_gpu-<host>.json (and a copy to --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from benchmarks.gpu_vs_torch import memory_base, time_alternating  # noqa: E402
from fusegraph.models import get_model, sample_inputs  # noqa: E402

SCHEMES = ("fp32", "fp16", "int8", "fp8")


def parse(name: str, batch: int):
    """`name` with static input dims at `batch` (BERT at seq 128): the form the rewrite passes expect."""
    m = get_model(name)
    dims = {i.name: [batch] + [d.dim_value or 128 for d in i.type.tensor_type.shape.dim[1:]] for i in m.graph.input}
    return fusegraph.parse_onnx(m, map_input_dims=dims)


def _watched(p, ops) -> list[int]:
    """The activation inputs of the quantized ops, in program order (uids)."""
    uids = {x.uid for ins in ops for x in ins.inputs if not x.is_literal}
    return [i.uid for i in p.main.instructions if i.uid in uids]


def calibrated_ranges(name: str) -> list[tuple[float, float]]:
    """MinMax activation ranges over one batch-1 sample, in program order, calibrated once per
    model (on ref) and given to every (scheme, batch) program: the same ranges quantize_int8 finds.
    By position, not by name: the frontend's reshapes and transposes feeding attention have none."""
    from fusegraph.quantize.int8 import make_plan
    from fusegraph.quantize.qparams import Scheme

    p = parse(name, 1)
    plan = make_plan(p, [sample_inputs(name, batch=1, seed=1)], Scheme(), max_samples=1, keep_heads=False)
    return [plan.ranges[u] for u in _watched(p, plan.ops)]


def quantized(name: str, batch: int, scheme: str, ranges: list[tuple[float, float]]):
    """`name` at `batch` quantized as quantize_int8 / quantize_fp8 would with these ranges."""
    from fusegraph.ir.dtypes import DType
    from fusegraph.quantize.int8 import Plan, _fold_constants, apply_plan
    from fusegraph.quantize.qparams import Scheme
    from fusegraph.quantize.select import DEFAULT_QUANTIZE_OPS, select

    p = parse(name, batch)
    types = Scheme() if scheme == "int8" else Scheme(DType.float8_e4m3fn, DType.float8_e4m3fn, True, True)
    _fold_constants(p.main)  # what make_plan does before it calibrates (make_plan insists on samples)
    ops = select(p.main, DEFAULT_QUANTIZE_OPS, keep_heads=False)
    watched = _watched(p, ops)
    if len(watched) != len(ranges):
        raise RuntimeError(f"{name} b{batch}: {len(watched)} activations to quantize, {len(ranges)} calibrated")
    weighted = [ins for ins in ops if ins.inputs[1].is_literal]  # see the module docstring
    apply_plan(p, Plan(types, weighted, dict(zip(watched, ranges)), 1, "minmax"))
    return p


def compile_scheme(name: str, batch: int, scheme: str, gemm: str, ranges: list[tuple[float, float]]):
    """The compiled program of `name` at `batch` under `scheme`, and its compile seconds."""
    from fusegraph.targets.gpu import GpuTarget

    t0 = time.perf_counter()
    p = quantized(name, batch, scheme, ranges) if scheme in ("int8", "fp8") else parse(name, batch)
    options = fusegraph.CompileOptions(fp16=scheme == "fp16")
    p.compile(GpuTarget(gemm=gemm if scheme in ("int8", "fp8") else None), options)
    return p, time.perf_counter() - t0


def rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.double().cpu(), ref.double().cpu()
    return float((a - ref).norm() / ref.norm())


def measure(name: str, batch: int, schemes: list[str], gemm: str, ranges, dev, payload: dict) -> dict:
    feeds = {k: torch.from_numpy(v).to(dev) for k, v in sample_inputs(name, batch=batch, seed=2).items()}
    exes, peak_mb, build_s, outs = {}, {}, {}, {}
    for scheme in schemes:
        base = memory_base()
        try:
            p, seconds = compile_scheme(name, batch, scheme, gemm, ranges)
        except Exception as e:  # noqa: BLE001  (a benchmark records what failed and goes on)
            payload["errors"].append(f"{name} b{batch} {scheme}: {type(e).__name__}: {e}")
            continue
        exe = p.executable
        outs[scheme] = exe.run_device(feeds, copy_outputs=True)[0].float()
        torch.cuda.synchronize()
        build_s[scheme] = round(seconds, 1)
        peak_mb[scheme] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
        exes[scheme] = exe
        steps = [s.kind for s in exe.plan.steps] if hasattr(exe, "plan") else []
        payload["steps"][f"{name} b{batch} {scheme}"] = {k: steps.count(k) for k in sorted(set(steps)) if "quant" in k
                                                          or "gemm" in k or "conv" in k or k == "dot"}
    fns = {s: (lambda e=e: e.run_device(feeds)) for s, e in exes.items()}
    times = time_alternating(fns)
    row = {"model": name, "batch": batch, "schemes": {}}
    fp16 = statistics.median(times["fp16"]) if "fp16" in times else None
    ref = "fp32" if "fp32" in outs else "fp16"  # the accuracy reference
    for scheme, ms in times.items():
        med = statistics.median(ms)
        row["schemes"][scheme] = {
            "median_ms": round(med, 4), "p90_ms": round(float(np.percentile(ms, 90)), 4),
            "throughput_per_s": round(batch * 1000 / med, 1), "peak_mb": peak_mb[scheme], "compile_s": build_s[scheme],
            "speedup_vs_fp16": round(fp16 / med, 3) if fp16 else None,
            "rel_l2_vs_" + ref: round(rel_l2(outs[scheme], outs[ref]), 5) if ref in outs else None,
        }
    return row


def table(rows: list[dict]) -> str:
    lines = [f"{'model':10} {'batch':>5} {'scheme':6} {'median ms':>10} {'x fp16':>7} {'peak MB':>8} {'relL2 vs ref':>12}"]
    for r in rows:
        for s, v in r["schemes"].items():
            err = next((x for k, x in v.items() if k.startswith("rel_l2_vs_")), None)
            lines.append(f"{r['model']:10} {r['batch']:5d} {s:6} {v['median_ms']:10.3f} {v['speedup_vs_fp16'] or 0:7.2f} "
                         f"{v['peak_mb']:8.0f} {err or 0:12.4f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--batches", default="32,1")
    ap.add_argument("--schemes", default="fp16,int8,fp8", help=f"of {','.join(SCHEMES)}")
    ap.add_argument("--gemm", default="library", choices=("library", "auto", "triton"))
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds: no new row starts past it")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    start, dev = time.perf_counter(), torch.device("cuda")
    payload = {"gemm": args.gemm, "device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "rows": [],
               "calibration_s": {}, "steps": {}, "errors": []}

    def write() -> None:
        path = write_results("quantization_gpu", payload)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(path.read_text())

    ranges: dict[str, list[tuple[float, float]]] = {}
    for batch in (int(b) for b in args.batches.split(",")):  # batch 32 first: the rows of the bar
        for name in args.models.split(","):
            if time.perf_counter() - start > args.deadline:
                payload["errors"].append(f"{name} b{batch}: skipped, past --deadline")
                continue
            try:
                if name not in ranges:
                    t0 = time.perf_counter()
                    ranges[name] = calibrated_ranges(name)
                    payload["calibration_s"][name] = round(time.perf_counter() - t0, 1)
                payload["rows"].append(measure(name, batch, args.schemes.split(","), args.gemm, ranges[name], dev, payload))
            except Exception as e:  # noqa: BLE001  (a benchmark records what failed and goes on)
                payload["errors"].append(f"{name} b{batch}: {type(e).__name__}: {e}")
            write()
            torch.cuda.empty_cache()
    write()
    print(table(payload["rows"]))
    for e in payload["errors"]:
        print("error:", e)
    print(json.dumps(payload["steps"]))


if __name__ == "__main__":
    main()
