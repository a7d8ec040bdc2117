"""Half precision on the cpu target: computed in float32 as ONNX Runtime's CPU provider does (the pass
widen_half: float32 speed, rounded at the program's edges), and a warning at compile should a
product or convolution still run in a half type on reference kernels (never a silent 20x slowdown)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.targets.cpu.precision import HalfPrecisionWarning, half_precision_ops
from tests.util import target_or_skip


def _matmul(dtype):
    """x[2, 8] @ w: a half product is widened to float32 through oneDNN (a fast kernel: no warning)."""
    np_dtype = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[dtype]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np_dtype), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", dtype, [2, 8])],
                          [helper.make_tensor_value_info("y", dtype, [2, 4])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _deconv(dtype):
    """A transposed convolution: in half precision still the numpy reference (the warning's case)."""
    np_dtype = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[dtype]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 2, 2)).astype(np_dtype), "w")
    g = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], "g",
                          [helper.make_tensor_value_info("x", dtype, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("y", dtype, None)], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _compile(model, **options):
    p = fusegraph.parse_onnx(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p.compile(target_or_skip("cpu"), fusegraph.CompileOptions(**options))
    return p, [w for w in caught if issubclass(w.category, HalfPrecisionWarning)]


def _ort(model, x):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]


def _within_one_half_ulp(got: np.ndarray, want: np.ndarray) -> bool:
    g, w = got.astype(np.float32), want.astype(np.float16).astype(np.float32)
    return bool(np.all(np.abs(g - w) <= np.spacing(np.abs(want.astype(np.float16))).astype(np.float32)))


def test_a_float16_model_computes_in_float32_as_onnxruntime():
    model = _deconv(TensorProto.FLOAT16)
    p, caught = _compile(model)
    assert caught == [] and not half_precision_ops(p.main)  # nothing left computing in half
    x = {"x": np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float16)}
    got = p.run(x)[0]
    assert got.dtype == np.float16 and _within_one_half_ulp(got, _ort(model, x))


def test_fp16_option_rounds_inputs_and_weights_and_computes_in_float32():
    # what --fp16 asks for on a cpu: half weights and inputs, float32 arithmetic, callers' float32 out
    p, caught = _compile(_deconv(TensorProto.FLOAT), fp16=True)
    assert caught == []
    x = np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float32)
    rounded = _deconv(TensorProto.FLOAT)
    w = numpy_helper.to_array(rounded.graph.initializer[0])
    rounded.graph.initializer[0].CopyFrom(numpy_helper.from_array(w.astype(np.float16).astype(np.float32), "w"))
    got = p.run({"x": x})[0]
    assert got.dtype == np.float32 and _within_one_half_ulp(got, _ort(rounded, {"x": x.astype(np.float16).astype(np.float32)}))


def test_a_product_left_in_half_warns_naming_the_ops_and_the_way_out(monkeypatch):
    monkeypatch.setenv("FUSEGRAPH_DISABLE_PASSES", "widen_half")
    _, caught = _compile(_deconv(TensorProto.FLOAT), fp16=True)
    (w,) = caught
    assert "deconvolution x1" in str(w.message) and "compiled with fp16" in str(w.message) and "without --fp16" in str(w.message)


@pytest.mark.parametrize("options", [{}, {"fp16": False}])
def test_float32_compiles_quietly(options):
    assert _compile(_deconv(TensorProto.FLOAT), **options)[1] == []


def test_a_static_float16_product_compiles_quietly_and_rounds_like_ref():
    model = _matmul(TensorProto.FLOAT16)
    p, caught = _compile(model)
    assert caught == []
    x = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float16)}
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    got, want = p.run(x)[0], ref.run(x)[0]
    assert got.dtype == np.float16  # float32 sums in oneDNN's order: at most the next float16
    assert np.all(np.abs(got.astype(np.float32) - want.astype(np.float32)) <= np.spacing(np.abs(want)).astype(np.float32))
