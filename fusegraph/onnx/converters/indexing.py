"""Gather/scatter, one-hot, sequence and selection ONNX ops -> `ops/indexing.py` and `ops/select.py`.

Axes are normalized here. Inputs that decide output shapes (TopK's k, OneHot's depth) and the
cumulative ops' axis become attributes when they are constants (the usual case); otherwise the op
reads them at run time and the extents they decide are dynamic. Index tensors are always run-time inputs.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ..registry import converter


def axis_attr(ctx, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [0, rank), counting negative values from the end."""
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _one(ctx, value, what: str):
    """The single element of a constant (a scalar or a [1] tensor)."""
    v = np.asarray(value)
    if v.size != 1:
        raise ctx.error(f"{what} must have one element, got shape {list(v.shape)}")
    return v.reshape(-1)[0]


def _reduction(ctx, node) -> str:
    reduction = node.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.error(f"unknown reduction {reduction!r}")
    return reduction


@converter("Gather")
def gather(ctx, node, args):
    data, idx = args
    return ctx.add("gather", data, idx, axis=axis_attr(ctx, node.attr("axis", 0), data.shape.ndim))


@converter("GatherElements", since=11)
def gather_elements(ctx, node, args):
    data, idx = args
    return ctx.add("gather_elements", data, idx, axis=axis_attr(ctx, node.attr("axis", 0), data.shape.ndim))


@converter("GatherND", since=11)
def gather_nd(ctx, node, args):
    return ctx.add("gather_nd", *args, batch_dims=node.attr("batch_dims", 0))


@converter("ScatterElements", since=11)
@converter("Scatter", since=9)
def scatter_elements(ctx, node, args):
    data, idx, upd = args
    return ctx.add("scatter_elements", data, idx, upd, reduction=_reduction(ctx, node),
                   axis=axis_attr(ctx, node.attr("axis", 0), data.shape.ndim))


@converter("ScatterND", since=11)
def scatter_nd(ctx, node, args):
    return ctx.add("scatter_nd", *args, reduction=_reduction(ctx, node))


@converter("TensorScatter", since=24)
def tensor_scatter(ctx, node, args):
    cache, upd = args[:2]
    at = args[2] if len(args) > 2 and args[2] is not None else None
    if at is None:  # absent write_indices: every batch entry writes from position 0
        at = ctx.literal(np.zeros(cache.shape.lens[0], np.int64))
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(f"unknown mode {mode!r}")
    axis = axis_attr(ctx, node.attr("axis", -2), cache.shape.ndim)
    if axis == 0:
        raise ctx.error("axis 0 is the batch axis; the sequence axis must come after it")
    return ctx.add("tensor_scatter", cache, upd, at, axis=axis, circular=mode == "circular")


@converter("OneHot", since=9)
def one_hot(ctx, node, args):
    idx, depth, values = args
    rank = idx.shape.ndim
    axis = node.attr("axis", -1)
    if not -rank - 1 <= axis <= rank:
        raise ctx.error(f"axis {axis} is out of range for output rank {rank + 1}")
    axis %= rank + 1
    n = ctx.const(depth)
    if n is None:  # the new axis's extent is known at run time only
        return ctx.add("one_hot", idx, depth, values, depth=None, axis=axis)
    return ctx.add("one_hot", idx, values, depth=int(np.asarray(n).reshape(-1)[0]), axis=axis)


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx, node, args):
    x, lens = args
    rank = x.shape.ndim
    return ctx.add("reverse_sequence", x, lens,
                   batch_axis=axis_attr(ctx, node.attr("batch_axis", 1), rank, "batch_axis"),
                   time_axis=axis_attr(ctx, node.attr("time_axis", 0), rank, "time_axis"))


@converter("NonZero", since=9)
def nonzero(ctx, node, args):
    return ctx.add("nonzero", args[0])


@converter("Compress", since=9)
def compress(ctx, node, args):
    x, cond = args
    axis = node.attr("axis", None)
    return ctx.add("compress", x, cond, axis=None if axis is None else axis_attr(ctx, axis, x.shape.ndim))


@converter("Unique", since=11)
def unique(ctx, node, args):
    x = args[0]
    axis = node.attr("axis", None)
    out = ctx.add("unique", x, sorted=bool(node.attr("sorted", 1)),
                  axis=None if axis is None else axis_attr(ctx, axis, x.shape.ndim))
    return ctx.tuple_elems(out, 4)


def _top_k(ctx, node, x, k, k_input=None):
    axis = axis_attr(ctx, node.attr("axis", -1), x.shape.ndim)
    if k is not None and k < 0:
        raise ctx.error(f"k must not be negative, got {k}")
    # sorted=0 leaves the order unspecified: sorted output is a valid answer
    extra = [ctx.convert(k_input, DType.int64)] if k is None else []
    out = ctx.add("top_k", x, *extra, k=k, axis=axis, largest=bool(node.attr("largest", 1)))
    return ctx.tuple_elems(out, 2)


@converter("TopK")
def top_k_v1(ctx, node, args):
    return _top_k(ctx, node, args[0], node.attr("k"))


@converter("TopK", since=10)
def top_k(ctx, node, args):
    k = ctx.const(args[1])  # None: k is known at run time only, and so is the output extent
    return _top_k(ctx, node, args[0], None if k is None else int(_one(ctx, k, "K")), args[1])


def _cumulative(ctx, node, args, op: str):
    """CumSum and CumProd: the same inputs and flags; only the running ufunc differs."""
    x, axis_in = args
    flags = {"exclusive": bool(node.attr("exclusive", 0)), "reverse": bool(node.attr("reverse", 0))}
    axis = ctx.const(axis_in)
    if axis is None:  # an axis computed at run time: the op reads it
        return ctx.add(op, x, ctx.convert(axis_in, DType.int64), axis=None, **flags)
    return ctx.add(op, x, axis=axis_attr(ctx, int(_one(ctx, axis, "axis")), x.shape.ndim), **flags)


@converter("CumSum", since=11)
def cumsum(ctx, node, args):
    return _cumulative(ctx, node, args, "cumsum")


@converter("CumProd", since=26)
def cumprod(ctx, node, args):
    return _cumulative(ctx, node, args, "cumprod")


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx, node, args):
    args = list(args) + [None] * (5 - len(args))
    boxes, scores, max_out, iou, score = args
    # absent inputs: no box kept (max 0 per class), IoU threshold 0, no score threshold
    max_out = max_out if max_out is not None else ctx.literal(np.zeros(1, np.int64))
    iou = iou if iou is not None else ctx.literal(np.zeros(1, np.float32))
    inputs = [boxes, scores, ctx.convert(max_out, DType.int64), iou] + ([score] if score is not None else [])
    return ctx.add("non_max_suppression", *inputs, center_point_box=bool(node.attr("center_point_box", 0)))
