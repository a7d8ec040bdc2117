"""Whole programs on the cpu target against the ref target: the kernels' layout contracts (views the
IR describes, strides known only at run time) and half precision rounded where the reference rounds."""

from __future__ import annotations

import textwrap

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir import Program
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(7)
n = helper.make_node
BF16 = np.dtype(ml_dtypes.bfloat16)


def both(model, inputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return run_fusegraph(model, inputs, "cpu"), run_fusegraph(model, inputs, "ref")


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Bitwise equal (NaN equal to NaN), dtypes included."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_pointwise_reads_a_broadcast_whose_strides_are_known_only_at_run_time():
    # ReduceLogSumExp with axes as an input: x - max(x) broadcasts a dynamic-shaped max against x,
    # so the fused kernel's second input is a stride-0 view where the IR could only promise a layout
    model = make_model([n("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=1)],
                       {"x": rng.standard_normal((3, 2, 2)), "axes": np.array([1], np.int64)}, ["y"], opset=18)
    inputs = {"x": rng.standard_normal((3, 2, 2)), "axes": np.array([1], np.int64)}
    got, want = both(model, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_a_transposed_view(log):
    # the kernel reads its input where it lies: a transpose is a strided view, not a copy
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             n("LogSoftmax" if log else "Softmax", ["t"], ["s"], axis=-1),
             n("Transpose", ["s"], ["y"], perm=[0, 2, 1])]
    x = rng.standard_normal((3, 5, 2)).astype(np.float32) * 4
    got, want = both(make_model(nodes, {"x": x}, ["y"]), {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)  # log_softmax cancels near 0


def test_matmul_with_a_run_time_shape():
    # a dynamic dim: no fixed-shape oneDNN primitive, numpy's matmul on whatever comes
    p = Program.from_text(textwrap.dedent("""\
        module main
          %0 = @param[param_name='a'] : float32[2,{1..6},3]
          %1 = @param[param_name='b'] : float32[2,3,5]
          %2 = dot(%0, %1) : float32[2,{1..6},5]
          @return(%2)
    """))
    p.compile(fusegraph.get_target("cpu"))
    a, b = rng.standard_normal((2, 4, 3)).astype(np.float32), rng.standard_normal((2, 3, 5)).astype(np.float32)
    np.testing.assert_allclose(p.run({"a": a, "b": b})[0], a @ b, rtol=1e-6, atol=1e-6)


def assert_rounded_once(got: np.ndarray, exact: np.ndarray) -> None:
    """`got` (float16) is `exact` (float64) rounded to float16 once: within one of its ulps."""
    want = exact.astype(np.float16)
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    assert got.dtype == np.float16 and np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= ulp)


def check_half(model, inputs: dict, exact: np.ndarray) -> None:
    """float16 computes in float32 (widen_half, as ONNX Runtime's CPU provider): `exact` rounded
    once; bfloat16 rounds each step to bfloat16, as the reference does (bfloat16 sums round every
    step, in order), as numpy does on bfloat16 arrays: the reference's bits."""
    got, want = both(model, inputs)
    if got[0].dtype == np.float16:
        assert_rounded_once(got[0], exact)
    else:
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_half_softmax(dtype):
    # scale, mask, softmax in one fused_reduce
    nodes = [n("Mul", ["x", "c"], ["m"]), n("Add", ["m", "mask"], ["a"]), n("Softmax", ["a"], ["y"], axis=-1)]
    x = rng.random((2, 3, 8, 40)).astype(dtype)
    mask = np.where(rng.random((1, 1, 8, 40)) < 0.2, -np.inf, 0).astype(dtype)
    model = make_model(nodes, {"x": x, "mask": mask}, ["y"], {"c": np.array(0.59375, dtype)})
    a = x.astype(np.float64) * 0.59375 + mask.astype(np.float64)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    check_half(model, {"x": x, "mask": mask}, e / e.sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "LogSoftmax"])
def test_half_reductions(dtype, op):
    # 300 terms: a bfloat16 sum rounded at every step drifts far from the float32 sum
    x = (rng.random((4, 300)) + 0.5).astype(dtype)
    # ReduceSum takes its axes as an input from opset 13, ReduceMean from opset 18
    attrs = {"axis": -1} if op == "LogSoftmax" else {"axes": [1], "keepdims": 1} if op == "ReduceMean" else {"keepdims": 1}
    reduce = n(op, ["s", "axes"], ["y"], **attrs) if op == "ReduceSum" else n(op, ["s"], ["y"], **attrs)
    nodes = [n("Mul", ["x", "x"], ["s"]), reduce]
    init = {"axes": np.array([1], np.int64)} if op == "ReduceSum" else {}
    s = x.astype(np.float64) ** 2
    m = s.max(1, keepdims=True)
    exact = {"ReduceSum": lambda: s.sum(1, keepdims=True), "ReduceMean": lambda: s.mean(1, keepdims=True),
             "LogSoftmax": lambda: s - m - np.log(np.exp(s - m).sum(1, keepdims=True))}[op]()
    check_half(make_model(nodes, {"x": x}, ["y"], init, opset=17), {"x": x}, exact)


def test_pointwise_input_whose_size_1_dim_has_another_stride():
    """A size-1 dim's stride is never read, so such inputs take the generated kernel's fast path."""
    from fusegraph.ir import DType, Shape, make_op

    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [4, 1, 8]))
    m.add_return(m.add(make_op("exp"), m.add(make_op("relu"), x)))
    p.compile(fusegraph.get_target("cpu"))
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)[:, None, :]  # numpy: stride 0
    assert a.strides[1] != 8 * 4  # not the standard stride the IR promises
    standard = np.empty((4, 1, 8), np.float32)
    standard[...] = a
    assert standard.strides == (32, 32, 4)
    got = p.run({"x": a})[0]
    np.testing.assert_array_equal(got, p.run({"x": standard})[0])  # the same kernel, the same bits
    np.testing.assert_allclose(got, np.exp(np.maximum(a, 0)), rtol=1e-6)


