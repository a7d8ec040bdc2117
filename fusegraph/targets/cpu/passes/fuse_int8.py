"""Turns the QDQ regions of a quantized model into the cpu target's int8 ops (ops_int8.py), which
oneDNN runs as u8 x s8 convolutions and matmuls with requantization fused.

    convolution(dequantize(xq), dequantize(wq)) [+ bias] [-> relu] [-> quantize]  ->  int8_conv(xq, wq, ...)
    dot([reshape](dequantize(xq)), [movement](dequantize(wq))) [-> reshape] [+ bias] [-> relu] [-> quantize]
                                                                               ->  int8_dot(xq, wq, ...)

The integer convolutions (ConvInteger; QLinearConv before its requantization, which stays the
frontend's pointwise math, bit for bit ORT's) become the same primitive with an int32 result:

    convolution(convert(xq) - x_zp, w - w_zp) -> int8_conv(xq, w - w_zp, ones, out_type=int32)

where x_zp is one value and the centred weights w - w_zp (any zero points) fit int8; taken only
where the sum stays exact: oneDNN's int8 sums are (exact_here), and their float32 store cannot round
(window * max|x - x_zp| * max|w - w_zp| < 2**24); else the int32 convolution (exact, numpy) runs.

Runs first in the cpu pipeline: the generic passes fold dequantize(int8 weights) into float weights.
First, int8 activations that only dequantizers read become uint8 with the zero point + 128 (the same
values: oneDNN's u8 x s8 path is the exact one, see onednn/quant.py); then a quantize -> dequantize
pair between two int8 ops is gone by construction: the producer writes the integers, the consumer
reads them.

Legality, checked on the constants (anything else keeps its float path, which is right):
- x: uint8/int8 with one scale and zero point (per tensor);
- w: an int8 constant with one scale per output channel (or one), zero points all 0 (symmetric); not
  int4, not fp8, not blocked scales;
- on this machine oneDNN's integer sums are exact for these weights (VNNI, or weights whose pairs
  cannot saturate int16: onednn.quant.exact_here);
- the quantize has one scale and zero point and reads the product alone.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ops.movement import Broadcast, Reshape
from ....ops.quantize import DequantizeLinear, QuantizeLinear
from ....quantize.qdq_match import constant_value, dequantized_activation, dequantized_weights, per_axis
from ....quantize.qdq_match import uniform as _uniform
from ..ops_int8 import ACT_TYPES, Int8Conv, Int8Dot


def _activation(ins: Instruction, memo) -> tuple[Instruction, float, int] | None:
    """(the integer tensor, scale, zero point) of a per-tensor dequantize."""
    return dequantized_activation(ins, memo, ACT_TYPES)


def _weights(ins: Instruction, axis: int, memo) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 values, float32 scale per output channel) of constant weights dequantized symmetrically
    (oneDNN takes one zero point per tensor), when oneDNN's integer sums are exact for them here."""
    w = dequantized_weights(ins, axis, memo)
    if w is None:
        return None
    from ..onednn.quant import exact_here

    return (np.ascontiguousarray(w[0], np.int8), w[1]) if exact_here(w[0]) else None


def _sole_user(ins: Instruction, module: Module) -> Instruction | None:
    outputs = module.outputs
    if len(ins.users) != 1 or any(o is ins for o in outputs):
        return None
    return ins.users[0]


def _epilogue(module: Module, prod: Instruction, channel_axis: int, memo):
    """Walk the product's single-user chain: [reshape keeping the last dim] [+ per-channel constant]
    [relu] [quantize per tensor]. Returns (last instruction absorbed, out_lens, bias, activations,
    (out_type, y_scale, y_zero_point))."""
    last, out_lens, bias, acts = prod, (), None, ()
    quant = (DType.float32, 1.0, 0)
    nxt = _sole_user(last, module)
    if channel_axis < 0 and nxt is not None and isinstance(nxt.op, Reshape) and \
            nxt.shape.lens[-1:] == prod.shape.lens[-1:]:
        last, out_lens, nxt = nxt, nxt.shape.lens, _sole_user(nxt, module)
    if nxt is not None and nxt.op.name == "add":
        other = [i for i in nxt.inputs if i is not last]
        c = constant_value(other[0], memo) if len(other) == 1 else None
        channels = last.shape.lens[channel_axis]
        if c is not None and c.dtype == np.float32 and c.ndim <= last.shape.ndim:
            per = per_axis(c, channel_axis % last.shape.ndim, last.shape.lens)
            if per is not None and per.size == channels:
                last, bias, nxt = nxt, per, _sole_user(nxt, module)
    if nxt is not None and nxt.op.name == "relu":
        last, acts, nxt = nxt, (("relu", 0.0, 0.0),), _sole_user(nxt, module)
    if nxt is not None and isinstance(nxt.op, QuantizeLinear) and nxt.op.to in ACT_TYPES and nxt.inputs[0] is last:
        s, z = _uniform(constant_value(nxt.inputs[1], memo)), _uniform(constant_value(nxt.inputs[2], memo))
        if s is not None and z is not None and s > 0:
            last, quant = nxt, (nxt.op.to, float(s), int(z))
    return last, out_lens, bias, acts, quant


def _attrs(x_scale, x_zp, bias, acts, quant) -> dict:
    out_type, ys, yz = quant
    return dict(x_scale=x_scale, x_zero_point=x_zp, out_type=out_type, y_scale=ys, y_zero_point=yz,
                has_bias=bias is not None, activations=acts)


