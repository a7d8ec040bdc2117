"""Generated C kernels (the cpu target's fused pointwise and reduction kernels) vs numpy and ONNX Runtime.

    python benchmarks/codegen_vs_numpy.py [--threads N] [--reps 50] [--no-ort]

Each case is a small ONNX graph of BERT-base or ResNet-50 size, parsed and run through fusegraph's
generic pipeline; the one fused instruction that comes out is compiled by `targets/cpu/codegen` and
called through a bound (zero-allocation) call. Variants, all in this process, round-robin, after
warm-up, medians reported:
  codegen      the generated kernel with --threads threads (and "codegen 1t" with one)
  numpy ref    fusegraph's reference for that fused instruction (what the ref target runs)
  numpy best   hand-written numpy for the same math, in place where numpy allows
  ORT          the same ONNX graph in ONNX Runtime (all graph optimizations: it fuses BiasGelu,
               SkipLayerNormalization, ...), --threads intra-op threads, IO-bound buffers
Outputs are checked to agree first. Writes benchmarks/results/codegen_vs_numpy-<host>.json.

Both runtimes' idle workers spin after a call (libgomp's and ORT's defaults), so when they alternate
with as many threads as cores, each call finds the other's workers on its cores. --passive makes
both sleep instead (OMP_WAIT_POLICY=passive, ORT's allow_spinning=0): a deployment runs one runtime.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from fusegraph.passes import PassManager, generic_pipeline  # noqa: E402
from fusegraph.targets.cpu import codegen as cg  # noqa: E402
from fusegraph.targets.ref.interpreter import evaluate as ref_evaluate  # noqa: E402
from tests.util import make_model  # noqa: E402

n = helper.make_node
SQRT2 = np.float32(np.sqrt(2.0))


def _gelu_numpy(x, b, out):
    np.add(x, b, out=out)
    t = (out / SQRT2).astype(np.float64)  # numpy has no float32 erf; scipy's is used when present
    try:
        from scipy.special import erf
    except ImportError:
        return out
    out *= (1.0 + erf(t).astype(np.float32)) * 0.5
    return out


def _layernorm_numpy(x, r, g, b, out):
    np.add(x, r, out=out)
    mean = out.mean(-1, keepdims=True)
    out -= mean
    var = np.mean(out * out, -1, keepdims=True)
    out *= g / np.sqrt(var + np.float32(1e-5))  # broadcast over rows
    out += b
    return out


def _softmax_numpy(x, mask, out):
    np.multiply(x, np.float32(0.125), out=out)
    out += mask
    out -= out.max(-1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(-1, keepdims=True)
    return out


def _bias_relu_numpy(x, b, out):
    np.add(x, b, out=out)
    return np.maximum(out, 0, out=out)


def cases(rng):
    """name: (nodes, inputs, initializers, hand-written numpy(inputs..., out))."""
    x = rng.standard_normal((1, 128, 3072)).astype(np.float32)
    h = rng.standard_normal((1, 128, 768)).astype(np.float32)
    s = rng.standard_normal((1, 12, 128, 128)).astype(np.float32) * 4
    mask = np.where(rng.random((1, 1, 1, 128)) < 0.1, -1e4, 0).astype(np.float32)
    img = rng.standard_normal((1, 256, 56, 56)).astype(np.float32)
    f32 = np.float32
    return {
        "GELU(x+b) 128x3072": (
            [n("Add", ["x", "b"], ["s"]), n("Div", ["s", "sq2"], ["d"]), n("Erf", ["d"], ["e"]),
             n("Add", ["e", "one"], ["e1"]), n("Mul", ["s", "e1"], ["m"]), n("Mul", ["m", "half"], ["y"])],
            {"x": x}, {"b": rng.standard_normal(3072).astype(f32), "sq2": np.array(SQRT2), "one": np.array(f32(1)),
                       "half": np.array(f32(0.5))},
            lambda v, out: _gelu_numpy(v["x"], v["b"], out)),
        "LayerNorm(x+r) 128x768": (
            [n("Add", ["x", "r"], ["s"]), n("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
            {"x": h, "r": rng.standard_normal(h.shape).astype(f32)},
            {"g": rng.standard_normal(768).astype(f32), "b": rng.standard_normal(768).astype(f32)},
            lambda v, out: _layernorm_numpy(v["x"], v["r"], v["g"], v["b"], out)),
        "Softmax(x/8+mask) 12x128x128": (
            [n("Mul", ["x", "c"], ["m"]), n("Add", ["m", "mask"], ["a"]), n("Softmax", ["a"], ["y"], axis=-1)],
            {"x": s, "mask": mask}, {"c": np.array(f32(0.125))},
            lambda v, out: _softmax_numpy(v["x"], v["mask"], out)),
        "ReLU(x+b) 1x256x56x56": (
            [n("Add", ["x", "b"], ["s"]), n("Relu", ["s"], ["y"])],
            {"x": img}, {"b": rng.standard_normal((1, 256, 1, 1)).astype(f32)},
            lambda v, out: _bias_relu_numpy(v["x"], v["b"], out)),
    }


def fused_instruction(model, feeds):
    """The pipeline's one fused instruction, and the values of its inputs (from the ref interpreter)."""
    p = fusegraph.parse_onnx(model)
    PassManager().run(p, generic_pipeline())
    env, fused = {}, []
    for ins in p.main.instructions:
        if ins.op.name == "@param":
            env[ins.uid] = feeds[ins.op.param_name]
        elif ins.op.name == "@literal":
            env[ins.uid] = ins.op.value
        elif ins.op.name != "@return":
            if ins.op.name in ("fused_pointwise", "fused_reduce"):
                fused.append((ins, [env[i.uid] for i in ins.inputs]))
            env[ins.uid] = ref_evaluate(ins, [env[i.uid] for i in ins.inputs], env)
    kinds = [i.op.name for i in p.main.instructions if i.op.kind.name not in ("BUILTIN", "MOVEMENT")]
    if len(fused) != 1 or len(kinds) != 1:  # views (broadcasts of constants) cost nothing
        raise SystemExit(f"expected one fused instruction, the pipeline gave {kinds}")
    return (*fused[0], env)


