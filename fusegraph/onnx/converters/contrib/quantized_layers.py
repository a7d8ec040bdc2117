"""ONNX Runtime's quantized layers that are not a pointwise requantization: QLinearSoftmax,
QLinearAveragePool and DynamicQuantizeLSTM.

    QLinearSoftmax      -> `qlinear_softmax` over the last axis (ORT's table-and-sum algorithm, see
                           ops/quantized_nn.py); `opset` < 13 flattens from `axis` on, as Softmax-1
                           did, otherwise `axis` moves last and back
    QLinearAveragePool  y = sat(nearbyint(avg(dequantize(x)) / y_scale + y_zero_point)): ORT
                           dequantizes to float32, averages each window and adds the zero point
                           before rounding (which moves ties when it is odd)
    DynamicQuantizeLSTM -> `dynamic_quantize_lstm` (ORT's dynamic-quantized products, see there)
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.dtypes import DType
from ...registry import converter
from ..conv import arg
from ..nn import pool_window
from ..rnn import recurrent
from .quantized import dequantize_scalar, scalar_scale, scalar_zero_point

MS = "com.microsoft"
F32 = DType.float32


@converter("QLinearSoftmax", domain=MS)
def qlinear_softmax(ctx, node, args):
    x, sx, _zx, sy, zy = (arg(args, k) for k in range(5))
    rank = x.shape.ndim
    axis = int(node.attr("axis", -1))
    if not -rank <= axis < rank or x.shape.is_dynamic:
        raise ctx.error(f"axis {axis} of a static input needed, got {x.shape}")
    axis %= rank
    params = (scalar_scale(ctx, sx, "x scale"), scalar_scale(ctx, sy, "y scale"), scalar_zero_point(ctx, zy, x, "y zero point"))
    if int(node.attr("opset", 13)) < 13:
        lens = x.shape.lens
        flat = ctx.reshape(x, [math.prod(lens[:axis]), math.prod(lens[axis:])])
        return ctx.reshape(ctx.add("qlinear_softmax", flat, *params), lens)
    if axis == rank - 1:
        return ctx.add("qlinear_softmax", x, *params)
    perm = tuple(i for i in range(rank) if i != axis) + (axis,)
    back = tuple(int(i) for i in np.argsort(perm))
    y = ctx.add("qlinear_softmax", ctx.add("transpose", x, perm=perm), *params)
    return ctx.add("transpose", y, perm=back)


@converter("QLinearAveragePool", domain=MS)
def qlinear_average_pool(ctx, node, args):
    x, sx, zx, sy, zy = (arg(args, k) for k in range(5))
    channels_last = bool(node.attr("channels_last", 0))
    rank = x.shape.ndim
    v = dequantize_scalar(ctx, x, sx, zx, "x")
    if channels_last:  # N, spatial..., C -> N, C, spatial...
        v = ctx.add("transpose", v, perm=(0, rank - 1) + tuple(range(1, rank - 1)))
    avg = ctx.add("pooling", v, mode="average", **pool_window(ctx, node, v),
                  count_include_pad=bool(node.attr("count_include_pad", 0)))
    if channels_last:
        avg = ctx.add("transpose", avg, perm=(0,) + tuple(range(2, rank)) + (1,))
    shifted = ctx.pointwise("add", ctx.pointwise("div", avg, scalar_scale(ctx, sy, "y scale")),
                            ctx.convert(scalar_zero_point(ctx, zy, x, "y zero point"), F32))
    return ctx.pointwise("quantize_linear", shifted, ctx.literal(np.float32(1)),
                         ctx.literal(np.zeros((), x.shape.dtype.np)), to=x.shape.dtype)


@converter("DynamicQuantizeLSTM", domain=MS)
def dynamic_quantize_lstm(ctx, node, args):
    args = list(args) + [None] * (12 - len(args))
    w_scale, w_zp, r_scale, r_zp = args[8:12]
    if any(p is None for p in (w_scale, w_zp, r_scale, r_zp)):
        raise ctx.error("W_scale, W_zero_point, R_scale and R_zero_point are required")
    d = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    # per direction ([dirs]) or per gate column ([dirs, 4H]); the op broadcasts either over W's columns
    params = [ctx.reshape(p, [d, p.shape.elements // d]) for p in (w_scale, w_zp, r_scale, r_zp)]
    params[0], params[2] = ctx.convert(params[0], F32), ctx.convert(params[2], F32)
    return recurrent(ctx, node, args[:8], "dynamic_quantize_lstm", 4, ["sigmoid", "tanh", "tanh"],
                     quant_params=params, input_forget=bool(node.attr("input_forget", 0)))
