"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and QLinearMatMul.

Scales and zero points are reshaped here so they broadcast against x (per-tensor, per-axis along
`axis`, or blocked along `axis` in blocks of `block_size`); the IR ops then work elementwise.
Integer matmuls subtract zero points in int32 and run `quant_dot`, which accumulates exactly in int32.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ...ops.quantize import FLOAT_QUANT, INT_RANGES
from ..registry import converter
from .gemm import broadcast_to, matmul
from .reduce import normalize_axes


def qparam(ctx, x: Instruction, p: Instruction, axis: int, block_size: int, what: str) -> Instruction:
    """A scale or zero point shaped to broadcast against `x`."""
    xs, ps = x.shape, p.shape
    if ps.ndim == 0:
        return p
    if not ps.is_dynamic and ps.elements == 1:
        return ctx.reshape(p, [])
    (axis,) = normalize_axes(ctx, [axis], xs.ndim, "axis")
    if not xs.dims[axis].is_fixed or (block_size and xs.is_dynamic):
        raise ctx.error(f"{what} {ps}: the quantized dims of {xs} must be static")
    n = xs.dims[axis].min
    if not block_size:
        if ps.ndim != 1 or ps.lens[0] != n:
            raise ctx.error(f"{what} {ps} is neither per-tensor nor per-axis {axis} of {xs}")
        return ctx.reshape(p, [n if i == axis else 1 for i in range(xs.ndim)])
    # Blocked: p is x with dim `axis` shrunk to ceil(n / block_size); repeat each entry per block.
    nb = ps.lens[axis] if ps.ndim == xs.ndim else -1
    if block_size < 0 or nb != math.ceil(n / block_size) or any(
            ps.lens[i] != xs.lens[i] for i in range(xs.ndim) if i != axis):
        raise ctx.error(f"{what} {ps} does not block {xs} along axis {axis} by {block_size}")
    lens = list(ps.lens)
    spread = broadcast_to(ctx, ctx.reshape(p, lens[:axis + 1] + [1] + lens[axis + 1:]),
                          lens[:axis + 1] + [block_size] + lens[axis + 1:])
    full = ctx.reshape(spread, lens[:axis] + [nb * block_size] + lens[axis + 1:])
    if nb * block_size == n:
        return full
    return ctx.add("slice", full, axes=(axis,), starts=(0,), ends=(n,), steps=(1,))


def _zero(ctx, dtype: DType) -> Instruction:
    return ctx.literal(np.zeros((), dtype.np))


def _arg(args, k):
    return args[k] if len(args) > k else None


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx, node, args):
    x, scale, zp = args[0], args[1], _arg(args, 2)
    # The result type: the zero point's, else output_dtype (opset 21+), else uint8.
    attr_type = node.attr("output_dtype", 0)
    if zp is not None:
        to = zp.shape.dtype
    else:
        to = DType.from_onnx(attr_type) if attr_type else DType.uint8
    if attr_type and DType.from_onnx(attr_type) != to:
        raise ctx.error(f"output_dtype {DType.from_onnx(attr_type)} differs from the zero point's {to}")
    if to not in INT_RANGES and to not in FLOAT_QUANT:
        raise ctx.error(f"cannot quantize to {to}")
    # x / scale runs in `precision`, else in x's dtype when x and scale agree, else in float32.
    precision = node.attr("precision", 0)
    if precision:
        work = DType.from_onnx(precision)
    else:
        work = x.shape.dtype if x.shape.dtype == scale.shape.dtype and x.shape.dtype.is_float else DType.float32
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    scale = qparam(ctx, x, ctx.convert(scale, work), axis, block, "scale")
    zp = _zero(ctx, to) if zp is None else qparam(ctx, x, zp, axis, block, "zero point")
    return ctx.pointwise("quantize_linear", ctx.convert(x, work), scale, zp, to=to,
                         saturate=bool(node.attr("saturate", 1)))


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx, node, args):
    x, scale, zp = args[0], args[1], _arg(args, 2)
    attr_type = node.attr("output_dtype", 0)
    to = DType.from_onnx(attr_type) if attr_type else scale.shape.dtype
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    scale = qparam(ctx, x, scale, axis, block, "scale")
    zp = _zero(ctx, x.shape.dtype) if zp is None else qparam(ctx, x, zp, axis, block, "zero point")
    return ctx.pointwise("dequantize_linear", x, scale, zp, to=to)


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node, args):
    """uint8 quantization whose scale and zero point cover [min(x, 0), max(x, 0)]."""
    x = args[0]
    every = tuple(range(x.shape.ndim))

    def extreme(op, clamp):
        r = ctx.reshape(ctx.add(op, x, axes=every), []) if every else x
        return ctx.pointwise(clamp, r, ctx.scalar_like(0, x))

    hi, lo = extreme("reduce_max", "max"), extreme("reduce_min", "min")
    span = ctx.add("sub", hi, lo)
    span = ctx.pointwise("where", ctx.pointwise("equal", hi, lo), ctx.scalar_like(1, x), span)
    scale = ctx.pointwise("div", span, ctx.scalar_like(255, x))
    zp = ctx.pointwise("sub", ctx.scalar_like(0, x), ctx.add("div", lo, scale))
    zp = ctx.pointwise("clip", zp, ctx.scalar_like(0, x), ctx.scalar_like(255, x))
    zp = ctx.convert(ctx.add("round", zp), DType.uint8)
    y = ctx.pointwise("quantize_linear", x, scale, zp, to=DType.uint8)
    return [y, scale, zp]


# -- integer matmuls --------------------------------------------------------------------------------
def _per_row(ctx, p: Instruction | None, a: Instruction) -> Instruction | None:
    """A 1-D per-row parameter of `a` ([M]) as [M, 1], so it broadcasts over a's columns."""
    if p is None or p.shape.ndim != 1 or p.shape.lens[0] == 1 or a.shape.ndim < 2:
        return p
    return ctx.reshape(p, [p.shape.lens[0], 1])


def centered(ctx, x: Instruction, zp: Instruction | None) -> Instruction:
    """x - zero_point in int32 (x itself when there is no zero point or it is all zeros)."""
    const = ctx.const(zp)
    if zp is None or (const is not None and not np.any(const)):
        return x
    return ctx.pointwise("sub", ctx.convert(x, DType.int32), ctx.convert(zp, DType.int32))


@converter("MatMulInteger", since=10)
def matmul_integer(ctx, node, args):
    a, b = args[0], args[1]
    a = centered(ctx, a, _per_row(ctx, _arg(args, 2), a))
    b = centered(ctx, b, _arg(args, 3))
    return matmul(ctx, a, b, op="quant_dot")


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node, args):
    """y = quantize(((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale / y_scale)) + y_zp."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (list(args) + [None] * 8)[:8]
    acc = matmul(ctx, centered(ctx, a, _per_row(ctx, a_zp, a)), centered(ctx, b, b_zp), op="quant_dot")
    # One multiplier from the three scales, in their dtype (as the ONNX reference computes it).
    scale = ctx.pointwise("div", ctx.pointwise("mul", _per_row(ctx, a_scale, a), b_scale), y_scale)
    scaled = ctx.pointwise("mul", ctx.convert(acc, DType.float32), ctx.convert(scale, DType.float32))
    to = y_zp.shape.dtype if y_zp is not None else a.shape.dtype
    zp = _zero(ctx, to) if y_zp is None else y_zp
    one = ctx.literal(np.ones((), np.float32))
    return ctx.pointwise("quantize_linear", scaled, one, zp, to=to)
