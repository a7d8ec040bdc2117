"""Minimal QDQ models, one per pattern the cpu target's int8 lowering reads, written node by node in
the form ONNX Runtime's quantize_static (QDQ) writes: x -> QuantizeLinear -> DequantizeLinear, int8
weights as initializers -> DequantizeLinear, int32 bias -> DequantizeLinear, the product, then
QuantizeLinear -> DequantizeLinear of its result (or a float result)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.util import make_model

_INT = {"u8": np.uint8, "s8": np.int8}


def _qdq(nodes: list, inits: dict, name: str, x: str, scale: float, zp: int, dtype: str) -> str:
    inits[f"{name}_s"] = np.array(scale, np.float32)
    inits[f"{name}_z"] = np.array(zp, _INT[dtype])
    nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]))
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"]))
    return f"{name}_dq"


def weights(rng, shape, axis: int, per_channel: bool, bits: int = 8, asymmetric: bool = False,
            int4: bool = False):
    """(int8 values, scales, zero points) as quantize_static makes them: symmetric, per channel."""
    hi = 2 ** (bits - 1) - 1
    q = rng.integers(-hi - 1, hi + 1, size=shape).astype(np.int8)
    n = shape[axis] if per_channel else 1
    s = (rng.random(n) * 0.01 + 0.002).astype(np.float32)
    z = rng.integers(-3, 4, size=n).astype(np.int8) if asymmetric else np.zeros(n, np.int8)
    if not per_channel:
        s, z = s.reshape(()), z.reshape(())
    if int4:
        q = np.clip(q, -8, 7)
    return q, s, z


# weight types the int8 kernels do not take, as ONNX tensor types (values written as a list)
_OTHER_WEIGHTS = {"int4": onnx.TensorProto.INT4, "fp8": onnx.TensorProto.FLOAT8E4M3FN}


def _dq_weights(nodes, inits, name, q, s, z, axis, kind=None):
    if kind is not None:
        t = onnx.helper.make_tensor(f"{name}_q", _OTHER_WEIGHTS[kind], q.shape, q.ravel().tolist())
        zt = onnx.helper.make_tensor(f"{name}_z", _OTHER_WEIGHTS[kind], z.shape, z.ravel().tolist())
        inits.setdefault("__tensors__", []).extend([t, zt])
    else:
        inits[f"{name}_q"], inits[f"{name}_z"] = q, z
    inits[f"{name}_s"] = s
    attrs = {"axis": axis} if s.ndim else {}
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"], **attrs))
    return f"{name}_dq"


def _model(nodes, inits, x, y, opset=21):
    tensors = inits.pop("__tensors__", [])
    m = make_model(nodes, {"x": x}, [y], inits, opset=opset)
    m.graph.initializer.extend(tensors)
    return m


def conv_model(rng, *, act="u8", per_channel=True, asymmetric_weights=False, bits=7, relu=False,
               out="q", c=16, m=24, hw=10, k=3, batch=2, groups=1, weight_type=None, blocked=False):
    """x -> Q/DQ -> Conv(DQ(w), DQ(bias)) [-> Relu] -> Q/DQ (out="q") or float (out="f")."""
    nodes, inits = [], {}
    xa = _qdq(nodes, inits, "x", "x", 0.05, 0 if act == "s8" else 120, act)
    q, s, z = weights(rng, (m, c // groups, k, k), 0, per_channel, bits, asymmetric_weights,
                      int4=weight_type == "int4")
    if blocked:  # a scale per block of 4 input channels (opset 21 block_size): not per output channel
        s = (rng.random((m, c // groups // 4, k, k)) * 0.01 + 0.002).astype(np.float32)
        z = np.zeros(s.shape, np.int8)
        inits["w_q"], inits["w_s"], inits["w_z"] = q, s, z
        nodes.append(helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_dq"], axis=1, block_size=4))
        wa = "w_dq"
    else:
        wa = _dq_weights(nodes, inits, "w", q, s, z, 0, weight_type)
    bias_scale = (0.05 * (s if s.ndim == 1 else np.full(m, s.flat[0]))).astype(np.float32)
    inits["b_q"] = rng.integers(-2000, 2000, size=m).astype(np.int32)
    inits["b_s"], inits["b_z"] = bias_scale, np.zeros(m, np.int32)
    nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["b_dq"], axis=0))
    nodes.append(helper.make_node("Conv", [xa, wa, "b_dq"], ["conv"], pads=[k // 2] * 4,
                                  group=groups))
    y = "conv"
    if relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["relu"]))
        y = "relu"
    if out == "q":
        y = _qdq(nodes, inits, "y", y, 0.08, 0 if act == "s8" else 10, act)
    x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32) * 2
    return _model(nodes, inits, x, y), {"x": x}


def matmul_model(rng, *, act="u8", per_channel=True, gemm=False, trans_b=False, batch=(2, 5), k=32, n=24,
                 bits=7, out="q", asymmetric_weights=False):
    """x -> Q/DQ -> MatMul(x, DQ(w)) + bias, or Gemm(x, DQ(w), bias, transB) -> Q/DQ or float."""
    nodes, inits = [], {}
    xa = _qdq(nodes, inits, "x", "x", 0.04, 0 if act == "s8" else 128, act)
    shape, axis = ((n, k), 0) if trans_b else ((k, n), 1)
    q, s, z = weights(rng, shape, axis, per_channel, bits, asymmetric_weights)
    wa = _dq_weights(nodes, inits, "w", q, s, z, axis)
    inits["bias"] = rng.standard_normal(n).astype(np.float32)
    if gemm:
        nodes.append(helper.make_node("Gemm", [xa, wa, "bias"], ["prod"], transB=int(trans_b)))
    else:
        nodes.append(helper.make_node("MatMul", [xa, wa], ["mm"]))
        nodes.append(helper.make_node("Add", ["mm", "bias"], ["prod"]))
    y = _qdq(nodes, inits, "y", "prod", 0.1, 0 if act == "s8" else 100, act) if out == "q" else "prod"
    lead = batch[:1] if gemm else batch
    x = rng.standard_normal((*lead, k)).astype(np.float32)
    return _model(nodes, inits, x, y), {"x": x}
