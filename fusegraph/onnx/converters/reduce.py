"""Reductions, arg-extrema and the softmax family -> `reduce_*`, `argmax`/`argmin`, `softmax`.

IR reductions always keep the reduced axes; `keepdims=0` becomes a reshape here. ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp and ReduceSumSquare are built from `reduce_sum`/`reduce_max` and
pointwise ops, so fusion passes see one reduction between pointwise chains. Axes that are only
known at run time (an `axes` input that is not a constant) take `reduce_dynamic` instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ..registry import converter


# -- axes -------------------------------------------------------------------------------------------
def normalize_axes(ctx, axes: Sequence[int], rank: int, what: str = "axes") -> tuple[int, ...]:
    """Non-negative, sorted, unique axes; out-of-range axes are a ParseError naming the node."""
    out = set()
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"{what} {list(axes)} out of range for rank {rank}")
        out.add(a % rank)
    if len(out) != len(axes):
        raise ctx.error(f"{what} {list(axes)} repeats an axis")
    return tuple(sorted(out))


def reduce_axes(ctx, node, x: Instruction, axes: Sequence[int]) -> tuple[int, ...]:
    """The axes a Reduce* node reduces. No axes means all axes, unless noop_with_empty_axes asks
    for no reduction at all (())."""
    if not axes:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(x.shape.ndim))
    return normalize_axes(ctx, axes, x.shape.ndim)


def drop_axes(ctx, x: Instruction, axes: Sequence[int]) -> Instruction:
    """Remove size-1 `axes` (keepdims=0)."""
    if not axes:
        return x
    if x.shape.is_dynamic:
        return ctx.add("squeeze", x, axes=tuple(axes))
    return ctx.reshape(x, [n for i, n in enumerate(x.shape.lens) if i not in axes])


def reduce(ctx, name: str, x: Instruction, axes: tuple[int, ...]) -> Instruction:
    """`name` over `axes` (kept); reducing no axes is the identity."""
    return ctx.add(name, x, axes=axes) if axes else x


def _reducer(ctx, node, args, from_input: bool):
    """`r(kind, v, keep)`: v reduced over the node's axes by reduce_<kind> ("sum", "max", ...),
    keeping the reduced dims when `keep`, else as the node's keepdims says. Constant axes give
    `reduce_<kind>` (+ a reshape); axes known only at run time give `reduce_dynamic`."""
    keepdims = bool(node.attr("keepdims", 1))
    axes_in = args[1] if from_input and len(args) > 1 else None
    if not from_input:
        axes = node.attr("axes", [])
    else:
        axes = [] if axes_in is None else ctx.const_ints(axes_in, "axes")
    if axes is None:  # an input computed at run time
        axes_in = ctx.convert(axes_in, DType.int64)
        noop = bool(node.attr("noop_with_empty_axes", 0))
        return lambda kind, v, keep=False: ctx.add("reduce_dynamic", v, axes_in, reduction=kind,
                                                   keepdims=keep or keepdims, noop_with_empty_axes=noop)
    axes = reduce_axes(ctx, node, args[0], axes)

    def r(kind: str, v: Instruction, keep: bool = False) -> Instruction:
        out = reduce(ctx, f"reduce_{kind}", v, axes)
        return out if keep or keepdims else drop_axes(ctx, out, axes)

    return r


# -- Reduce* ----------------------------------------------------------------------------------------
def _log_sum_exp(ctx, r, x):
    # log(sum(exp(x - m))) + m with m the max, so exp cannot overflow. An infinite max (all -inf,
    # an empty axis, or a +inf element) shifts by 0 instead, which keeps -inf/+inf exact.
    def shift(m):
        return ctx.pointwise("where", ctx.add("isinf", m), ctx.scalar_like(0, m), m)

    total = r("sum", ctx.add("exp", ctx.pointwise("sub", x, shift(r("max", x, keep=True)))))
    return ctx.pointwise("add", ctx.add("log", total), shift(r("max", x)))


# ONNX op -> how it is built from reductions: fn(ctx, r, x), r as `_reducer` makes it
_REDUCTIONS = {
    "ReduceSum": lambda ctx, r, x: r("sum", x),
    "ReduceMean": lambda ctx, r, x: r("mean", x),
    "ReduceMax": lambda ctx, r, x: r("max", x),
    "ReduceMin": lambda ctx, r, x: r("min", x),
    "ReduceProd": lambda ctx, r, x: r("prod", x),
    "ReduceL1": lambda ctx, r, x: r("sum", ctx.add("abs", x)),                        # sum(|x|)
    "ReduceSumSquare": lambda ctx, r, x: r("sum", ctx.add("mul", x, x)),              # sum(x*x)
    "ReduceL2": lambda ctx, r, x: ctx.add("sqrt", r("sum", ctx.add("mul", x, x))),    # sqrt(sum(x*x))
    "ReduceLogSum": lambda ctx, r, x: ctx.add("log", r("sum", x)),                    # log(sum(x))
    "ReduceLogSumExp": _log_sum_exp,
}
# The opset from which `axes` is an input rather than an attribute.
_AXES_INPUT_SINCE = {op: 18 for op in _REDUCTIONS} | {"ReduceSum": 13}


def _reduction(op_type: str):
    build = _REDUCTIONS[op_type]

    def convert(ctx, node, args):
        r = _reducer(ctx, node, args, from_input=node.opset >= _AXES_INPUT_SINCE[op_type])
        return build(ctx, r, args[0])

    return convert


for _op in _REDUCTIONS:
    converter(_op)(_reduction(_op))


# -- ArgMax / ArgMin --------------------------------------------------------------------------------
@converter("ArgMax", "ArgMin")
def arg_reduce(ctx, node, args):
    x = args[0]
    (axis,) = normalize_axes(ctx, [node.attr("axis", 0)], x.shape.ndim, "axis")
    out = ctx.add("argmax" if node.op_type == "ArgMax" else "argmin", x, axis=axis,
                  select_last_index=bool(node.attr("select_last_index", 0)))
    return out if node.attr("keepdims", 1) else drop_axes(ctx, out, (axis,))


# -- Softmax / LogSoftmax / Hardmax ---------------------------------------------------------------
def _hardmax(ctx, x: Instruction, axis: int) -> Instruction:
    # one_hot(argmax) built as argmax == iota along `axis`, so it stays a reduction + pointwise.
    n = x.shape.lens[axis]
    iota = ctx.literal(np.arange(n, dtype=np.int64).reshape([n if i == axis else 1 for i in range(x.shape.ndim)]))
    hit = ctx.pointwise("equal", ctx.add("argmax", x, axis=axis), iota)
    return ctx.convert(hit, x.shape.dtype)


def _normalizer(ctx, op_type: str, x: Instruction, axis: int) -> Instruction:
    if op_type == "Hardmax":
        return _hardmax(ctx, x, axis)
    return ctx.add("softmax" if op_type == "Softmax" else "log_softmax", x, axis=axis)


@converter("Softmax", "LogSoftmax", "Hardmax")
def softmax_v1(ctx, node, args):
    """Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] and
    normalized over its second dim: over every axis from `axis` on."""
    x = args[0]
    rank = x.shape.ndim
    (axis,) = normalize_axes(ctx, [node.attr("axis", 1)], max(rank, 1), "axis")
    if axis == rank - 1:
        return _normalizer(ctx, node.op_type, x, axis)
    lens = x.shape.lens
    flat = ctx.reshape(x, [int(np.prod(lens[:axis])), int(np.prod(lens[axis:]))])
    return ctx.reshape(_normalizer(ctx, node.op_type, flat, 1), lens)


@converter("Softmax", "LogSoftmax", "Hardmax", since=13)
def softmax_v13(ctx, node, args):
    x = args[0]
    (axis,) = normalize_axes(ctx, [node.attr("axis", -1)], x.shape.ndim, "axis")
    return _normalizer(ctx, node.op_type, x, axis)
