"""Convolutions -> convolution / deconvolution / deform_convolution / col2im ops, bias as a pointwise add.

ONNX window quirks end here: `auto_pad` becomes explicit begin/end padding, defaults are filled in,
per-channel parameters are reshaped to (C, 1, ...) so they broadcast against N-C-spatial tensors.
Integer convolutions (ConvInteger, QLinearConv) subtract zero points in int32 and convolve exactly;
QLinearConv requantizes with pointwise float32 math. The window helpers here serve pooling too.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ..registry import converter

LOW_PRECISION = (DType.float16, DType.bfloat16)


# -- shared helpers ---------------------------------------------------------------------------------
def spatial_lens(ctx, x, what: str = "auto_pad SAME") -> list[int]:
    dims = x.shape.dims[2:]
    if any(not d.is_fixed for d in dims):
        raise ctx.error(f"{what} needs static spatial dims, input is {x.shape}")
    return [d.min for d in dims]


def window_pads(ctx, node, x, ks, strides, dils, dilate_same: bool = True) -> tuple[int, ...]:
    """Explicit (begins..., ends...) padding from `pads`/`auto_pad`. SAME pads so out = ceil(in / stride),
    the odd unit at the end (SAME_UPPER) or the beginning (SAME_LOWER). Pooling pads for the undilated
    window (`dilate_same` False), as ORT and the ONNX reference do."""
    nsp = len(ks)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = node.attr("pads", [0] * (2 * nsp))
        if len(pads) != 2 * nsp or min(pads) < 0:
            raise ctx.error(f"pads {pads} must be {2 * nsp} non-negative values")
        return tuple(pads)
    if auto == "VALID":
        return (0,) * (2 * nsp)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"unknown auto_pad {auto!r}")
    begins, ends = [], []
    for dim, k, s, d in zip(x.shape.dims[2:], ks, strides, dils, strict=True):
        span = (k - 1) * d + 1 if dilate_same else k
        if dim.is_fixed:
            n = dim.min
            total = max(0, (-(-n // s) - 1) * s + span - n)
        elif s == 1 or span == 1:  # the same for every size (none for a 1-wide window)
            total = span - 1
        else:  # it depends on the size modulo the stride
            raise ctx.error(f"auto_pad {auto} with stride {s} needs static spatial dims, input is {x.shape}")
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return tuple(begins + ends)


def int_attrs(ctx, node, name: str, n: int, default: int) -> tuple[int, ...]:
    """An ints attribute of exactly `n` values (`n` copies of `default` when absent)."""
    v = node.attr(name, [default] * n)
    if len(v) != n:
        raise ctx.error(f"attribute {name} {v} needs {n} values")
    return tuple(int(i) for i in v)


def conv_window(ctx, node, x, w) -> dict:
    """padding/stride/dilation/group of a Conv-like node (ONNX defaults filled in)."""
    ks = node.attr("kernel_shape", None) or list(w.shape.lens[2:])
    if list(ks) != list(w.shape.lens[2:]):
        raise ctx.error(f"kernel_shape {ks} does not match weight {w.shape}")
    nsp = len(ks)
    strides, dils = int_attrs(ctx, node, "strides", nsp, 1), int_attrs(ctx, node, "dilations", nsp, 1)
    pads = window_pads(ctx, node, x, ks, strides, dils)
    return dict(padding=pads, stride=strides, dilation=dils, group=int(node.attr("group", 1)))


def per_channel(ctx, p, rank: int):
    """A (C,) parameter as (C, 1, ..., 1), to broadcast against an N-C-spatial tensor of `rank`."""
    return ctx.reshape(p, (p.shape.lens[0],) + (1,) * (rank - 2)) if p.shape.ndim == 1 else p


def add_bias(ctx, y, b):
    """y + b per output channel. The bias is 1-D of the channel count: anything else would broadcast
    against the output in some other way (ORT refuses it too)."""
    if b is None:
        return y
    channels = y.shape.dims[1]
    if b.shape.ndim != 1 or (channels.is_fixed and b.shape.dims[0].is_fixed and b.shape.lens[0] != channels.min):
        raise ctx.error(f"bias {b.shape} must be 1-D of the output's channel count ({channels})")
    return ctx.pointwise("add", y, per_channel(ctx, ctx.convert(b, y.shape.dtype), y.shape.ndim))


def compute_type(x) -> DType:
    # fp16/bf16 statistics and accumulations run in float32, as ORT and the ONNX reference do
    return DType.float32 if x.shape.dtype in LOW_PRECISION else x.shape.dtype


def arg(args, i: int):
    return args[i] if len(args) > i else None


# -- convolutions -----------------------------------------------------------------------------------
@converter("Conv")
def conv(ctx, node, args):
    x, w, b = args[0], args[1], arg(args, 2)
    return add_bias(ctx, ctx.add("convolution", x, w, **conv_window(ctx, node, x, w)), b)


@converter("ConvTranspose")
def conv_transpose(ctx, node, args):
    x, w, b = args[0], args[1], arg(args, 2)
    ks = list(w.shape.lens[2:])
    if list(node.attr("kernel_shape", ks)) != ks:
        raise ctx.error(f"kernel_shape does not match weight {w.shape}")
    nsp = len(ks)
    strides, dils = int_attrs(ctx, node, "strides", nsp, 1), int_attrs(ctx, node, "dilations", nsp, 1)
    extra = list(int_attrs(ctx, node, "output_padding", nsp, 0))
    auto = node.attr("auto_pad", "NOTSET")
    out_shape = node.attr("output_shape", None)
    if out_shape is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        pads = window_pads(ctx, node, x, ks, strides, dils) if auto != "VALID" else (0,) * (2 * nsp)
    else:
        # pads from a target size: explicit output_shape, or in * stride for SAME
        in_sp = spatial_lens(ctx, x, "ConvTranspose with output_shape/auto_pad")
        want = list(out_shape[-nsp:]) if out_shape is not None else [n * s for n, s in zip(in_sp, strides, strict=True)]
        begins, ends = [], []
        for i, (n, k, s, d, o) in enumerate(zip(in_sp, ks, strides, dils, want, strict=True)):
            total = s * (n - 1) + extra[i] + (k - 1) * d + 1 - o
            if total < 0:  # asked for more than the full scatter: zero-extend at the end
                extra[i] -= total
                total = 0
            # the spec: the odd unit goes to the end for SAME_UPPER, to the beginning otherwise
            begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
            ends.append(total - begins[-1])
        pads = tuple(begins + ends)
    y = ctx.add("deconvolution", x, w, padding=pads, stride=strides, dilation=dils,
                group=int(node.attr("group", 1)), output_padding=tuple(extra))
    return add_bias(ctx, y, b)


@converter("DeformConv", since=19)
def deform_conv(ctx, node, args):
    x, w, offset, b, mask = (arg(args, i) for i in range(5))
    win = conv_window(ctx, node, x, w)
    inputs = [x, w, offset] + ([mask] if mask is not None else [])
    y = ctx.add("deform_convolution", *inputs, offset_group=int(node.attr("offset_group", 1)), **win)
    return add_bias(ctx, y, b)


@converter("Col2Im", since=18)
def col2im(ctx, node, args):
    x, image, block = args
    image_v, block_v = ctx.const_ints(image, "image_shape"), ctx.const_ints(block, "block_shape")
    nsp = image.shape.lens[0]
    win = dict(padding=int_attrs(ctx, node, "pads", 2 * nsp, 0), stride=int_attrs(ctx, node, "strides", nsp, 1),
               dilation=int_attrs(ctx, node, "dilations", nsp, 1))
    if image_v is None or block_v is None:  # shapes known only at run time
        return ctx.add("col2im", x, ctx.convert(image, DType.int64), ctx.convert(block, DType.int64), **win)
    return ctx.add("col2im", x, image_lens=tuple(image_v), block_lens=tuple(block_v), **win)


def _centered_int32(ctx, v, zero_point, out_channels: bool):
    """v - zero_point in int32 (a per-output-channel zero point is reshaped to broadcast over a weight)."""
    v = ctx.convert(v, DType.int32)
    if zero_point is None:
        return v
    zp = ctx.convert(zero_point, DType.int32)
    if out_channels and zp.shape.ndim == 1 and zp.shape.lens[0] > 1:
        zp = ctx.reshape(zp, (zp.shape.lens[0],) + (1,) * (v.shape.ndim - 1))  # weight axis 0
    return ctx.pointwise("sub", v, zp)


@converter("ConvInteger", since=10)
def conv_integer(ctx, node, args):
    x, w, xzp, wzp = (arg(args, i) for i in range(4))
    xi, wi = _centered_int32(ctx, x, xzp, False), _centered_int32(ctx, w, wzp, True)
    return ctx.add("convolution", xi, wi, **conv_window(ctx, node, x, w))


@converter("QLinearConv", since=10)
def qlinear_conv(ctx, node, args):
    x, xs, xzp, w, ws, wzp, ys, yzp, b = (arg(args, i) for i in range(9))
    acc = ctx.add("convolution", _centered_int32(ctx, x, xzp, False), _centered_int32(ctx, w, wzp, True),
                  **conv_window(ctx, node, x, w))
    acc = add_bias(ctx, acc, b)
    # requantize as ORT's kernel (MlasRequantizeOutput): one float32 multiplier xs * ws / ys per
    # output channel, in that order; round-half-even(acc * multiplier) (nearbyint), then + y_zero_point,
    # saturated. acc is the exact int32 sum (ORT's u8s8 x86 kernels without VNNI saturate int16 pairs)
    f32 = DType.float32
    scale = ctx.pointwise("div", ctx.pointwise("mul", ctx.convert(xs, f32), ctx.convert(ws, f32)), ctx.convert(ys, f32))
    r = ctx.add("round", ctx.pointwise("mul", ctx.convert(acc, f32), per_channel(ctx, scale, acc.shape.ndim)))
    out_type = (yzp if yzp is not None else x).shape.dtype
    if yzp is not None:
        r = ctx.pointwise("add", r, ctx.convert(yzp, f32))
    info = np.iinfo(out_type.np)
    r = ctx.pointwise("clip", r, ctx.literal(info.min, f32), ctx.literal(info.max, f32))
    return ctx.convert(r, out_type)


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(ctx, node, args):
    x, w, b, past = (arg(args, i) for i in range(4))
    act = node.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ctx.error(f"unknown activation {act!r}")
    dtype, ct = x.shape.dtype, compute_type(x)
    if past is None:
        if x.shape.is_dynamic:
            raise ctx.error(f"an absent past_state needs a static input, got {x.shape}")
        n, c, _ = x.shape.lens
        past = ctx.literal(np.zeros((n, c, w.shape.lens[-1] - 1), dtype.np))
    # fp16 runs in float32 throughout (the reference applies the activation in float32)
    res = ctx.add("causal_conv_with_state", ctx.convert(x, ct), ctx.convert(w, ct), ctx.convert(past, ct))
    y, state = ctx.tuple_elems(res, 2)
    y = add_bias(ctx, y, b)
    if act != "none":
        y = ctx.add("silu", y)
    return [ctx.convert(y, dtype), ctx.convert(state, dtype)]
