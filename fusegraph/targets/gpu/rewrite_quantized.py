"""The gpu target's first pass: the QDQ products of a quantized program become integer products
with a float epilogue, which the generic passes then fuse and the lowering runs as int8 GEMMs.

    dot([reshape](dequantize(xq, sx, zx)), [movement](dequantize(wq, sw, 0)))
        -> convert_f32(quant_dot([reshape](xq), wq) - zx * colsum(wq)) * (sx * sw)
    convolution(dequantize(xq, sx, zx), dequantize(wq, sw, 0))
        -> convert_f32(quant_convolution[pad_value=zx](xq, wq) - zx * sum(wq[m])) * (sx * sw[m])

The integer sum is exact (int32), so the result is the float program's up to one rounding of the
scale; the bias, activation and the next quantize stay pointwise after it and fuse_pointwise makes
them one epilogue with the scale. uint8 activations are read as int8 (xq - 128, zero point - 128:
the same values), the type cuBLASLt's and Triton's int8 products take. float8 (quantize_fp8's
e4m3fn, or e5m2) the same way, without zero points: float8_dot / quant_convolution sum the exact
float8 products in float32.

Legality, on the constants (anything else keeps its float path, which is right):
- x: int8/uint8 (one scale and zero point, per tensor) or float8 (one scale, zero point 0);
- w: an int8 (float8 of x's type) constant with one scale per output channel (or one), zero points 0;
- dot: w one [K, N] matrix (broadcast along a batched product's batch dims: the rows of every
  batch become one matrix, [B * S, K] x [K, N]); convolution: 2-D, ungrouped.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ir.module import Instruction, Module
from ...ir.op import registered_ops
from ...ops.movement import Broadcast, Reshape
from ...quantize.qdq_match import dequantized_activation, dequantized_weights
from .ops_quant import FLOAT8, QuantConvolution

ACTIVATIONS = (DType.int8, DType.uint8)


def _op(name: str, **attrs):
    return registered_ops()[name](**attrs)


def _channels(module: Module, before: Instruction, values: np.ndarray, like: Instruction, axis: int) -> Instruction:
    """`values` (one per channel of `like` along `axis`) broadcast to `like`'s lens."""
    shape = [1] * like.shape.ndim
    shape[axis] = -1
    lit = module.add_literal(np.ascontiguousarray(values.reshape(shape)))
    return module.insert(before, Broadcast(out_lens=like.shape.lens), lit)


def _as_int8(module: Module, xq: Instruction, zx: int, before: Instruction) -> tuple[Instruction, int]:
    """`xq` as int8 with its zero point: uint8 values shifted by -128 (int8 and float8 stay)."""
    if xq.shape.dtype != DType.uint8:
        return xq, zx
    wide = module.insert(before, _op("convert", to=DType.int32), xq)
    shift = module.insert(before, Broadcast(out_lens=xq.shape.lens), module.add_literal(np.array(128, np.int32)))
    shifted = module.insert(before, _op("sub"), wide, shift)
    return module.insert(before, _op("convert", to=DType.int8), shifted), zx - 128


def _rewrite(module: Module, ins: Instruction, memo) -> bool:
    conv = ins.op.name == "convolution"
    if not (conv or ins.op.name == "dot") or ins.shape.is_dynamic or ins.shape.dtype != DType.float32:
        return False
    x, reshape = ins.inputs[0], None
    if not conv and isinstance(x.op, Reshape):  # a 3-D MatMul flattened by the frontend
        reshape, x = x, x.inputs[0]
    act = dequantized_activation(x, memo, (*ACTIVATIONS, *FLOAT8))
    if act is None or (act[0].shape.dtype in FLOAT8 and act[2] != 0):
        return False
    wtype = act[0].shape.dtype if act[0].shape.dtype in FLOAT8 else DType.int8
    if conv and (ins.shape.ndim != 4 or ins.op.group != 1):
        return False
    nd = ins.shape.ndim
    w = dequantized_weights(ins.inputs[1], 0 if conv else nd - 1, memo, wtype)
    if w is None:
        return False
    wq, sw = w
    if not conv:  # a batched product over weights broadcast along the batch: one [K, N] matrix
        if wq.ndim < 2 or any(d != 1 for d in wq.shape[:-2]):
            return False
        wq = wq.reshape(wq.shape[-2:])
    first = module.index(ins)  # what is inserted before `ins` lands from here on
    xq, zx = _as_int8(module, *act[::2], ins)
    if reshape is not None:
        xq = module.insert(ins, Reshape(dims=reshape.op.dims), xq)
    w_lit = module.add_literal(np.ascontiguousarray(wq))
    if conv:
        acc = module.insert(ins, QuantConvolution(**ins.op.attributes(), pad_value=zx), xq, w_lit)
        sums = wq.astype(np.int64).reshape(wq.shape[0], -1).sum(axis=1) if zx else None
        axis = 1  # the output channel of N, M, H, W
    else:
        if nd > 2:  # the rows of every batch as one matrix, split again right after the product
            xq = module.insert(ins, Reshape(dims=(int(np.prod(ins.shape.lens[:-1])), wq.shape[0])), xq)
        acc = module.insert(ins, _op("float8_dot" if wtype in FLOAT8 else "quant_dot"), xq, w_lit)
        if nd > 2:
            acc = module.insert(ins, Reshape(dims=ins.shape.lens), acc)
        sums = wq.astype(np.int64).sum(axis=0) if zx else None
        axis = nd - 1  # the output column
    if zx:
        acc = module.insert(ins, _op("sub"), acc, _channels(module, ins, (zx * sums).astype(np.int32), acc, axis))
    y = module.insert(ins, _op("convert", to=DType.float32), acc)
    scale = (np.float32(act[1]) * sw).astype(np.float32)
    y = module.insert(ins, _op("mul"), y, _channels(module, ins, scale, y, axis))
    for made in module.instructions[first:module.index(ins)]:
        if not made.is_literal and not made.origin:
            made.origin = ins.origin
    module.replace(ins, y)
    return True


def rewrite_quantized(module: Module) -> bool:
    memo: dict[int, np.ndarray | None] = {}
    changed = False
    for ins in list(module):
        if ins.users:
            changed |= _rewrite(module, ins, memo)
    return changed