def test_fused_reduction_left_to_numpy_writes_its_planned_buffer():
    # a reduction over a leading axis has no generated kernel: its body runs on the interpreter.
    # The reshape after it is a view the executable makes once over the reduction's planned buffer
    # (open_nsfw's spatial mean before its classifier), so the result must land in that buffer
    p = Program.from_text(textwrap.dedent("""\
        module main
          %0 = @param[param_name='x'] : float32[4,3]
          %1 = fused_reduce[axes=(0,)](%0) <body> : float32[1,3]
          %2 = reshape[dims=(3,)](%1) : float32[3]
          %3 = exp(%2) : float32[3]
          @return(%3)
        module body parent main
          %4 = @param[param_name='x0'] : float32[4,3]
          %5 = exp(%4) : float32[4,3]
          %6 = reduce_sum[axes=(0,)](%5) : float32[1,3]
          @return(%6)
    """))
    p.compile(fusegraph.get_target("cpu"), fusegraph.CompileOptions(optimize=False))
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(p.run({"x": x})[0], np.exp(np.exp(x).sum(0)), rtol=1e-6)


@pytest.mark.parametrize("nodes, inits", [
    # MobileViT's attention over a one-token axis: softmax of one value (1, NaN for NaN or infinity)
    ([n("Div", ["x", "s"], ["d"]), n("Softmax", ["d"], ["y"], axis=3)], {"s": np.array([2.0], np.float32)}),
    ([n("LogSoftmax", ["x"], ["y"], axis=2)], {}),
    ([n("ReduceMean", ["x", "ax"], ["m"], keepdims=1), n("Sub", ["x", "m"], ["y"])], {"ax": np.array([3], np.int64)}),
], ids=["softmax", "log_softmax", "centred"])
def test_a_reduction_over_size_1_axes_is_generated_c(nodes, inits):
    """A row of one element: the generator's loops run once (it refused these, and the body ran on
    the interpreter: six such softmaxes were half of MobileViT's run)."""
    x = rng.standard_normal((4, 2, 1, 1)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 1, 0, 0], x[2, 0, 0, 0] = np.nan, np.inf, -np.inf
    model = make_model(nodes, {"x": x}, ["y"], inits, opset=18)
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    kernels = [s.fn.__qualname__ for s in p.executable.main.steps]
    assert kernels and not any(k.startswith("reference_kernel") for k in kernels)
    assert_same([np.asarray(p.run({"x": x})[0])], run_fusegraph(model, {"x": x}, "ref"))
