"""float16/bfloat16 convolutions on the cpu target: computed in float32 through oneDNN (widen_half;
a half convolution left alone, kernels/widened.py, converts around it: codegen/convert.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.native_program import PRIMITIVE, Region
from tests.util import make_model, run_ort, target_or_skip

rng = np.random.default_rng(5)
n = helper.make_node


def _model():
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float16)
    init = {"w1": (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float16),
            "w2": (rng.standard_normal((16, 4, 3, 3)) * 0.3).astype(np.float16),  # 4 groups
            "w3": (rng.standard_normal((4, 16, 1, 1)) * 0.3).astype(np.float16)}
    nodes = [n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=4),
             n("Conv", ["c2", "w3"], ["out"])]
    return make_model(nodes, {"x": x}, ["out"], init), x


def _compiled_quietly(model):
    """The model on cpu (no "slow half precision" warning: these have fast kernels) and on ref."""
    p = fusegraph.parse_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p.compile(target_or_skip("cpu"))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    return p, ref


def _within_an_ulp(got, want):
    # float32 sums in another order than the reference's: a result may round to the next half value
    assert got.dtype == want.dtype and got.dtype in (np.float16, np.dtype("bfloat16"))
    ulp = np.spacing(np.abs(want)).astype(np.float32)
    assert np.all(np.abs(got.astype(np.float32) - want.astype(np.float32)) <= ulp)


def test_half_convolutions_compute_in_float32_as_onnxruntime(monkeypatch):
    # three convolutions and a relu in float32 (ONNX Runtime's CPU provider computes float16 so too),
    # rounded to float16 once, at the output: within an ulp of ORT's, not of the reference's
    # op-by-op roundings
    model, x = _model()
    p, _ = _compiled_quietly(model)
    got = p.run({"x": x})[0]
    _within_an_ulp(got, run_ort(model, {"x": x})[0])
    (row,) = p.executable.main.thread_plan()[0]  # the convolutions and the relu between: one C call
    assert isinstance(row[0], Region) and PRIMITIVE in {c.kind for c in row[0].table}
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")  # the steps: the same bits
    steps = fusegraph.parse_onnx(model)
    steps.compile(target_or_skip("cpu"))
    np.testing.assert_array_equal(steps.run({"x": x})[0], got)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_generated_conversions_round_as_numpy_does(dtype):
    # the conversions around the float32 convolution give numpy's bits, ties and overflow included
    import ctypes

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.cpu.codegen import build_library
    from fusegraph.targets.cpu.codegen.convert import convert_kernel

    half = DType(dtype)
    v = np.concatenate([rng.standard_normal(4000).astype(np.float32) * 10 ** rng.uniform(-8, 6, 4000).astype(np.float32),
                        np.array([65504, 65520, 70000, -65520, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 3e38,
                                  np.inf, -np.inf], np.float32)])
    narrow, widen = convert_kernel(DType.float32, half), convert_kernel(half, DType.float32)
    lib = build_library([narrow, widen], threads=1)
    got, back = np.empty(v.shape, half.np), np.empty(v.shape, np.float32)
    n = (ctypes.c_int64 * 1)(v.size)
    lib[narrow.name]._fn((ctypes.c_void_p * 2)(got.ctypes.data, v.ctypes.data), n, 1)
    lib[widen.name]._fn((ctypes.c_void_p * 2)(back.ctypes.data, got.ctypes.data), n, 1)
    with np.errstate(over="ignore"):  # (past float16's range: infinity, as it should)
        want = v.astype(half.np)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(back, want.astype(np.float32))
    every = np.arange(1 << 16, dtype=np.uint16).view(half.np)  # every half value widens exactly
    wide = np.empty(every.shape, np.float32)
    lib[widen.name]._fn((ctypes.c_void_p * 2)(wide.ctypes.data, every.ctypes.data), (ctypes.c_int64 * 1)(every.size), 1)
    np.testing.assert_array_equal(wide, every.astype(np.float32))


def test_half_average_poolings_round_like_the_reference():
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float16)
    nodes = [n("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("GlobalAveragePool", ["a"], ["out"])]
    model = make_model(nodes, {"x": x}, ["a", "out"])
    p, ref = _compiled_quietly(model)
    for got, want in zip(p.run({"x": x}), ref.run({"x": x}), strict=True):
        _within_an_ulp(got, want)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region)


def test_a_half_product_of_a_transposed_key_stays_native():
    # attention's scores in float16: q @ k^T, k^T a transposed view: copied dense, widened, multiplied
    q = rng.standard_normal((2, 6, 8)).astype(np.float16)
    k = rng.standard_normal((2, 6, 8)).astype(np.float16)
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q", "kt"], ["out"])]
    model = make_model(nodes, {"q": q, "k": k}, ["out"])
    p, ref = _compiled_quietly(model)
    _within_an_ulp(p.run({"q": q, "k": k})[0], ref.run({"q": q, "k": k})[0])
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and PRIMITIVE in {c.kind for c in row[0].table}
