"""The cpu target says at compile that half-precision products run on reference kernels (never a
silent 20x slowdown), and still computes what was asked."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.targets.cpu.precision import HalfPrecisionWarning
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


def test_fp16_option_warns_naming_the_ops_and_the_way_out():
    _, caught = _compile(_deconv(TensorProto.FLOAT), fp16=True)
    (w,) = caught
    assert "deconvolution x1" in str(w.message) and "compiled with fp16" in str(w.message) and "without --fp16" in str(w.message)


def test_float16_model_warns_and_still_matches_ref():
    model = _deconv(TensorProto.FLOAT16)
    p, caught = _compile(model)
    assert len(caught) == 1 and "the model computes in float16" in str(caught[0].message)
    x = {"x": np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float16)}
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(x)[0], ref.run(x)[0])


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
