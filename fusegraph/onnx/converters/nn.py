"""Convolution, pooling, normalization and friends -> conv/nn ops plus pointwise math.

ONNX window quirks end here: `auto_pad` becomes explicit begin/end padding, defaults are filled in,
per-channel parameters are reshaped to (C, 1, ...) so they broadcast against N-C-spatial tensors.
Normalizations decompose into `moments` + pointwise (exact, and a fusion pass re-fuses them); inference
BatchNormalization folds to one per-channel multiply-add, as ORT computes it and as conv folding wants.
"""

from __future__ import annotations

import math

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
    for n, k, s, d in zip(spatial_lens(ctx, x), ks, strides, dils, strict=True):
        span = (k - 1) * d + 1 if dilate_same else k
        total = max(0, (-(-n // s) - 1) * s + span - n)
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return tuple(begins + ends)


def _ints(node, name: str, n: int, default: int) -> tuple[int, ...]:
    v = node.attr(name, [default] * n)
    if len(v) != n:
        raise ValueError(f"attribute {name} {v} needs {n} values")
    return tuple(int(i) for i in v)


def conv_window(ctx, node, x, w) -> dict:
    """padding/stride/dilation/group of a Conv-like node (ONNX defaults filled in)."""
    ks = node.attr("kernel_shape", None) or list(w.shape.lens[2:])
    if list(ks) != list(w.shape.lens[2:]):
        raise ctx.error(f"kernel_shape {ks} does not match weight {w.shape}")
    nsp = len(ks)
    strides, dils = _ints(node, "strides", nsp, 1), _ints(node, "dilations", nsp, 1)
    pads = window_pads(ctx, node, x, ks, strides, dils)
    return dict(padding=pads, stride=strides, dilation=dils, group=int(node.attr("group", 1)))


def per_channel(ctx, p, rank: int):
    """A (C,) parameter as (C, 1, ..., 1), to broadcast against an N-C-spatial tensor of `rank`."""
    return ctx.reshape(p, (p.shape.lens[0],) + (1,) * (rank - 2)) if p.shape.ndim == 1 else p


def add_bias(ctx, y, b):
    return y if b is None else ctx.pointwise("add", y, per_channel(ctx, ctx.convert(b, y.shape.dtype), y.shape.ndim))


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
    strides, dils = _ints(node, "strides", nsp, 1), _ints(node, "dilations", nsp, 1)
    extra = list(_ints(node, "output_padding", nsp, 0))
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
    win = dict(padding=_ints(node, "pads", 2 * nsp, 0), stride=_ints(node, "strides", nsp, 1),
               dilation=_ints(node, "dilations", nsp, 1))
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
    # requantize in float32 as ORT does: round-half-even(acc * xs * ws / ys) + y_zero_point, saturated
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


# -- pooling ----------------------------------------------------------------------------------------
def pool_window(ctx, node, x) -> dict:
    ks = node.attr("kernel_shape")
    nsp = len(ks)
    if x.shape.ndim != nsp + 2:
        raise ctx.error(f"kernel_shape {ks} does not fit input {x.shape}")
    strides, dils = _ints(node, "strides", nsp, 1), _ints(node, "dilations", nsp, 1)
    return dict(lengths=tuple(ks), stride=strides, dilation=dils, ceil_mode=bool(node.attr("ceil_mode", 0)),
                padding=window_pads(ctx, node, x, ks, strides, dils, dilate_same=False))


@converter("MaxPool")
def max_pool(ctx, node, args):
    x = args[0]
    win = pool_window(ctx, node, x)
    y = ctx.add("pooling", x, mode="max", **win)
    if node.n_outputs > 1 and node.outputs[1]:
        return [y, ctx.add("max_pooling_indices", x, storage_order=int(node.attr("storage_order", 0)), **win)]
    return y


@converter("AveragePool")
def average_pool(ctx, node, args):
    return ctx.add("pooling", args[0], mode="average", **pool_window(ctx, node, args[0]),
                   count_include_pad=bool(node.attr("count_include_pad", 0)))


def _lp_order(ctx, node) -> int:
    p = node.attr("p", 2)  # a float before opset 2, an int since
    if p != int(p) or p < 1:
        raise ctx.error(f"p = {p}: only positive integer orders are supported")
    return int(p)


@converter("LpPool")
def lp_pool(ctx, node, args):
    return ctx.add("pooling", args[0], mode="lpnorm", lp_order=_lp_order(ctx, node), **pool_window(ctx, node, args[0]))


@converter("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx, node, args):
    mode = {"GlobalAveragePool": "average", "GlobalMaxPool": "max", "GlobalLpPool": "lpnorm"}[node.op_type]
    lp = _lp_order(ctx, node) if mode == "lpnorm" else 2
    return ctx.add("pooling", args[0], mode=mode, lp_order=lp, global_pool=True)


@converter("MaxUnpool", since=9)
def max_unpool(ctx, node, args):
    x, idx, out_shape = args[0], ctx.convert(args[1], DType.int64), arg(args, 2)
    if out_shape is not None:
        lens = ctx.const_ints(out_shape, "output_shape")
        if lens is None:  # known only at run time
            return ctx.add("max_unpool", x, idx, ctx.convert(out_shape, DType.int64))
    else:
        ks = node.attr("kernel_shape")
        nsp = len(ks)
        pads, strides = _ints(node, "pads", 2 * nsp, 0), _ints(node, "strides", nsp, 1)
        lens = list(x.shape.lens[:2]) + [(n - 1) * s + k - pads[i] - pads[i + nsp]
                                         for i, (n, k, s) in enumerate(zip(x.shape.lens[2:], ks, strides, strict=True))]
    return ctx.add("max_unpool", x, idx, out_lens=tuple(lens))


@converter("MaxRoiPool")
def max_roi_pool(ctx, node, args):
    return ctx.add("roi_pool", *args, pooled_shape=tuple(node.attr("pooled_shape")),
                   spatial_scale=float(node.attr("spatial_scale", 1.0)))


@converter("RoiAlign", since=10)
def roi_align(ctx, node, args):
    x, rois, idx = args
    # opset 10 had no coordinate_transformation_mode and behaved as output_half_pixel
    default = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    return ctx.add("roi_align", x, ctx.convert(rois, x.shape.dtype), ctx.convert(idx, DType.int64),
                   mode=node.attr("mode", "avg"), output_height=int(node.attr("output_height", 1)),
                   output_width=int(node.attr("output_width", 1)), sampling_ratio=int(node.attr("sampling_ratio", 0)),
                   spatial_scale=float(node.attr("spatial_scale", 1.0)),
                   coordinate_mode=node.attr("coordinate_transformation_mode", default))


# -- normalization ----------------------------------------------------------------------------------
def normalize(ctx, x, axes, eps: float, centered: bool = True):
    """((x - mean) or x) * rsqrt(var + eps) over `axes`; returns (y, mean, var, inv_std), dims kept."""
    mean, var = ctx.tuple_elems(ctx.add("moments", x, axes=tuple(axes), centered=centered), 2)
    inv_std = ctx.add("rsqrt", ctx.pointwise("add", var, ctx.scalar_like(eps, var)))
    y = ctx.pointwise("sub", x, mean) if centered else x
    return ctx.pointwise("mul", y, inv_std), mean, var, inv_std


def _axis(ctx, node, rank: int, default: int = -1) -> int:
    axis = int(node.attr("axis", default))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _affine(ctx, y, scale, bias, channelwise: bool):
    """y * scale + bias: per channel (C,) parameters, or ONNX-broadcast ones (LayerNorm)."""
    rank, ct = y.shape.ndim, y.shape.dtype
    for p, op in ((scale, "mul"), (bias, "add")):
        if p is not None:
            p = ctx.convert(p, ct)
            y = ctx.pointwise(op, y, per_channel(ctx, p, rank) if channelwise else p)
    return y


@converter("BatchNormalization")
def batch_norm(ctx, node, args):
    x, scale, bias, mean, var = args[:5]
    eps = float(node.attr("epsilon", 1e-5))
    dtype, ct = x.shape.dtype, compute_type(x)
    xc = ctx.convert(x, ct)
    scale, bias, mean, var = (ctx.convert(p, ct) for p in (scale, bias, mean, var))
    if node.opset >= 14 and node.attr("training_mode", 0):
        axes = (0,) + tuple(range(2, x.shape.ndim))
        y, bmean, bvar, _ = normalize(ctx, xc, axes, eps)
        y = _affine(ctx, y, scale, bias, True)
        momentum = float(node.attr("momentum", 0.9))
        running = [ctx.pointwise("add", ctx.pointwise("mul", old, ctx.scalar_like(momentum, old)),
                                 ctx.pointwise("mul", ctx.reshape(new, old.shape.lens),
                                               ctx.scalar_like(1 - momentum, old)))
                   for old, new in ((mean, bmean), (var, bvar))]
        return [ctx.convert(y, dtype)] + [ctx.convert(v, a.shape.dtype) for v, a in zip(running, args[3:5], strict=True)]
    # inference (and every opset before 14: running statistics): y = x * a + (bias - mean * a)
    a = ctx.pointwise("mul", scale, ctx.add("rsqrt", ctx.pointwise("add", var, ctx.scalar_like(eps, var))))
    b = ctx.pointwise("sub", bias, ctx.pointwise("mul", mean, a))
    y = ctx.pointwise("add", ctx.pointwise("mul", xc, per_channel(ctx, a, x.shape.ndim)), per_channel(ctx, b, x.shape.ndim))
    # older opsets list the running statistics as optional outputs; pass them through
    return [ctx.convert(y, dtype), args[3], args[4], args[3], args[4]]


@converter("InstanceNormalization")
def instance_norm(ctx, node, args):
    x, scale, bias = args
    ct = compute_type(x)
    y, *_ = normalize(ctx, ctx.convert(x, ct), range(2, x.shape.ndim), float(node.attr("epsilon", 1e-5)))
    return ctx.convert(_affine(ctx, y, scale, bias, True), x.shape.dtype)


def _stash_type(ctx, node, x) -> DType:
    st = DType.from_onnx(int(node.attr("stash_type", 1)))
    return st if st.is_float and st.itemsize >= x.shape.dtype.itemsize else x.shape.dtype


@converter("LayerNormalization", since=17)
def layer_norm(ctx, node, args):
    x, scale, bias = args[0], args[1], arg(args, 2)
    rank = x.shape.ndim
    axes = range(_axis(ctx, node, rank), rank)
    y, mean, _, inv_std = normalize(ctx, ctx.convert(x, _stash_type(ctx, node, x)), axes, float(node.attr("epsilon", 1e-5)))
    return [ctx.convert(_affine(ctx, y, scale, bias, False), x.shape.dtype), mean, inv_std]


@converter("RMSNormalization", since=23)
def rms_norm(ctx, node, args):
    x, scale = args
    rank = x.shape.ndim
    axes = range(_axis(ctx, node, rank), rank)
    y, *_ = normalize(ctx, ctx.convert(x, _stash_type(ctx, node, x)), axes, float(node.attr("epsilon", 1e-5)),
                        centered=False)
    return ctx.convert(_affine(ctx, y, scale, None, False), x.shape.dtype)


@converter("GroupNormalization", since=18)
def group_norm(ctx, node, args):
    x, scale, bias = args
    groups = int(node.attr("num_groups"))
    if x.shape.is_dynamic:  # the grouping reshape needs every dim
        raise ctx.error(f"GroupNormalization needs a static input, got {x.shape}")
    lens = x.shape.lens
    if lens[1] % groups:
        raise ctx.error(f"{lens[1]} channels do not split into {groups} groups")
    ct = _stash_type(ctx, node, x) if node.opset >= 21 else compute_type(x)
    xg = ctx.reshape(ctx.convert(x, ct), (lens[0], groups, math.prod(lens[1:]) // groups))
    y, *_ = normalize(ctx, xg, (2,), float(node.attr("epsilon", 1e-5)))
    if node.opset < 21:  # opset 18: one scale and bias per group
        return ctx.convert(ctx.reshape(_affine(ctx, y, scale, bias, True), lens), x.shape.dtype)
    return ctx.convert(_affine(ctx, ctx.reshape(y, lens), scale, bias, True), x.shape.dtype)


@converter("MeanVarianceNormalization", since=9)
def mean_variance_norm(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    axes = sorted({a % rank for a in node.attr("axes", [0, 2, 3])})
    mean, var = ctx.tuple_elems(ctx.add("moments", x, axes=tuple(axes)), 2)
    # (x - mean) / (sqrt(var) + 1e-9), the epsilon of the ONNX function body
    std = ctx.pointwise("add", ctx.add("sqrt", var), ctx.scalar_like(1e-9, var))
    return ctx.pointwise("div", ctx.pointwise("sub", x, mean), std)


@converter("LpNormalization")
def lp_normalization(ctx, node, args):
    x = args[0]
    axis, p = _axis(ctx, node, x.shape.ndim), int(node.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p = {p}: LpNormalization supports 1 and 2")
    if not x.shape.dims[axis].is_fixed:
        raise ctx.error(f"the normalized axis {axis} of {x.shape} must be static")
    # sum |x|^p = n * mean(|x|^p); moments' raw second moment gives mean(x^2) directly
    base = ctx.add("abs", x) if p == 1 else x
    mom = ctx.tuple_elems(ctx.add("moments", base, axes=(axis,), centered=False), 2)[p - 1]
    norm = ctx.pointwise("mul", mom, ctx.scalar_like(x.shape.dims[axis].min, mom))
    if p == 2:
        norm = ctx.add("sqrt", norm)
    # a zero norm gives 0, not 0/0 (the ONNX reference's rule)
    zero = ctx.scalar_like(0, norm)
    return ctx.pointwise("where", ctx.pointwise("equal", norm, zero), zero, ctx.pointwise("div", x, norm))


@converter("LRN")
def lrn(ctx, node, args):
    return ctx.add("lrn", args[0], alpha=float(node.attr("alpha", 1e-4)), beta=float(node.attr("beta", 0.75)),
                   bias=float(node.attr("bias", 1.0)), size=int(node.attr("size")))


# -- dropout ----------------------------------------------------------------------------------------
@converter("Dropout")
def dropout(ctx, node, args):
    """Inference (every opset before 12, or training_mode absent / constant false, or ratio 0): the
    identity with an all-true mask. Otherwise the `dropout` op, which decides when it runs."""
    x = args[0]
    ratio, training = arg(args, 1), arg(args, 2)
    ratio_value, training_value = ctx.const(ratio), ctx.const(training)
    if (node.opset < 12 or training is None or (training_value is not None and not bool(training_value))
            or (ratio_value is not None and float(ratio_value) == 0.0)):
        mask_type = DType.bool if node.opset >= 10 else x.shape.dtype  # opsets 1-9: the mask has x's type
        mask = ctx.broadcast(ctx.literal(1, mask_type), x)[0]
        return [ctx.add("identity", x), mask]
    seed = node.attr("seed", None)
    ratio = ratio if ratio is not None else ctx.literal(0.5, DType.float32)
    return ctx.tuple_elems(ctx.add("dropout", x, ratio, training, seed=None if seed is None else int(seed)), 2)
