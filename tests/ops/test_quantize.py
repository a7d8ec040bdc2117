"""Quantization: QuantizeLinear/DequantizeLinear (per-tensor, per-axis, blocked; integer and float8
results), DynamicQuantizeLinear and the integer matmuls, against ONNX Runtime."""

import functools

import ml_dtypes
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from fusegraph.errors import ShapeError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape
from tests import util
from tests.util import assert_close, check_on_every_target, make_model, run_fusegraph

# the quantized formats are checked on every target here (ref, cpu, gpu), against ORT
node_check = functools.partial(util.node_check, everywhere=True)

rng = np.random.default_rng(0)
X = (rng.standard_normal((3, 4, 6)) * 40).astype(np.float32)


def reference_check(op_type, inputs, attrs=None, initializers=None, opset=21):
    """Like node_check, against the ONNX reference: ONNX Runtime's Python API cannot return int4 or
    float8 tensors, nor run per-row MatMulInteger zero points."""
    names = list(inputs) + list(initializers or {})
    model = make_model([helper.make_node(op_type, names, ["y"], **(attrs or {}))], inputs, ["y"],
                       initializers, opset)
    check_on_every_target(model, inputs, ReferenceEvaluator(model).run(None, inputs))


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_per_tensor(zp_dtype):
    scale, zp = np.array(0.5, np.float32), np.array(3, zp_dtype)
    node_check("QuantizeLinear", {"x": X}, initializers={"s": scale, "zp": zp}, opset=21)
    info = np.iinfo(zp_dtype)
    q = rng.integers(info.min, info.max, X.shape).astype(zp_dtype)
    node_check("DequantizeLinear", {"q": q}, initializers={"s": scale, "zp": zp}, opset=21)


def test_quantize_saturates_and_rounds_half_to_even():
    x = np.array([-1000.0, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1000.0], np.float32)
    node_check("QuantizeLinear", {"x": x}, initializers={"s": np.array(1.0, np.float32),
                                                         "zp": np.array(0, np.int8)})
    node_check("QuantizeLinear", {"x": x}, initializers={"s": np.array(1.0, np.float32)})  # uint8 default


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_axis(axis):
    n = X.shape[axis]
    scale = rng.uniform(0.1, 1, n).astype(np.float32)
    zp = rng.integers(0, 20, n).astype(np.uint8)
    node_check("QuantizeLinear", {"x": X}, {"axis": axis}, initializers={"s": scale, "zp": zp}, opset=13)
    q = rng.integers(0, 255, X.shape).astype(np.uint8)
    node_check("DequantizeLinear", {"q": q}, {"axis": axis}, initializers={"s": scale, "zp": zp}, opset=13)


