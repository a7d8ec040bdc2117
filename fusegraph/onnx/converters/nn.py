"""Pooling, normalization, LRN and Dropout -> pooling / moments / lrn / dropout ops plus pointwise math.

Normalizations decompose into `moments` + pointwise (exact, and a fusion pass re-fuses them): each
normalizes over its axes, then applies its per-channel or broadcast affine. Inference
BatchNormalization folds to one per-channel multiply-add, as ORT computes it and as conv folding wants.
fp16/bf16 statistics run in float32 (LayerNorm-style ops: in their stash_type).
"""

from __future__ import annotations

import math

from ...ir.dtypes import DType
from ..registry import converter
from .conv import arg, compute_type, int_attrs, per_channel, window_pads


# -- pooling ----------------------------------------------------------------------------------------
def pool_window(ctx, node, x) -> dict:
    ks = node.attr("kernel_shape")
    nsp = len(ks)
    if x.shape.ndim != nsp + 2:
        raise ctx.error(f"kernel_shape {ks} does not fit input {x.shape}")
    strides, dils = int_attrs(ctx, node, "strides", nsp, 1), int_attrs(ctx, node, "dilations", nsp, 1)
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
        pads, strides = int_attrs(ctx, node, "pads", 2 * nsp, 0), int_attrs(ctx, node, "strides", nsp, 1)
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


def _bn_outputs(node) -> tuple[int, ...]:
    """The output counts ONNX allows: Y alone, or with the running mean and variance in training mode
    (opset 14 on); from opset 9 to 13, Y alone or all five (with the saved mean and variance)."""
    if node.opset >= 14:
        return (1, 3) if node.attr("training_mode", 0) else (1,)
    return (1, 5) if node.opset >= 9 else (1, 2, 3, 4, 5)


def _check_per_channel(ctx, x, params, names) -> None:
    """Each of `params` 1-D of x's channel count (dim 1, where both are known); else a ParseError
    naming it (numpy would broadcast a [C, 1] scale over a 3-D input: ONNX Runtime refuses it)."""
    channels = x.shape.dims[1] if x.shape.ndim > 1 else None
    for p, what in zip(params, names):
        if p.shape.ndim != 1 or (channels is not None and channels.is_fixed and p.shape.dims[0].is_fixed
                                 and p.shape.lens[0] != channels.min):
            raise ctx.error(f"{what} {p.shape} must be 1-D of the input's channel count ({channels})")


@converter("BatchNormalization")
def batch_norm(ctx, node, args):
    x, scale, bias, mean, var = args[:5]
    _check_per_channel(ctx, x, args[1:5], ("scale", "B", "input_mean", "input_var"))
    n_out, allowed = len(node.outputs), _bn_outputs(node)
    if n_out not in allowed:
        raise ctx.error(f"{n_out} outputs: BatchNormalization at opset {node.opset} "
                        f"(training_mode={node.attr('training_mode', 0)}) has {' or '.join(map(str, allowed))}")
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
    _check_per_channel(ctx, x, (scale, bias), ("scale", "B"))
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
