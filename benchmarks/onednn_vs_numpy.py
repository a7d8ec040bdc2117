"""oneDNN (the cpu target's kernel library) against numpy's BLAS and ONNX Runtime, kernel by kernel.

    python benchmarks/onednn_vs_numpy.py [--threads N] [--reps 30] [--sections layers,bert,resnet]
        [--peers numpy,ort] [--bf16] [--ort-spin on|off] [--omp-wait default|passive|active] [--blocks]

layers: ResNet-50 convs at batch 1, 224^2 (stem, and per stage the 1x1 reduce, the 3x3, the 1x1
  expand), each with bias + ReLU fused: oneDNN with plain NCHW in/out, oneDNN with its own ("any",
  blocked) activation layout, numpy (im2col + np.matmul, bias and ReLU in place), ORT (one Conv+Relu node).
bert: BERT-base matmuls at seq 128 (dense + bias, FFN up + bias + GELU, FFN down + bias; attention's
  batched Q @ K^T and P @ V): oneDNN with packed weights and fused epilogues, numpy, ORT.
resnet: the whole ResNet-50 (BN folded, random weights) as a chain of oneDNN primitives in NCHW, in
  NHWC and in oneDNN's layout (reorders only at the edges), against ORT on the same weights (checked
  to agree first).
Every variant runs in this process, alternating, after warm-up; medians are reported, with GFLOP/s.
ORT's single-node times include its NCHW <-> NCHWc reorders: the whole-network row is the fair one.
--bf16 adds oneDNN variants that may compute in bf16 (AMX), fp32 in and out: not fp32-exact.
Writes benchmarks/results/onednn_vs_numpy-<host>.json.
"""

from __future__ import annotations

import os

# Idle worker threads of one runtime must not spin on the cores the next one needs (on 2 cores a
# spinning OpenBLAS or ORT worker halves oneDNN's speed, and OpenMP's static split waits for it):
# OpenBLAS reads this when numpy loads; ORT's spinning is a session option (--ort-spin).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import write_results  # noqa: E402
from benchmarks.onednn_resnet import ResNetChain, ort_resnet  # noqa: E402
from fusegraph.targets.cpu import onednn as dnnl  # noqa: E402

RESNET_CONVS = [  # name, C in, C out, H = W in, kernel, stride
    ("stem 7x7/2", 3, 64, 224, 7, 2),
    ("s1 1x1 reduce", 256, 64, 56, 1, 1), ("s1 3x3", 64, 64, 56, 3, 1), ("s1 1x1 expand", 64, 256, 56, 1, 1),
    ("s2 3x3/2", 128, 128, 56, 3, 2), ("s2 1x1 reduce", 512, 128, 28, 1, 1), ("s2 3x3", 128, 128, 28, 3, 1),
    ("s2 1x1 expand", 128, 512, 28, 1, 1),
    ("s3 1x1 reduce", 1024, 256, 14, 1, 1), ("s3 3x3", 256, 256, 14, 3, 1), ("s3 1x1 expand", 256, 1024, 14, 1, 1),
    ("s4 1x1 reduce", 2048, 512, 7, 1, 1), ("s4 3x3", 512, 512, 7, 3, 1), ("s4 1x1 expand", 512, 2048, 7, 1, 1),
]
BERT_MATMULS = [  # name, a shape, b shape (constant when 2-D), epilogue
    ("dense 128x768x768 +bias", (128, 768), (768, 768), "bias"),
    ("ffn up 128x768x3072 +bias+gelu", (128, 768), (768, 3072), "gelu"),
    ("ffn down 128x3072x768 +bias", (128, 3072), (3072, 768), "bias"),
    ("scores 12x(128x64x128)", (12, 128, 64), (12, 64, 128), None),
    ("context 12x(128x128x64)", (12, 128, 128), (12, 128, 64), None),
]


ORT_SPIN = False  # whether ORT's idle workers spin (ORT's default, off here: --ort-spin)
BLOCKS = False   # time each variant back to back instead of alternating


