"""Where a new input shape's time goes on cpu: one dynamic program, specialized at each of `--shapes`
in turn (the first compiles from cold, the later ones show what a stream's new shape costs).

    python benchmarks/dynamic_specialize.py --model yolov8n --shapes 320,352,384,416
    python benchmarks/dynamic_specialize.py --model bert_base --shapes 32,64,96,128

Per shape: the specialization's seconds split into specializing the IR (passes/specialize_shapes.py),
the pass pipeline, and the lowering, which is split again into oneDNN weight packing (reorders),
oneDNN primitive creation, the generated C (code generation and the compiler run, or the library
cache's hit) and the rest (numpy kernels' tables, steps); then the first and a second run, and the
process' RSS. Phases are timed by wrapping the functions that do them (this process only).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PHASES: collections.Counter = collections.Counter()
_INNER: list[str] = []  # the lowering sub-phase running now: a reorder inside a packing is the packing's


def _timed(owner, attr: str, phase: str) -> None:
    fn = getattr(owner, attr)
    inner = phase.startswith("lower:")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if inner and _INNER:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        if inner:
            _INNER.append(phase)
        try:
            return fn(*args, **kwargs)
        finally:
            if inner:
                _INNER.pop()
            PHASES[phase] += time.perf_counter() - t0

    setattr(owner, attr, wrapper)


def instrument() -> None:
    import fusegraph.passes.specialize_shapes as spec
    import fusegraph.targets.cpu.lowering as lowering
    import fusegraph.targets.cpu.onednn.base as dnnl
    import fusegraph.targets.cpu.target as cpu

    _timed(spec, "specialize", "specialize")
    import fusegraph.passes.manager as manager

    _timed(manager, "run_pipeline", "passes")
    _timed(cpu.CpuTarget, "lower", "lower")
    import fusegraph.targets.cpu.onednn.matmul as matmul
    import fusegraph.targets.cpu.onednn.primitives as primitives

    for owner in (dnnl, primitives, matmul):
        if hasattr(owner, "pack"):
            _timed(owner, "pack", "lower: pack weights")
    _timed(dnnl.Primitive, "_create", "lower: oneDNN create")
    _timed(dnnl.Primitive, "_finish", "lower: oneDNN create")
    _timed(lowering.LowerContext, "finish", "lower: C library (generate, build or cache)")


def feeds(model: str, size: int) -> dict[str, np.ndarray]:
    if model == "bert_base":
        from fusegraph.models import sample_inputs

        return sample_inputs("bert_base", batch=1, seed=0, seq=size)
    return {"images": np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="yolov8n", choices=["yolov8n", "bert_base"])
    ap.add_argument("--shapes", default="320,352,384,416")
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    args = ap.parse_args()
    import fusegraph
    from benchmarks.dynamic_stream import SEQ, SIZES, model_bytes
    from fusegraph.ir import Dim

    instrument()
    if args.model == "bert_base":
        dyn = {k: [1, Dim(*SEQ)] for k in ("input_ids", "attention_mask", "token_type_ids")}
    else:
        dyn = {"images": [1, 3, Dim(SIZES[0], SIZES[-1]), Dim(SIZES[0], SIZES[-1])]}
    program = fusegraph.parse_onnx(model_bytes(args.model), map_dyn_input_dims=dyn)
    program.compile("cpu", fusegraph.CompileOptions(dynamic_cache_size=16))
    exe = program.executable
    rows = []
    for size in (int(s) for s in args.shapes.split(",")):
        f = feeds(args.model, size)
        PHASES.clear()
        t0 = time.perf_counter()
        with contextlib.nullcontext():
            exe.executable_for({k: v.shape for k, v in f.items()})
        total = time.perf_counter() - t0
        phases = dict(PHASES)
        lower = phases.get("lower", 0.0)
        phases["lower: rest"] = lower - sum(v for k, v in phases.items() if k.startswith("lower:"))
        t1 = time.perf_counter()
        exe.run(f)
        t2 = time.perf_counter()
        exe.run(f)
        t3 = time.perf_counter()
        row = {"shape": size, "specialization_s": total, **{k: round(v, 4) for k, v in sorted(phases.items())},
               "first_run_s": t2 - t1, "second_run_s": t3 - t2,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
