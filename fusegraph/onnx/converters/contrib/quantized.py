"""ONNX Runtime's quantized (QLinear*) ops -> integer/float32 pointwise math ending in `quantize_linear`.

Every op computes what ORT's CPU kernels compute, in float32, and requantizes with round half to even
and saturation (`quantize_linear`; its scale is 1 where the scale is already folded in):

    QLinearAdd   y = sat(round((a - za) * (sa/sc) + (b - zb) * (sb/sc) + zc))
    QLinearMul   y = sat(round((a - za) * (b - zb) * (sa*sb/sc) + zc))
                     (zc added before rounding, as ORT's kernels do: it moves ties when odd)
    QLinearSigmoid, QLinearLeakyRelu, QLinearConcat: y = quantize(f(dequantize(x))), which is what
                     ORT's 256-entry lookup tables hold
    QLinearGlobalAveragePool  y = sat(round((sum(x) - zx*n) * (sx / (sy*n))) + zy) over n pixels,
                     the sum exact in int32
    QuantizeLinear / DequantizeLinear: the ai.onnx converters (per tensor or per `axis`)

Zero points are optional (0 of the data's type); scales and zero points are per tensor (one value).
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ...registry import converter
from ..conv import arg
from ..quantize import dequantize_linear, quantize_linear

MS = "com.microsoft"
F32 = DType.float32

converter("QuantizeLinear", domain=MS)(quantize_linear)
converter("DequantizeLinear", domain=MS)(dequantize_linear)


def _scalar(ctx, p: Instruction, what: str) -> Instruction:
    """A per-tensor scale or zero point as a scalar."""
    if p.shape.is_dynamic or p.shape.elements != 1:
        raise ctx.error(f"{what} {p.shape} must hold one value (per-tensor quantization)")
    return ctx.reshape(p, [])


def scalar_zero_point(ctx, zp: Instruction | None, like: Instruction, what: str) -> Instruction:
    return ctx.literal(np.zeros((), like.shape.dtype.np)) if zp is None else _scalar(ctx, zp, what)


def _centered(ctx, x: Instruction, zp: Instruction | None, what: str) -> Instruction:
    """x - zero_point as float32 (exact for 8- and 16-bit data)."""
    return ctx.pointwise("sub", ctx.convert(x, F32), ctx.convert(scalar_zero_point(ctx, zp, x, what), F32))


def scalar_scale(ctx, s: Instruction, what: str) -> Instruction:
    return ctx.convert(_scalar(ctx, s, what), F32)


def dequantize_scalar(ctx, x, scale, zp, what: str) -> Instruction:
    return ctx.pointwise("dequantize_linear", x, scalar_scale(ctx, scale, f"{what} scale"),
                         scalar_zero_point(ctx, zp, x, f"{what} zero point"), to=F32)


def _quantize(ctx, v, scale: Instruction | None, zp: Instruction | None, to: DType) -> Instruction:
    """sat(round(v / scale) + zp) as `to`; no scale is 1 (v already scaled), no zero point is 0."""
    zp = ctx.literal(np.zeros((), to.np)) if zp is None else _scalar(ctx, zp, "output zero point")
    scale = ctx.literal(np.ones((), np.float32)) if scale is None else scalar_scale(ctx, scale, "output scale")
    return ctx.pointwise("quantize_linear", v, scale, zp, to=to)


def _plus_zero_point(ctx, v: Instruction, zp: Instruction | None, like: Instruction) -> Instruction:
    """v + zp in float32: ORT's QLinearAdd/Mul kernels add the output zero point before rounding,
    which moves ties when it is odd (round(2.5 + 1) = 4, round(2.5) + 1 = 3)."""
    return ctx.pointwise("add", v, ctx.convert(scalar_zero_point(ctx, zp, like, "C zero point"), F32))


@converter("QLinearAdd", domain=MS)
def qlinear_add(ctx, node, args):
    a, sa, za, b, sb, zb, sc, zc = (arg(args, k) for k in range(8))
    out_scale = scalar_scale(ctx, sc, "C scale")
    terms = [ctx.pointwise("mul", _centered(ctx, x, z, f"{w} zero point"),
                           ctx.add("div", scalar_scale(ctx, s, f"{w} scale"), out_scale))
             for x, s, z, w in ((a, sa, za, "A"), (b, sb, zb, "B"))]
    return _quantize(ctx, _plus_zero_point(ctx, ctx.pointwise("add", *terms), zc, a), None, None, a.shape.dtype)


@converter("QLinearMul", domain=MS)
def qlinear_mul(ctx, node, args):
    a, sa, za, b, sb, zb, sc, zc = (arg(args, k) for k in range(8))
    ratio = ctx.add("div", ctx.add("mul", scalar_scale(ctx, sa, "A scale"), scalar_scale(ctx, sb, "B scale")),
                    scalar_scale(ctx, sc, "C scale"))
    prod = ctx.pointwise("mul", _centered(ctx, a, za, "A zero point"), _centered(ctx, b, zb, "B zero point"))
    return _quantize(ctx, _plus_zero_point(ctx, ctx.pointwise("mul", prod, ratio), zc, a), None, None, a.shape.dtype)


def _lookup_op(fn):
    """A QLinear op of one input that ORT tabulates: quantize(fn(dequantize(x)))."""

    def convert(ctx, node, args):
        x, sx, zx, sy, zy = (arg(args, k) for k in range(5))
        return _quantize(ctx, fn(ctx, node, dequantize_scalar(ctx, x, sx, zx, "X")), sy, zy, x.shape.dtype)

    return convert


converter("QLinearSigmoid", domain=MS)(_lookup_op(lambda ctx, node, v: ctx.add("sigmoid", v)))
converter("QLinearLeakyRelu", domain=MS)(_lookup_op(
    lambda ctx, node, v: ctx.add("leaky_relu", v, alpha=float(node.attr("alpha", 0.01)))))


@converter("QLinearConcat", domain=MS)
def qlinear_concat(ctx, node, args):
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor. Each X whose scale
    and zero point equal the output's is copied; the others are requantized."""
    sy, zy, rest = args[0], args[1], args[2:]
    if len(rest) % 3 or not rest:
        raise ctx.error(f"{len(rest)} inputs after Y_scale and Y_zero_point are not (X, scale, zero point) triples")
    same_out = [ctx.const(sy), ctx.const(zy)]
    parts = []
    for x, s, z in zip(rest[0::3], rest[1::3], rest[2::3], strict=True):
        same = [ctx.const(s), ctx.const(z)]
        if all(v is not None for v in same + same_out) and all(
                np.array_equal(np.ravel(u), np.ravel(w)) for u, w in zip(same, same_out, strict=True)):
            parts.append(x)
        else:
            parts.append(_quantize(ctx, dequantize_scalar(ctx, x, s, z, "X"), sy, zy, x.shape.dtype))
    rank = parts[0].shape.ndim
    axis = int(node.attr("axis"))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    return parts[0] if len(parts) == 1 else ctx.add("concat", *parts, axis=axis % rank)


@converter("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(ctx, node, args):
    x, sx, zx, sy, zy = args
    rank = x.shape.ndim
    if rank < 3 or x.shape.is_dynamic:
        raise ctx.error(f"input {x.shape} must be static with at least one spatial dim")
    axes = tuple(range(1, rank - 1)) if node.attr("channels_last", 0) else tuple(range(2, rank))
    pixels = math.prod(x.shape.lens[a] for a in axes)
    total = ctx.add("reduce_sum", ctx.convert(x, DType.int32), axes=axes)
    offset = ctx.pointwise("mul", ctx.convert(_scalar(ctx, zx, "x zero point"), DType.int32),
                           ctx.literal(np.array(pixels, np.int32)))
    acc = ctx.convert(ctx.pointwise("sub", total, offset), F32)
    # One multiplier sx / (sy * n), in float32 and in this order, as ORT's kernel forms it.
    n = ctx.literal(np.array(pixels, np.float32))
    scale = ctx.add("div", scalar_scale(ctx, sx, "x scale"), ctx.add("mul", scalar_scale(ctx, sy, "y scale"), n))
    return _quantize(ctx, ctx.pointwise("mul", acc, scale), None, zy, x.shape.dtype)