def alternate(variants: dict, reps: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds of each variant, run round-robin so that drift hits all of them alike (or, with
    --blocks, each variant's runs back to back: no runtime's idle threads in the way of another's)."""
    times = {k: [] for k in variants}
    rounds = [variants] if not BLOCKS else [{k: fn} for k, fn in variants.items()]
    for group in rounds:
        for _ in range(warmup):
            for fn in group.values():
                fn()
        for _ in range(reps):
            for k, fn in group.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not ORT_SPIN:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_bound(sess, feeds: dict[str, np.ndarray], out: np.ndarray):
    """ORT run over preallocated buffers (IO binding): its kernels' time, no output allocation."""
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    io.bind_output(sess.get_outputs()[0].name, "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    return lambda: sess.run_with_iobinding(io)


def single_node_model(op: str, inputs: dict[str, tuple], consts: dict[str, np.ndarray], post: str | None, **attrs):
    from onnx import TensorProto, helper, numpy_helper

    names = list(inputs) + list(consts)
    nodes = [helper.make_node(op, names, ["y0" if post else "y"], **attrs)]
    if post == "relu":
        nodes.append(helper.make_node("Relu", ["y0"], ["y"]))
    elif post == "gelu":  # the opset-20 Gelu op; ORT runs it as one kernel after the Gemm
        nodes.append(helper.make_node("Gelu", ["y0"], ["y"]))
    graph = helper.make_graph(
        nodes, "one", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)  # ORT >= 1.16 reads it


# -- numpy peers ------------------------------------------------------------------------------------
def numpy_conv(x, w2d, bias, k, s, p, out):
    """im2col (one strided copy) + np.matmul into `out`, bias and ReLU in place: numpy's best."""
    n, c, h, _ = x.shape
    oh = out.shape[2]
    if k == 1 and s == 1:
        cols = x.reshape(c, h * h)
    else:
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
        win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
        cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(c * k * k, oh * oh)
    y = out.reshape(w2d.shape[0], oh * oh)
    np.matmul(w2d, cols, out=y)
    y += bias[:, None]
    np.maximum(y, 0, out=y)


def numpy_matmul(x, w, bias, epi, y):
    np.matmul(x, w, out=y)
    if bias is not None:
        y += bias
    if epi == "gelu":  # the tanh form: numpy has no erf
        y *= 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))


# -- sections ---------------------------------------------------------------------------------------
def bench_layers(a, rng) -> list[dict]:
    rows = []
    for name, cin, cout, hw, k, s in RESNET_CONVS:
        p = k // 2
        x = rng.standard_normal((1, cin, hw, hw), dtype=np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        geo = dict(stride=(s, s), padding=(p,) * 4, post_ops=[dnnl.Eltwise("relu")], threads=a.threads)
        plain = dnnl.Convolution(x.shape, w, b, **geo)
        blocked = dnnl.Convolution(x.shape, w, b, src_layout="any", dst_layout="any", **geo)
        xb = dnnl.Reorder(dnnl.MemDesc.of_array(x), blocked.src_desc)(x)
        y_plain, y_blk, y_np = plain.dst_desc.empty(), blocked.dst_desc.empty(), np.empty(plain.out_shape, np.float32)
        variants = {"onednn_nchw": partial(plain, x, out=y_plain), "onednn_blocked": partial(blocked, xb, out=y_blk)}
        if a.numpy:
            variants["numpy"] = partial(numpy_conv, x, w.reshape(cout, -1), b, k, s, p, y_np)
        if a.bf16:
            bf = dnnl.Convolution(x.shape, w, b, src_layout="any", dst_layout="any", fpmath="bf16", **geo)
            variants["onednn_blocked_bf16"] = partial(bf, xb, out=bf.dst_desc.empty())
        if a.ort:
            model = single_node_model("Conv", {"x": x.shape}, {"w": w, "b": b}, "relu", kernel_shape=[k, k],
                                      strides=[s, s], pads=[p] * 4)
            y_ort = np.empty(plain.out_shape, np.float32)
            variants["ort"] = ort_bound(ort_session(model, a.threads), {"x": x}, y_ort)
        ms = alternate(variants, a.reps)
        if a.ort:
            np.testing.assert_allclose(y_plain, y_ort, rtol=1e-3, atol=1e-3)
        if a.numpy:
            np.testing.assert_allclose(y_plain, y_np, rtol=1e-3, atol=1e-3)
        gflop = 2 * cout * cin * k * k * plain.out_shape[2] ** 2 / 1e9
        rows.append({"layer": name, "gflop": gflop, "impl_nchw": plain.impl, "impl_blocked": blocked.impl,
                     "blocked_layout": repr(blocked.dst_desc), "ms": {k: v * 1e3 for k, v in ms.items()}})
    return rows


def bench_bert(a, rng) -> list[dict]:
    rows = []
    for name, ash, bsh, epi in BERT_MATMULS:
        x = rng.standard_normal(ash, dtype=np.float32)
        w = (rng.standard_normal(bsh) / np.sqrt(ash[-1])).astype(np.float32)
        const = len(bsh) == 2
        bias = rng.standard_normal(bsh[-1]).astype(np.float32) if epi else None
        post = [dnnl.Eltwise("gelu_tanh")] if epi == "gelu" else []
        mm = dnnl.MatMul(ash, w if const else bsh, bias, post_ops=post, threads=a.threads)
        y_d, y_np = mm.dst_desc.empty(), np.empty(mm.out_shape, np.float32)

        variants = {"onednn": partial(mm, x, out=y_d) if const else partial(mm, x, w, out=y_d)}
        if a.numpy:
            variants["numpy"] = partial(numpy_matmul, x, w, bias, epi, y_np)
        if a.bf16:
            mb = dnnl.MatMul(ash, w if const else bsh, bias, post_ops=post, fpmath="bf16", threads=a.threads)
            args = (x,) if const else (x, w)
            variants["onednn_bf16"] = partial(mb, *args, out=mb.dst_desc.empty())
        if a.ort:
            if const:
                consts = {"w": w, "c": bias} if bias is not None else {"w": w}
                model = single_node_model("Gemm", {"x": ash}, consts, "gelu" if epi == "gelu" else None)
                feeds = {"x": x}
            else:
                model, feeds = single_node_model("MatMul", {"x": ash, "w": bsh}, {}, None), {"x": x, "w": w}
            y_ort = np.empty(mm.out_shape, np.float32)
            variants["ort"] = ort_bound(ort_session(model, a.threads), feeds, y_ort)
        ms = alternate(variants, a.reps)
        if a.numpy:
            np.testing.assert_allclose(y_d, y_np, rtol=1e-3, atol=1e-3)
        gflop = 2 * np.prod(mm.out_shape) * ash[-1] / 1e9
        rows.append({"matmul": name, "gflop": float(gflop), "impl": mm.impl, "ms": {k: v * 1e3 for k, v in ms.items()}})
    return rows


def bench_resnet(a, rng) -> dict:
    chains = {lay: ResNetChain(lay, a.threads, seed=0) for lay in ("nchw", "nhwc", "any")}
    if a.bf16:
        chains["any_bf16"] = ResNetChain("any", a.threads, seed=0, fpmath="bf16")
    x = rng.standard_normal((1, 3, 224, 224), dtype=np.float32)
    variants = {f"onednn_{k}": partial(c, x) for k, c in chains.items()}
    ref = chains["nchw"](x).copy()
    for k, c in chains.items():
        np.testing.assert_allclose(c(x), ref, rtol=1e-2 if "bf16" in k else 1e-3, atol=1e-2 if "bf16" in k else 1e-3)
    if a.ort:
        sess = ort_session(ort_resnet(chains["nchw"]), a.threads)
        y_ort = np.empty_like(ref)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref, rtol=1e-3, atol=1e-3)
        variants["ort"] = ort_bound(sess, {"x": x}, y_ort)
    ms = alternate(variants, max(a.reps // 2, 10))
    return {"gflop": chains["nchw"].gflop, "reorders_blocked": chains["any"].reorders,
            "ms": {k: v * 1e3 for k, v in ms.items()}}


def print_table(title: str, rows: list[dict], key: str) -> None:
    cols = list(rows[0]["ms"])
    print(f"\n{title}\n{key:<32}" + "".join(f"{c:>22}" for c in cols))
    for r in rows:
        cells = "".join(f"{r['ms'][c]:10.3f} ms {r['gflop'] / r['ms'][c] * 1e3:6.0f} GF/s" if c in r["ms"]
                        else f"{'-':>22}" for c in cols)
        print(f"{r[key]:<32}{cells}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=dnnl.default_threads())
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sections", default="layers,bert,resnet")
    ap.add_argument("--bf16", action="store_true", help="add oneDNN variants with bf16 math (AMX where present)")
    ap.add_argument("--peers", default="numpy,ort", help="comma list of peers to time beside oneDNN (or 'none')")
    ap.add_argument("--omp-wait", choices=["default", "passive", "active"], default="default",
                    help="OMP_WAIT_POLICY for oneDNN's OpenMP workers (read once, when libgomp starts)")
    ap.add_argument("--ort-spin", choices=["on", "off"], default="off", help="ORT's allow_spinning")
    ap.add_argument("--blocks", action="store_true", help="time variants back to back, not alternating")
    a = ap.parse_args()
    a.numpy, a.ort = "numpy" in a.peers, "ort" in a.peers
    if a.omp_wait != "default":  # read when libgomp starts, i.e. before libdnnl loads
        os.environ["OMP_WAIT_POLICY"] = a.omp_wait.upper()
    global ORT_SPIN, BLOCKS
    ORT_SPIN, BLOCKS = a.ort_spin == "on", a.blocks
    ok, why = dnnl.available()
    if not ok:
        print(why)
        return 2
    rng = np.random.default_rng(0)
    sections = a.sections.split(",")
    out: dict = {"threads": a.threads, "reps": a.reps, "peers": a.peers, "ort_spin": a.ort_spin, "blocks": a.blocks,
                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                 "openblas_thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")}
    if "layers" in sections:
        out["layers"] = bench_layers(a, rng)
        print_table("ResNet-50 convs, batch 1, +bias+ReLU (median)", out["layers"], "layer")
    if "bert" in sections:
        out["bert"] = bench_bert(a, rng)
        print_table("BERT-base matmuls, seq 128 (median)", out["bert"], "matmul")
    if "resnet" in sections:
        out["resnet"] = r = bench_resnet(a, rng)
        print_table("ResNet-50, whole network, batch 1 (median)", [{"net": "resnet50", **r}], "net")
        print(f"reorders in the blocked chain: {r['reorders_blocked']}")
    print("wrote", write_results("onednn_vs_numpy", out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