def _fuse(module: Module, ins: Instruction, memo) -> bool:
    conv = ins.op.name == "convolution"
    if not (conv or ins.op.name == "dot") or ins.shape.is_dynamic or ins.shape.dtype != DType.float32:
        return False
    x = ins.inputs[0]
    reshape = None
    if not conv and isinstance(x.op, Reshape):  # a 3-D MatMul flattened by the frontend
        reshape, x = x, x.inputs[0]
    act = _activation(x, memo)
    if act is None or (conv and ins.shape.ndim not in (3, 4, 5)) or (not conv and ins.inputs[1].shape.ndim != 2):
        return False
    w = _weights(ins.inputs[1], 0 if conv else 1, memo)
    if w is None:
        return False
    xq, xs, xz = act
    if reshape is not None:
        xq = module.insert(ins, Reshape(dims=reshape.op.dims), xq)
    last, out_lens, bias, acts, quant = _epilogue(module, ins, 1 if conv else -1, memo)
    wq, scales = w
    inputs = [xq, module.add_literal(wq), module.add_literal(scales)]
    if bias is not None:
        inputs.append(module.add_literal(bias.astype(np.float32)))
    if conv:
        op = Int8Conv(**ins.op.attributes(), **_attrs(xs, xz, bias, acts, quant))
    else:
        op = Int8Dot(out_lens=out_lens, **_attrs(xs, xz, bias, acts, quant))
    module.replace(last, module.insert(last, op, *inputs))
    return True


def _to_uint8(module: Module, ins: Instruction, memo, zero_points: dict[int, Instruction]) -> bool:
    """quantize(to int8) read only by dequantizers -> the same through uint8, zero points + 128."""
    if not isinstance(ins.op, QuantizeLinear) or ins.op.to != DType.int8 or not ins.users:
        return False
    if any(o is ins for o in module.outputs) or not all(isinstance(u.op, DequantizeLinear) and u.inputs[0] is ins
                                                         for u in ins.users):
        return False
    zps = [_uniform(constant_value(z, memo)) for z in (ins.inputs[2], *(u.inputs[2] for u in ins.users))]
    if any(z is None for z in zps):
        return False

    def shifted(zp_ins: Instruction, value: int, before: Instruction) -> Instruction:
        if value not in zero_points:  # one literal per value: adding one walks the module
            zero_points[value] = module.add_literal(np.array(value + 128, np.uint8))
        lit = zero_points[value]
        return module.insert(before, Broadcast(out_lens=zp_ins.shape.lens), lit) if zp_ins.shape.lens else lit

    q = module.insert(ins, QuantizeLinear(to=DType.uint8, saturate=ins.op.saturate), ins.inputs[0], ins.inputs[1],
                      shifted(ins.inputs[2], zps[0], ins))
    for u, z in zip(list(ins.users), zps[1:]):
        module.replace(u, module.insert(u, u.op, q, u.inputs[1], shifted(u.inputs[2], z, u)))
        module.remove(u)
    module.remove(ins)  # its input's users must not count it (the product's quantize is its sole user)
    return True


FLOAT_EXACT = 2**24  # integers float32 holds exactly: oneDNN's s32 result passes through float32


def _integer_source(x: Instruction, memo) -> tuple[Instruction, int] | None:
    """(the 8-bit tensor, its zero point) of convert(xq, int32) [- one constant value]."""
    zp = 0
    if x.op.name == "sub":
        z = _uniform(constant_value(x.inputs[1], memo))
        if z is None or z != int(z):
            return None
        x, zp = x.inputs[0], int(z)
    if x.op.name != "convert" or x.inputs[0].shape.dtype not in ACT_TYPES:
        return None
    return x.inputs[0], zp


def _fuse_integer_conv(module: Module, ins: Instruction, memo) -> bool:
    if ins.shape.ndim not in (3, 4, 5) or any(i.shape.dtype != DType.int32 for i in ins.inputs[:2]):
        return False
    src, w = _integer_source(ins.inputs[0], memo), constant_value(ins.inputs[1], memo)
    if src is None or w is None or w.shape != ins.inputs[1].shape.lens or w.min() < -128 or w.max() > 127:
        return False
    from ..onednn.quant import exact_here

    xq, zp = src
    lo, hi = (0, 255) if xq.shape.dtype == DType.uint8 else (-128, 127)
    w8 = np.ascontiguousarray(w, np.int8)
    bound = (w8.size // w8.shape[0]) * max(zp - lo, hi - zp) * int(np.abs(w8.astype(np.int32)).max(initial=0))
    if bound >= FLOAT_EXACT or not exact_here(w8):
        return False
    op = Int8Conv(**ins.op.attributes(), x_zero_point=zp, out_type=DType.int32)
    ones = module.add_literal(np.ones(w8.shape[0], np.float32))
    module.replace(ins, module.insert(ins, op, xq, module.add_literal(w8), ones))
    return True


def fuse_int8(module: Module) -> bool:
    memo: dict[int, np.ndarray | None] = {}
    changed = False
    zero_points: dict[int, Instruction] = {}
    for ins in list(module):
        changed |= bool(ins.users) and _to_uint8(module, ins, memo, zero_points)
    for ins in list(module):
        if ins.users:
            changed |= _fuse(module, ins, memo)
            if ins.op.name == "convolution" and not ins.shape.is_dynamic:
                changed |= _fuse_integer_conv(module, ins, memo)
    return changed