@pytest.mark.parametrize("block_size", [2, 4])  # 4 does not divide 6: the last block is short
def test_blocked(block_size):
    scale = rng.uniform(0.1, 1, (3, 4, -(-6 // block_size))).astype(np.float32)
    zp = rng.integers(-5, 5, scale.shape).astype(np.int8)
    attrs = {"axis": 2, "block_size": block_size}
    node_check("QuantizeLinear", {"x": X}, attrs, initializers={"s": scale, "zp": zp}, opset=21)
    q = rng.integers(-128, 127, X.shape).astype(np.int8)
    node_check("DequantizeLinear", {"q": q}, attrs, initializers={"s": scale, "zp": zp}, opset=21)


def test_int4():
    scale = np.array(2.0, np.float32)
    reference_check("QuantizeLinear", {"x": X[0]}, initializers={"s": scale, "zp": np.array(1, ml_dtypes.int4)})
    q = rng.integers(0, 15, (4, 6)).astype(ml_dtypes.uint4)
    reference_check("DequantizeLinear", {"q": q}, initializers={"s": scale, "zp": np.array(2, ml_dtypes.uint4)})


@pytest.mark.parametrize("zp", [np.array(0, ml_dtypes.int2), np.array(1, ml_dtypes.uint2),
                                np.array(0, ml_dtypes.float4_e2m1fn)])
def test_two_and_four_bit_types(zp):
    scale = np.array(10.0, np.float32)
    reference_check("QuantizeLinear", {"x": X[0]}, initializers={"s": scale, "zp": zp}, opset=25)
    q = X[0].astype(zp.dtype)
    reference_check("DequantizeLinear", {"q": q}, initializers={"s": scale, "zp": zp}, opset=25)


FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]


@pytest.mark.parametrize("fp8", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8(fp8, saturate):
    x = np.concatenate([X.reshape(-1), np.array([1e6, -1e6, np.inf, -np.inf, np.nan], np.float32)])
    reference_check("QuantizeLinear", {"x": x}, {"saturate": saturate},
                    initializers={"s": np.array(0.25, np.float32), "zp": np.zeros((), fp8)})
    reference_check("DequantizeLinear", {"q": X.astype(fp8)}, initializers={"s": np.array(0.5, np.float32)})


def test_dequantize_to_half():
    q = rng.integers(0, 255, (4, 6)).astype(np.uint8)
    node_check("DequantizeLinear", {"q": q}, initializers={"s": np.array(0.1, np.float16),
                                                           "zp": np.array(7, np.uint8)}, opset=19)


def test_dynamic_quantize_linear():
    node_check("DynamicQuantizeLinear", {"x": X}, n_outputs=3, opset=11)
    node_check("DynamicQuantizeLinear", {"x": np.abs(X)}, n_outputs=3, opset=11)


def test_quantize_op_rejects_non_quantized_types():
    f32 = Shape.of(DType.float32, [2])
    with pytest.raises(ShapeError):
        make_op("quantize_linear", to=DType.float32).compute_shape([f32, f32, f32])


# -- integer matmuls --------------------------------------------------------------------------------
@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_matmul_integer(a_dtype, b_dtype):
    a = rng.integers(0, 100, (2, 3, 5)).astype(a_dtype)
    b = rng.integers(-50 if b_dtype == np.int8 else 0, 100, (5, 4)).astype(b_dtype)
    node_check("MatMulInteger", {"a": a, "b": b}, opset=10)
    node_check("MatMulInteger", {"a": a, "b": b}, initializers={"az": np.array(7, a_dtype),
                                                                "bz": np.array(3, b_dtype)}, opset=10)


def test_matmul_integer_per_row_and_column_zero_points():
    a = rng.integers(0, 255, (3, 5)).astype(np.uint8)
    b = rng.integers(0, 255, (5, 4)).astype(np.uint8)
    az, bz = np.array([1, 2, 3], np.uint8), np.array([4, 5, 6, 7], np.uint8)
    model = make_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "b": b}, ["y"],
                       {"az": az, "bz": bz}, opset=10)
    # Neither ONNX Runtime nor the ONNX reference takes a per-row a_zero_point ([M]): numpy does.
    expected = (a.astype(np.int32) - az[:, None]) @ (b.astype(np.int32) - bz)
    assert_close(run_fusegraph(model, {"a": a, "b": b}), [expected])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = rng.integers(lo, hi, (2, 3, 8)).astype(dtype)
    b = rng.integers(lo, hi, (8, 4)).astype(dtype)
    f = np.float32

    def scalars(s, z):
        return np.array(s, f), np.array(z, dtype)

    (sa, za), (sb, zb), (sy, zy) = scalars(0.02, 3), scalars(0.03, -2 if dtype == np.int8 else 5), scalars(0.5, 1)
    node_check("QLinearMatMul", {"a": a, "sa": sa, "za": za, "b": b, "sb": sb, "zb": zb, "sy": sy, "zy": zy},
               opset=10)


# -- edge values against ONNX Runtime, on every target --------------------------------------------------
@pytest.mark.parametrize("zp", [np.uint8(0), np.uint8(255), np.uint8(128), np.int8(-128), np.int8(127), np.int8(0)])
@pytest.mark.parametrize("scale", [0.5, 0.1, 0.0173])
def test_quantize_edges_vs_ort(zp, scale):
    """Exact and near ties (k/2 * scale: x / scale is a tie or within an ulp of one, where x * (1/scale)
    rounds the other way), both saturation ends and the zero points at the ends of the range."""
    k = np.arange(-600, 601, dtype=np.float32) / 2
    x = np.concatenate([k * np.float32(scale), np.nextafter(k * np.float32(scale), np.float32(np.inf)),
                        np.array([3e38, -3e38, 0.0, -0.0], np.float32)]).astype(np.float32)
    names = ["x", "s", "zp"]
    model = make_model([helper.make_node("QuantizeLinear", names, ["y"])], {"x": x}, ["y"],
                       {"s": np.array(scale, np.float32), "zp": np.array(zp)}, opset=13)
    check_on_every_target(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantize_dequantize_per_axis_edges_vs_ort(dtype):
    info = np.iinfo(dtype)
    x = (np.arange(-300, 300, dtype=np.float32).reshape(4, 150) * np.float32(0.37)).astype(np.float32)
    scale = np.array([0.37, 0.74, 0.185, 3.0], np.float32)  # x / scale lands on ties for the first three
    zp = np.array([info.min, info.max, 0, info.min + 1], dtype)
    q_model = make_model([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=0)], {"x": x}, ["y"],
                         {"s": scale, "zp": zp}, opset=13)
    check_on_every_target(q_model, {"x": x})
    q = np.tile(np.arange(info.min, info.max + 1).astype(dtype), (4, 1))
    dq_model = make_model([helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=0)], {"q": q}, ["y"],
                          {"s": scale, "zp": zp}, opset=13)
    check_on_every_target(dq_model, {"q": q})


