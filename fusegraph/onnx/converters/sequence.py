"""Sequence and optional ONNX ops -> the ops of `fusegraph.ops.sequence`."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir.dtypes import DType
from ...ir.shape import OptionalShape, SequenceShape
from ...ops.sequence import split_sizes
from ..registry import converter
from ..types import shape_from_type
from .control import module_name


def _normalize_axis(ctx, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _sequence(ctx, x, what: str = "input") -> SequenceShape:
    if x is None or not isinstance(x.shape, SequenceShape):
        raise ctx.error(f"{what} must be a sequence, got {None if x is None else x.shape}")
    return x.shape


@converter("SequenceConstruct", since=11)
def sequence_construct(ctx, node, args):
    return ctx.add("sequence_construct", *args)


@converter("SequenceEmpty", since=11)
def sequence_empty(ctx, node, args):
    return ctx.add("sequence_empty", dtype=DType.from_onnx(node.attr("dtype", TensorProto.FLOAT)))


@converter("SequenceAt", since=11)
def sequence_at(ctx, node, args):
    return ctx.add("sequence_at", *args)


@converter("SequenceInsert", since=11)
def sequence_insert(ctx, node, args):
    seq, x, *pos = args
    return ctx.add("sequence_insert", seq, x, *[p for p in pos if p is not None])


@converter("SequenceErase", since=11)
def sequence_erase(ctx, node, args):
    seq, *pos = args
    # No position erases the last element, which is position -1.
    at = pos[0] if pos and pos[0] is not None else ctx.literal(-1, DType.int64)
    return ctx.add("sequence_erase", seq, at)


@converter("SequenceLength", since=11)
def sequence_length(ctx, node, args):
    return ctx.add("sequence_length", args[0])


@converter("SplitToSequence", since=11)
def split_to_sequence(ctx, node, args):
    x, *rest = args
    split = rest[0] if rest else None
    axis = _normalize_axis(ctx, node.attr("axis", 0), x.shape.ndim, "axis")
    if split is None:
        return ctx.add("split_to_sequence", x, axis=axis, sizes=None, keepdims=bool(node.attr("keepdims", 1)))
    value = ctx.const(split)
    if value is None:  # sizes known only at run time
        return ctx.add("split_to_sequence", x, split, axis=axis)
    total = x.shape.dims[axis]
    if np.ndim(value) == 0 and not total.is_fixed:
        return ctx.add("split_to_sequence", x, split, axis=axis)
    # keepdims applies only to the split-less form.
    return ctx.add("split_to_sequence", x, axis=axis, sizes=tuple(split_sizes(value, total.min)))


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(ctx, node, args):
    seq = _sequence(ctx, args[0])
    if seq.elem is None:
        raise ctx.error(f"cannot concatenate {seq}: the elements' rank is unknown")
    new_axis = bool(node.attr("new_axis", 0))
    axis = _normalize_axis(ctx, node.attr("axis"), seq.elem.ndim + new_axis, "axis")
    return ctx.add("concat_from_sequence", args[0], axis=axis, new_axis=new_axis)


@converter("SequenceMap", since=17)
def sequence_map(ctx, node, args):
    _sequence(ctx, args[0], "the first input")
    shapes = []
    for k, a in enumerate(args):
        s = a.shape.elem if isinstance(a.shape, SequenceShape) else a.shape
        if s is None:
            raise ctx.error(f"input {k} {a.shape}: its elements' rank is unknown")
        shapes.append(s)
    body = ctx.parse_subgraph(node.attr("body"), module_name(node, "body"), shapes)
    out = ctx.add("sequence_map", *args, module_args=[body])
    return ctx.tuple_elems(out, len(node.outputs))


@converter("Optional", since=15)
def optional(ctx, node, args):
    if args and args[0] is not None:
        return ctx.add("optional", args[0])
    if not node.has("type"):
        raise ctx.error("an empty Optional needs its 'type' attribute")
    return ctx.add("optional", elem=shape_from_type(node.attr("type"), node.outputs[0]))


def _is_optional(x) -> bool:
    return isinstance(x.shape, OptionalShape)


@converter("OptionalHasElement", since=15)
def optional_has_element(ctx, node, args):
    x = args[0] if args else None
    if x is None or not _is_optional(x):  # since opset 18 a plain tensor or sequence counts as present
        return ctx.literal(x is not None, DType.bool)
    return ctx.add("optional_has_element", x)


@converter("OptionalGetElement", since=15)
def optional_get_element(ctx, node, args):
    x = args[0]
    if not _is_optional(x):  # opset 18: a plain tensor or sequence is its own element
        return x
    return ctx.add("optional_get_element", x)

