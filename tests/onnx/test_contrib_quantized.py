"""ONNX Runtime's quantized contrib ops (QLinear*, com.microsoft QuantizeLinear/DequantizeLinear)
against ONNX Runtime's CPU kernels: exact, except QLinearAdd within one step (see _within_one_lsb)."""

import numpy as np
import pytest

from tests.onnx.contrib_util import contrib_model, randn, rng
from tests.util import assert_close, check_on_every_target, every_target, run_fusegraph, run_ort

# -- quantized ops -----------------------------------------------------------------------------------
QTYPES = [np.uint8, np.int8]


def _every_value(dtype):
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype)


def _qparams(dtype, prefix, n, scale_range=(-5, -1)):
    """n (scale, zero point) pairs named prefix0, prefix0_zp, ..."""
    info = np.iinfo(dtype)
    out = {}
    for k in range(n):
        out[f"{prefix}{k}"] = np.array(np.exp(rng.uniform(*scale_range)), np.float32)
        out[f"{prefix}{k}_zp"] = np.array(rng.integers(info.min, info.max), dtype)
    return out


def _check_everywhere(op_type, inputs, attrs=None, initializers=None, input_names=None):
    """One com.microsoft node on every target (every_target) against ONNX Runtime, exact."""
    check_on_every_target(contrib_model(op_type, inputs, attrs, initializers=initializers, input_names=input_names),
                          inputs)


def _within_one_lsb(got, expected, max_fraction):
    """ORT's x86 QLinearAdd kernel fuses its multiply-adds (FMA; NEON uses fixed point), so a sum
    within float rounding of a .5 tie may land one step away from any unfused float32 evaluation."""
    (got,), (expected,) = got, expected
    assert got.dtype == expected.dtype and got.shape == expected.shape
    diff = np.abs(got.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1 and np.count_nonzero(diff) <= max_fraction * diff.size, np.count_nonzero(diff)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_every_pair(op_type, dtype):
    """All 65536 (a, b) pairs; the scales make half-way ties common (0.05 + 0.05 over 0.1)."""
    a, b = (t.reshape(-1).copy() for t in np.meshgrid(_every_value(dtype), _every_value(dtype)))
    for params in [_qparams(dtype, "s", 3), {**_qparams(dtype, "s", 3), "s0": np.float32(0.05),
                                            "s1": np.float32(0.05), "s2": np.float32(0.1)}]:
        params = {k: np.asarray(v) for k, v in params.items()}
        names = ["a", "s0", "s0_zp", "b", "s1", "s1_zp", "s2", "s2_zp"]
        model = contrib_model(op_type, {"a": a, "b": b}, initializers=params, input_names=names)
        expected = run_ort(model, {"a": a, "b": b})
        for target in every_target():
            got = run_fusegraph(model, {"a": a, "b": b}, target=target)
            if op_type == "QLinearMul":
                assert_close(got, expected)  # exact
            else:
                _within_one_lsb(got, expected, max_fraction=1e-4)


@pytest.mark.parametrize("b_shape", [(4,), (1,), (3, 1)])
def test_qlinear_binary_broadcast_and_default_zero_points(b_shape):
    """Absent zero points are 0. ORT's type inference rejects an absent A or B zero point, so that
    model is checked against ORT running explicit zeros."""
    inputs = {"a": rng.integers(0, 256, (2, 3, 4)).astype(np.uint8), "b": rng.integers(0, 256, b_shape).astype(np.uint8)}
    params = {"sa": np.array(0.02, np.float32), "sb": np.array(0.03, np.float32), "sc": np.array(0.07, np.float32),
              "zero": np.array(0, np.uint8)}
    for op_type in ("QLinearAdd", "QLinearMul"):
        _check_everywhere(op_type, inputs, initializers=params, input_names=["a", "sa", "zero", "b", "sb", "zero", "sc"])
        absent = contrib_model(op_type, inputs, initializers=params, input_names=["a", "sa", "", "b", "sb", "", "sc"])
        zeros = contrib_model(op_type, inputs, initializers=params,
                              input_names=["a", "sa", "zero", "b", "sb", "zero", "sc", "zero"])
        check_on_every_target(absent, inputs, run_ort(zeros, inputs))


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op_type, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13}),
                                            ("QLinearLeakyRelu", {})])
def test_qlinear_lookup_ops_every_value(op_type, attrs, dtype):
    x = _every_value(dtype)
    for _ in range(3):
        params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 2).items()}
        if op_type == "QLinearSigmoid":  # a sigmoid in (0, 1) wants a small output scale
            params["s1"] = np.array(1 / 256, np.float32)
        _check_everywhere(op_type, {"x": x}, attrs, initializers=params, input_names=["x", "s0", "s0_zp", "s1", "s1_zp"])


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("channels_last, shape", [(0, (2, 5, 7, 9)), (1, (2, 7, 9, 5)), (0, (3, 4, 10)),
                                                  (1, (1, 2, 3, 4, 6))])
def test_qlinear_global_average_pool(dtype, channels_last, shape):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 2).items()}
    _check_everywhere("QLinearGlobalAveragePool", {"x": x}, {"channels_last": channels_last}, initializers=params,
                  input_names=["x", "s0", "s0_zp", "s1", "s1_zp"])


@pytest.mark.parametrize("dtype", QTYPES)
def test_qlinear_concat(dtype):
    info = np.iinfo(dtype)
    xs = {f"x{k}": rng.integers(info.min, info.max + 1, (2, n, 3)).astype(dtype) for k, n in enumerate((1, 4, 2))}
    params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 3).items()}
    params.update(ys=params["s1"], ys_zp=params["s1_zp"])  # x1 is already in the output's scale
    names = ["ys", "ys_zp"] + [n for k in range(3) for n in (f"x{k}", f"s{k}", f"s{k}_zp")]
    _check_everywhere("QLinearConcat", xs, {"axis": -2}, initializers=params, input_names=names)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_contrib(dtype):
    x = randn(2, 3, 4) * 20
    per_tensor = {"s": np.array(0.25, np.float32), "zp": np.array(3, dtype)}
    _check_everywhere("QuantizeLinear", {"x": x}, initializers=per_tensor)
    per_axis = {"s": rng.uniform(0.1, 1, 3).astype(np.float32), "zp": rng.integers(0, 9, 3).astype(dtype)}
    _check_everywhere("QuantizeLinear", {"x": x}, {"axis": 1}, initializers=per_axis)
    q = rng.integers(0, 100, (2, 3, 4)).astype(dtype)
    _check_everywhere("DequantizeLinear", {"q": q}, initializers=per_tensor)
    _check_everywhere("DequantizeLinear", {"q": q}, {"axis": 1}, initializers=per_axis)