def test_dequantize_int32_with_zero_point_vs_ort():
    """int32 data (a bias) minus its zero point in int32, then to float: float(x) - float(zp) rounds
    x first once |x| > 2^24."""
    q = np.array([2**24 + 1, 2**30 + 3, -(2**31) + 5, 7, 0], np.int32)
    model = make_model([helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])], {"q": q}, ["y"],
                       {"s": np.array(1.0, np.float32), "zp": np.array(3, np.int32)}, opset=13)
    check_on_every_target(model, {"q": q})


@pytest.mark.parametrize("case", ["ties", "all_negative", "all_positive", "constant", "tiny"])
def test_dynamic_quantize_linear_edges_vs_ort(case):
    x = {"ties": np.arange(-255, 256, dtype=np.float32) / 2,
         "all_negative": -np.abs(X) - 1, "all_positive": np.abs(X) + 1,
         "constant": np.full((3, 5), 2.5, np.float32), "tiny": X * np.float32(1e-30)}[case]
    model = make_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])], {"x": x},
                       ["y", "s", "zp"], opset=11)
    check_on_every_target(model, {"x": x})


@pytest.mark.parametrize("b_dtype", [np.uint8, np.int8])
def test_integer_matmul_full_range_vs_ort(b_dtype):
    """Full-range uint8 x uint8 and uint8 x int8 within [-64, 64]: ORT's u8s8 x86 kernels without
    VNNI sum pairs of products in int16 with saturation (vpmaddubsw: [255, 255] . [127, 127] gives
    65534, not 64770), so wider int8 weights make ORT's own result machine-dependent."""
    a = rng.integers(0, 256, (7, 64)).astype(np.uint8)
    lo, hi = (0, 256) if b_dtype == np.uint8 else (-64, 65)
    b = rng.integers(lo, hi, (64, 9)).astype(b_dtype)
    b[:, 0] = hi - 1   # a column at the top of the range against a row of 255s
    a[0] = 255
    init = {"b": b, "az": np.array(255, np.uint8), "bz": np.array(hi - 1 if b_dtype == np.uint8 else 0, b_dtype)}
    model = make_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a}, ["y"], init, opset=10)
    check_on_every_target(model, {"a": a})
    s = {"sa": np.array(0.02, np.float32), "za": np.array(3, np.uint8), "sb": np.array(0.004, np.float32),
         "zb": init["bz"], "sy": np.array(0.25, np.float32), "zy": np.array(128, np.uint8)}
    model = make_model([helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])],
                       {"a": a}, ["y"], {"b": b, **s}, opset=10)
    check_on_every_target(model, {"a": a})


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("qtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.int4, ml_dtypes.uint4])
def test_float8_and_int4_round_trip_vs_ort(qtype, saturate):
    """ORT's Python API returns neither float8 nor int4 tensors, so QuantizeLinear is checked through
    a DequantizeLinear after it: ties of the 3-bit/2-bit mantissas, saturation (or inf/nan without
    it), per-axis scales."""
    if saturate == 0 and qtype in (ml_dtypes.int4, ml_dtypes.uint4):
        pytest.skip("saturate applies to float8 only")
    base = np.concatenate([X.reshape(-1), np.array([1e6, -1e6, 0.0, -0.0, 0.3125, 0.34375, 4.5, -7.5], np.float32)])
    x = np.stack([base, base * np.float32(0.01)])
    scale = np.array([0.25, 0.125], np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=0, **({"saturate": saturate} if qtype in FLOAT8 else {})),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=0)]
    model = make_model(nodes, {"x": x}, ["y"], {"s": scale, "zp": np.zeros(2, qtype)}, opset=21)
    check_on_every_target(model, {"x": x})
