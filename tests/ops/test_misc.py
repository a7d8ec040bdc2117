"""CumProd, BitCast, Swish, SwiGLU and RotaryEmbedding against ONNX Runtime (SwiGLU, which it lacks,
against the ONNX node cases), and the ops' shape rules and errors."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import ParseError, ShapeError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape
from tests.helpers.node_cases import check_node_case, node_cases
from tests.util import make_model, node_check, run_fusegraph

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def op_names(model):
    return [i.op.name for i in fusegraph.parse_onnx(model).main.instructions]


# -- CumProd ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint64])
def test_cumprod(exclusive, reverse, dtype):
    x = rng.integers(1, 4, (3, 4)).astype(dtype)
    node_check("CumProd", {"x": x}, {"exclusive": exclusive, "reverse": reverse},
               initializers={"axis": np.array(-1, np.int32)}, opset=26)


def test_cumprod_axis_at_run_time():
    node_check("CumProd", {"x": randn(2, 3, 4), "axis": np.array(1, np.int64)}, {"reverse": 1}, opset=26)


def test_cumprod_shape_rule():
    assert make_op("cumprod", axis=1).infer_shape([Shape.of(DType.int64, [2, 3])]) == Shape.of(DType.int64, [2, 3])
    with pytest.raises(ShapeError, match="out of range"):
        make_op("cumprod", axis=2).infer_shape([Shape.of(DType.float32, [2, 3])])


# -- BitCast ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.INT32), (np.float16, TensorProto.UINT16),
                                    (np.float64, TensorProto.INT64), (np.int8, TensorProto.UINT8),
                                    (np.uint32, TensorProto.FLOAT)])
def test_bitcast(src, to):
    x = (rng.standard_normal((2, 3)) * 100).astype(src) if src != np.uint32 else rng.integers(0, 2**30, (2, 3),
                                                                                               dtype=np.uint32)
    node_check("BitCast", {"x": x}, {"to": to}, opset=26)


@pytest.mark.parametrize("x,to,expected", [
    (np.array([True, False]), TensorProto.UINT8, np.array([1, 0], np.uint8)),
    (np.array([-1, 7, -8], ml_dtypes.int4), TensorProto.UINT4, np.array([15, 7, 8], ml_dtypes.uint4)),
    (np.array(1.0, np.float32), TensorProto.INT32, np.array(0x3F800000, np.int32)),
])
def test_bitcast_bits(x, to, expected):
    """Types ONNX Runtime cannot bit-cast (bool, 4-bit): the bits themselves."""
    model = make_model([helper.make_node("BitCast", ["x"], ["y"], to=to)], {"x": x}, ["y"], opset=26)
    (out,) = run_fusegraph(model, {"x": x})
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out.astype(np.int64), expected.astype(np.int64))


def test_bitcast_needs_equal_widths():
    model = make_model([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT64)], {"x": randn(2)}, ["y"],
                       opset=26)
    with pytest.raises(ParseError, match="bit width"):
        fusegraph.parse_onnx(model)


# -- Swish, SwiGLU ----------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swish(alpha):
    node_check("Swish", {"x": randn(3, 4)}, {"alpha": alpha}, opset=24)


def test_swish_is_silu_for_alpha_one():
    model = make_model([helper.make_node("Swish", ["x"], ["y"])], {"x": randn(3)}, ["y"], opset=24)
    assert "silu" in op_names(model)


@pytest.mark.parametrize("name", sorted(node_cases("swiglu", "test_swiglu")))
def test_swiglu_node_cases(name):
    check_node_case(node_cases("swiglu", "test_swiglu")[name])


def test_swiglu_does_not_broadcast():
    ins = {"a": randn(2, 4), "b": randn(4)}
    model = make_model([helper.make_node("SwiGLU", ["a", "b"], ["y"])], ins, ["y"], opset=28)
    with pytest.raises(ShapeError, match="differ in shape"):
        fusegraph.parse_onnx(model)


# -- RotaryEmbedding --------------------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding_4d_with_positions(interleaved, rotary_dim):
    half = (rotary_dim or 8) // 2
    ins = {"x": randn(2, 4, 3, 8), "cos": randn(10, half), "sin": randn(10, half),
           "pos": rng.integers(0, 10, (2, 3))}
    node_check("RotaryEmbedding", ins, {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}, opset=23)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d_without_positions(interleaved):
    ins = {"x": randn(2, 3, 16), "cos": randn(2, 3, 4), "sin": randn(2, 3, 4)}
    node_check("RotaryEmbedding", ins, {"interleaved": interleaved, "num_heads": 2}, opset=23)


def test_rotary_embedding_dynamic_batch_and_sequence():
    ins = {"x": randn(2, 3, 16), "cos": randn(2, 3, 4), "sin": randn(2, 3, 4)}
    model = make_model([helper.make_node("RotaryEmbedding", list(ins), ["y"], num_heads=2)], ins, ["y"], opset=23)
    dyn = {k: [(1, 4), (1, 8), v.shape[2]] for k, v in ins.items()}
    static = run_fusegraph(model, ins)
    np.testing.assert_array_equal(run_fusegraph(model, ins, map_dyn_input_dims=dyn)[0], static[0])


def test_rotary_embedding_errors():
    ins = {"x": randn(2, 3, 16), "cos": randn(2, 3, 4), "sin": randn(2, 3, 4)}
    model = make_model([helper.make_node("RotaryEmbedding", list(ins), ["y"])], ins, ["y"], opset=23)
    with pytest.raises(ParseError, match="num_heads"):
        fusegraph.parse_onnx(model)
    ins = {"x": randn(1, 2, 3, 8), "cos": randn(1, 3, 3), "sin": randn(1, 3, 3)}
    model = make_model([helper.make_node("RotaryEmbedding", list(ins), ["y"])], ins, ["y"], opset=23)
    with pytest.raises(ParseError, match="caches"):
        fusegraph.parse_onnx(model)
