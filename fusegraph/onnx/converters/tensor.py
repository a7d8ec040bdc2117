"""ONNX ops that make tensors: Constant, Shape, Size, ConstantOfShape, Range, EyeLike, Trilu.

What can be known while parsing (the shape of a static input, a constant range, an identity
matrix) becomes a literal; `shape_of`, `size_of`, `constant_of_shape` and `range` remain only for
values computed at run time.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ir.op import make_op
from ..registry import converter
from .movement import arg

# Constant's value attributes (exactly one is set) -> the literal array
_CONSTANT_FORMS = {
    "value": np.asarray,
    "sparse_value": np.asarray,
    "value_float": lambda v: np.asarray(v, np.float32),
    "value_floats": lambda v: np.asarray(v, np.float32),
    "value_int": lambda v: np.asarray(v, np.int64),
    "value_ints": lambda v: np.asarray(v, np.int64),
    "value_string": lambda v: np.asarray(v, object),
    "value_strings": lambda v: np.asarray(v, object),
}


@converter("Constant")
def constant(ctx, node, args):
    forms = [k for k in _CONSTANT_FORMS if node.has(k)]
    if len(forms) != 1:
        raise ctx.error(f"needs exactly one value attribute, has {forms or 'none'}")
    if forms == ["sparse_value"] and not node.attrs["sparse_value"].ref_attr_name:
        from .sparse import sparse_constant  # kept sparse: a MatMul reads it so

        return sparse_constant(ctx, node.attrs["sparse_value"].sparse_tensor)
    return ctx.literal(_CONSTANT_FORMS[forms[0]](node.attr(forms[0])))


@converter("Shape")
def shape(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    # start/end (opset 15) count from the end when negative and are clamped to [0, rank]
    start, end = (min(max(v + rank if v < 0 else v, 0), rank)
                  for v in (node.attr("start", 0), node.attr("end", rank)))
    end = max(start, end)
    dims = x.shape.dims[start:end]
    if all(d.is_fixed for d in dims):
        return ctx.literal(np.array([d.min for d in dims], np.int64))
    return ctx.add("shape_of", x, start=start, end=end)


@converter("Size")
def size(ctx, node, args):
    x = args[0]
    if not x.shape.is_dynamic:
        return ctx.literal(np.array(x.shape.elements, np.int64))
    return ctx.add("size_of", x)


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx, node, args):
    value = np.asarray(node.attr("value", np.zeros(1, np.float32))).reshape(-1)
    if value.size != 1:
        raise ctx.error(f"value must hold one element, has {value.size}")
    scalar = value.reshape(())
    dims = ctx.const_ints(args[0], "shape")
    if dims is None:
        shape_in = ctx.convert(args[0], DType.int64)
        return ctx.add("constant_of_shape", shape_in, value=scalar.item(), dtype=DType.from_numpy(scalar.dtype))
    # a broadcast view of one element: constant propagation decides whether to materialize it
    lit = ctx.literal(scalar)
    return ctx.add("broadcast", lit, out_lens=tuple(dims)) if dims else lit


@converter("Range", since=11)
def range_(ctx, node, args):
    # the bounds are scalars, though exporters (and ONNX's own function bodies) pass 1-element tensors
    for a, what in zip(args, ("start", "limit", "delta")):
        ctx.require_scalar(a, what)
    args = [ctx.reshape(a, []) if a.shape.ndim else a for a in args]
    values = [ctx.const(a) for a in args]
    if all(v is not None for v in values):
        return ctx.literal(make_op("range").compute(values))
    return ctx.add("range", *args)


@converter("EyeLike", since=9)
def eye_like(ctx, node, args):
    x = args[0]
    if x.shape.ndim != 2 or x.shape.is_dynamic:
        raise ctx.error(f"input must be a static 2-D tensor, got {x.shape}")
    dtype = DType.from_onnx(node.attr("dtype")) if node.has("dtype") else x.shape.dtype
    rows, cols = x.shape.lens
    return ctx.literal(np.eye(rows, cols, k=node.attr("k", 0), dtype=dtype.np))


@converter("Trilu", since=14)
def trilu(ctx, node, args):
    x = args[0]
    if x.shape.ndim < 2 or not all(d.is_fixed for d in x.shape.dims[-2:]):
        raise ctx.error(f"the last two dims must be static, got {x.shape}")
    rows, cols = x.shape.dims[-2].min, x.shape.dims[-1].min
    diagonal = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # which diagonal each element is on
    upper = bool(node.attr("upper", 1))
    k_in = arg(args, 1)
    if k_in is not None:
        ctx.require_scalar(k_in, "k")
    k = ctx.const(k_in) if k_in is not None else np.int64(0)
    if k is not None:
        k = int(np.asarray(k).reshape(-1)[0])
        keep = ctx.literal(diagonal >= k if upper else diagonal <= k)
    else:  # k known at run time: compare against it in the graph
        k_in = ctx.convert(k_in, DType.int64)
        keep = ctx.pointwise("greater_equal" if upper else "less_equal", ctx.literal(diagonal), k_in)
    return ctx.pointwise("where", keep, x, ctx.scalar_like(0, x))
