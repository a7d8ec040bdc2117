"""How far the cpu target's oneDNN int8 kernels are from the float definition of each QDQ layer.

    python benchmarks/int8_exactness.py MODEL.onnx [MODEL.onnx ...] [--seed 0] [--size 320] [--no-write]

Compiles MODEL (a QDQ model, e.g. from `benchmarks/quantization.py`'s recipe) for the cpu target,
evaluates the compiled IR on the reference interpreter (each int8 op's numpy reference is its
region's float math: dequantize, float conv/matmul, quantize), and feeds every int8 op's kernel the
very inputs the interpreter saw. Per layer: how many outputs differ and by how many quantization
steps. The int8 kernels sum exactly where the float definition rounds partial sums, so a value
within float rounding of a rounding edge may land one step over: the bound is one step.
Writes benchmarks/results/int8_exactness-<host>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402


class _Keep:
    """A profile observer that keeps every value."""

    def __init__(self):
        self.values = {}

    def clock(self):
        return time.perf_counter()

    def step(self, uid, t0, t1, value):
        self.values[uid] = value


def measure(path: str, seed: int, size: int) -> dict:
    import onnx

    import fusegraph
    from fusegraph.targets.cpu.lowering import LowerContext, lower_instruction
    from fusegraph.targets.ref.interpreter import run_module

    model = onnx.load(path)
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        # a symbolic batch is 1, other symbolic dims (an image's height, width) `size`
        dims = [d.dim_value or (1 if k == 0 else size) for k, d in enumerate(vi.type.tensor_type.shape.dim)]
        feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    p = fusegraph.parse_onnx(model, map_input_dims={k: list(v.shape) for k, v in feeds.items()})
    options = fusegraph.CompileOptions(threads=1)
    p.compile(fusegraph.get_target("cpu"), options)
    keep = _Keep()
    run_module(p.main, feeds, observer=keep)
    ctx = LowerContext(options, 1)
    layers = []
    for ins in p.main:
        if not ins.op.name.startswith("int8_"):
            continue
        kernel = lower_instruction(ins, ctx)
        args = [i.literal if i.is_literal else feeds[i.op.param_name] if i.is_param else keep.values[i.uid]
                for i in ins.inputs]
        got = np.asarray(kernel(args, None))
        want = keep.values[ins.uid]
        step = ins.op.y_scale if ins.op.out_type.name != "float32" else None
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        layers.append({"op": ins.op.name, "shape": list(ins.shape.lens), "out_type": str(ins.op.out_type),
                       "differing": int(np.count_nonzero(diff)), "elements": int(diff.size),
                       "max_steps": float(diff.max()) if step else None,
                       "max_rel": None if step else float(diff.max() / max(np.abs(want).max(), 1e-30))})
    n_diff = sum(x["differing"] for x in layers)
    n_all = sum(x["elements"] for x in layers)
    worst = max((x["max_steps"] or 0 for x in layers), default=0)
    print(f"{Path(path).name}: {len(layers)} int8 layers; {n_diff} of {n_all} outputs differ from the float "
          f"definition ({n_diff / max(n_all, 1):.2e}); at most {worst:g} step(s)")
    return {"model": Path(path).name, "layers": layers, "differing": n_diff, "elements": n_all, "max_steps": worst}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=320, help="symbolic dims other than the batch")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    rows = [measure(path, a.seed, a.size) for path in a.models]
    if not a.no_write:
        print("wrote", write_results("int8_exactness", {"seed": a.seed, "size": a.size, "models": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
