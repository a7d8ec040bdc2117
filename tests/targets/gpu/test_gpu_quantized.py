"""Quantized ops on the gpu target, bit-exact against ref: QuantizeLinear's ties and saturation
(integer and float8), DequantizeLinear, DynamicQuantizeLinear, the integer convolution and matmul
(full-range uint8 x int8, exact sums), QLinearConv's and QGemm's requantization, and the contrib
ops that run on the host (QLinearSoftmax, DynamicQuantizeLSTM) or as float matmuls (MatMulNBits).
On the GPU when there is one, else through Triton's interpreter (conftest.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model

MS = "com.microsoft"
pytestmark = pytest.mark.gpu
rng = np.random.default_rng(0)


def _vs_ref(target, model, inputs, **tol):
    results = []
    for t in (target, fusegraph.get_target("ref")):
        p = fusegraph.parse_onnx(model)
        p.compile(t)
        results.append(p.run(inputs))
    assert_close(results[0], results[1], **(tol or {"rtol": 0, "atol": 0}))


def _node(op, names, outs=("y",), domain="", **attrs):
    return helper.make_node(op, list(names), list(outs), domain=domain, **attrs)


@pytest.mark.parametrize("zp", [np.uint8(0), np.uint8(255), np.int8(-128), np.int8(127)])
def test_quantize_ties_and_saturation(gpu_target, zp):
    k = np.arange(-600, 601, dtype=np.float32) / 2
    x = np.concatenate([k * np.float32(0.0173), k * np.float32(0.5), np.array([3e38, -3e38], np.float32)])
    model = make_model([_node("QuantizeLinear", ["x", "s", "zp"])], {"x": x}, ["y"],
                       {"s": np.array(0.0173, np.float32), "zp": np.array(zp)}, opset=13)
    _vs_ref(gpu_target, model, {"x": x})


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("fp8", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_quantize_float8(gpu_target, fp8, saturate):
    x = np.concatenate([rng.standard_normal(200).astype(np.float32) * 300, np.array([1e6, -1e6, 0.0], np.float32)])
    nodes = [_node("QuantizeLinear", ["x", "s", "zp"], ["q"], saturate=saturate),
             _node("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"s": np.array(0.25, np.float32), "zp": np.zeros((), fp8)}, opset=21)
    _vs_ref(gpu_target, model, {"x": x})


def test_dynamic_quantize_then_matmul_integer(gpu_target):
    x = (rng.standard_normal((4, 32)) * 3).astype(np.float32)
    w = rng.integers(-128, 128, (32, 16)).astype(np.int8)
    nodes = [_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             _node("MatMulInteger", ["q", "w", "z"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y", "s", "z"], {"w": w}, opset=13)
    _vs_ref(gpu_target, model, {"x": x})


def test_qlinear_conv_full_range(gpu_target):
    x = rng.integers(0, 256, (1, 8, 9, 9)).astype(np.uint8)
    init = {"xs": np.array(0.02, np.float32), "xz": np.array(7, np.uint8),
            "w": rng.integers(-128, 128, (6, 8, 3, 3)).astype(np.int8),
            "ws": rng.uniform(0.001, 0.01, 6).astype(np.float32), "wz": np.zeros(6, np.int8),
            "ys": np.array(0.37, np.float32), "yz": np.array(128, np.uint8),
            "b": rng.integers(-5000, 5000, 6).astype(np.int32)}
    model = make_model([_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], pads=[1, 1, 1, 1])],
                       {"x": x}, ["y"], init, opset=10)
    _vs_ref(gpu_target, model, {"x": x})
    model = make_model([_node("ConvInteger", ["x", "w", "xz"], strides=[2, 2])], {"x": x}, ["y"],
                       {"w": init["w"], "xz": init["xz"]}, opset=10)
    _vs_ref(gpu_target, model, {"x": x})


def test_contrib_quantized(gpu_target):
    a = rng.integers(0, 256, (5, 40)).astype(np.uint8)
    init = {"sa": np.array(0.02, np.float32), "za": np.array(131, np.uint8),
            "b": rng.integers(-128, 128, (6, 40)).astype(np.int8), "sb": rng.uniform(0.001, 0.01, 6).astype(np.float32),
            "zb": np.zeros(6, np.int8), "c": rng.integers(-3000, 3000, 6).astype(np.int32),
            "sy": np.array(0.9, np.float32), "zy": np.array(3, np.uint8)}
    gemm = _node("QGemm", ["a", "sa", "za", "b", "sb", "zb", "c", "sy", "zy"], domain=MS, transB=1)
    _vs_ref(gpu_target, make_model([gemm], {"a": a}, ["y"], init, 17, {MS: 1}), {"a": a})
    x = rng.integers(0, 256, (3, 5, 40)).astype(np.uint8)
    sm = {"xs": np.array(0.083, np.float32), "xz": np.array(9, np.uint8), "ys": np.array(1 / 256, np.float32),
          "yz": np.array(0, np.uint8)}
    _vs_ref(gpu_target, make_model([_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], domain=MS,
                                          axis=-1, opset=13)], {"x": x}, ["y"], sm, 17, {MS: 1}), {"x": x})


def test_weight_only_and_lstm(gpu_target):
    k, n, block = 64, 12, 32
    a = rng.standard_normal((3, k)).astype(np.float32)
    init = {"b": rng.integers(0, 256, (n, 2, block // 2)).astype(np.uint8),
            "scales": rng.uniform(0.01, 0.1, n * 2).astype(np.float32)}
    nbits = _node("MatMulNBits", ["a", "b", "scales"], domain=MS, K=k, N=n, bits=4, block_size=block)
    _vs_ref(gpu_target, make_model([nbits], {"a": a}, ["y"], init, 17, {MS: 1}), {"a": a}, rtol=1e-5, atol=1e-5)
    x = rng.standard_normal((5, 2, 10)).astype(np.float32)
    lstm_init = {"w": rng.integers(-128, 128, (1, 10, 32)).astype(np.int8),
                 "r": rng.integers(-128, 128, (1, 8, 32)).astype(np.int8),
                 "ws": np.array([0.003], np.float32), "wz": np.array([0], np.int8),
                 "rs": np.array([0.002], np.float32), "rz": np.array([0], np.int8)}
    lstm = _node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], domain=MS, hidden_size=8)
    _vs_ref(gpu_target, make_model([lstm], {"x": x}, ["y"], lstm_init, 17, {MS: 1}), {"x": x})
