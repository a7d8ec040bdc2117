"""Where the elements of a shape vector come from, when it is not a constant.

Exporters write reshape targets as Concat(Unsqueeze(Gather(Shape(x), 0)), 4, 16, -1). With a
dynamic x that vector is computed at run time, but each of its elements is still either a constant
or "dim i of some tensor"; knowing which lets the converter write the target as ONNX dims where 0
means "keep the input's dim", whose output shape is known while parsing.
"""

from __future__ import annotations

import numpy as np

from ...ir.module import Instruction
from ...ir.shape import Shape
from ...ir.symbolic_values import reshape_dims, value_of

# An element: its value, or (tensor, axis) for "this tensor's dim on that axis".
Element = int | tuple[Instruction, int]

MAX_ELEMENTS = 16  # shape vectors are short; anything longer is data, not worth tracing
_SAME_VALUES = frozenset({"squeeze", "unsqueeze", "reshape", "identity"})  # element order kept


def shape_elements(ctx, ins: Instruction) -> list[Element] | None:
    """The elements of the int scalar or vector `ins`, or None where some cannot be traced."""
    s = ins.shape
    if not isinstance(s, Shape) or s.is_dynamic or s.ndim > 1 or s.elements > MAX_ELEMENTS or not s.dtype.is_int:
        return None
    value = ctx.const(ins)
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    op, name = ins.op, ins.op.name
    if name == "shape_of":
        x = ins.inputs[0]
        dims = x.shape.dims
        return [dims[i].min if dims[i].is_fixed else (x, i) for i in range(op.start, op.end)]
    if name in _SAME_VALUES or (name == "convert" and op.to.is_int):
        return shape_elements(ctx, ins.inputs[0])
    if name == "concat":
        parts = [shape_elements(ctx, i) for i in ins.inputs]
        return None if any(p is None for p in parts) else [e for p in parts for e in p]
    if name == "gather" and op.axis == 0:
        elems, idx = shape_elements(ctx, ins.inputs[0]), ctx.const(ins.inputs[1])
        if elems is None or idx is None or any(not -len(elems) <= int(i) < len(elems) for i in idx.reshape(-1)):
            return None
        return [elems[int(i)] for i in np.asarray(idx).reshape(-1)]
    if name == "slice" and op.axes == (0,):
        elems = shape_elements(ctx, ins.inputs[0])
        end = None if op.ends[0] < 0 else op.ends[0]
        return None if elems is None else elems[op.starts[0]:end:op.steps[0]]
    return None


def reshape_dims_of(ctx, x: Instruction, target: Instruction) -> list[int] | None:
    """`target` as constant ONNX reshape dims for `x`, or None. An element that is x's own dim at its
    position becomes 0 (keep it); one other element known only at run time becomes -1 (infer it),
    which gives the same value whenever the reshape is valid."""
    elems = shape_elements(ctx, target)
    if elems is None:
        return _by_symbols(x, target)
    dims = [0 if e == (x, k) else e for k, e in enumerate(elems)]
    unknown = [k for k, d in enumerate(dims) if isinstance(d, tuple)]
    if not unknown:
        return dims
    if len(unknown) > 1 or -1 in dims:
        return _by_symbols(x, target)
    dims[unknown[0]] = -1
    return dims


def _by_symbols(x: Instruction, target: Instruction) -> list[int] | None:
    """The same, where the elements are dims of other tensors that one name ties to x's
    (ir/symbolic_values.py): Reshape(h, Shape(input_ids)[0], Shape(input_ids)[1], 768)."""
    value = value_of(target)
    dims = None if value is None else reshape_dims(x.shape, value)
    return None if dims is None else list(dims)