def kernel_source(ins):
    if ins.op.name == "fused_reduce":
        return cg.reduce_kernel(ins.module_args[0], ins.op.axes)
    return cg.pointwise_kernel_for(ins.op.expr, [i.shape for i in ins.inputs], ins.shape)[0]


def ort_bound(model, feeds, out, threads, passive):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if passive:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    io.bind_output(sess.get_outputs()[0].name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
    return lambda: sess.run_with_iobinding(io)


def alternate(variants: dict, reps: int, warmup: int = 5) -> dict[str, float]:
    """Median seconds of each variant, run round-robin so that drift hits all of them alike."""
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=cg.build.default_threads())
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-ort", dest="ort", action="store_false")
    ap.add_argument("--passive", action="store_true", help="idle worker threads sleep instead of spinning")
    a = ap.parse_args()
    if a.passive:  # read by libgomp when the kernel library loads it
        os.environ["OMP_WAIT_POLICY"] = "passive"
    rng = np.random.default_rng(0)
    prepared = {}
    for name, (nodes, inputs, inits, hand) in cases(rng).items():
        model = make_model(nodes, inputs, ["y"], inits)
        ins, args, env = fused_instruction(model, inputs)
        prepared[name] = (model, inputs, inits, hand, ins, args, env[ins.uid], kernel_source(ins))
    t0 = time.perf_counter()
    lib = cg.build_library([p[-1] for p in prepared.values()], threads=a.threads)
    build_s = time.perf_counter() - t0
    rows = []
    for name, (model, inputs, inits, hand, ins, args, want, src) in prepared.items():
        outs = {k: np.empty(ins.shape.lens, np.float32) for k in ("cg", "cg1", "hand", "ort")}
        variants = {
            "codegen": lib[src.name].bind(outs["cg"], *args),
            "codegen 1t": lib[src.name].bind(outs["cg1"], *args, threads=1),
            "numpy ref": lambda ins=ins, args=args: ref_evaluate(ins, args, {}),
            "numpy best": lambda hand=hand, v={**inputs, **inits}, out=outs["hand"]: hand(v, out),
        }
        if a.ort:
            variants["ORT"] = ort_bound(model, inputs, outs["ort"].reshape(want.shape), a.threads, a.passive)
        for fn in variants.values():
            fn()
        for k in ("cg", "cg1") + (("ort",) if a.ort else ()):
            np.testing.assert_allclose(outs[k], want, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {k}")
        med = alternate(variants, a.reps)
        row = {"case": name, "kernel": src.name, "ms": {k: v * 1e3 for k, v in med.items()}}
        row["codegen / numpy best"] = med["codegen"] / med["numpy best"]
        if a.ort:
            row["codegen / ORT"] = med["codegen"] / med["ORT"]
        rows.append(row)
    cols = list(rows[0]["ms"])
    print(f"threads {a.threads}{' (passive)' if a.passive else ''}, reps {a.reps}, one library of {len(rows)} kernels built in {build_s:.2f} s "
          "(0 when cached); medians in ms")
    print(f"{'case':32}" + "".join(f"{c:>12}" for c in cols) + f"{'cg/np best':>12}" + (f"{'cg/ORT':>9}" if a.ort else ""))
    for r in rows:
        line = f"{r['case']:32}" + "".join(f"{r['ms'][c]:12.3f}" for c in cols) + f"{r['codegen / numpy best']:12.2f}"
        print(line + (f"{r['codegen / ORT']:9.2f}" if a.ort else ""))
    path = write_results("codegen_vs_numpy", {"threads": a.threads, "passive": a.passive, "reps": a.reps,
                                               "build_seconds": build_s,
                                               "cpu_affinity": len(os.sched_getaffinity(0)), "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
