"""Collapses chains of views: reshape of reshape -> one reshape, transpose of transpose -> one
transpose (or none), squeeze/unsqueeze/flatten -> reshape; and drops a reshape sandwich around a
pointwise op: reshape(f(reshape(x), c)) -> f(x, c') when the outer reshape gives back x's shape and
the other operands are constants (c' is c laid out in x's shape). Swin's shifted-window mask is added
so, between a view to [1, windows, heads, n, n] and one back: without the sandwich the add fuses with
the attention's other bias and the attention pattern takes the whole chain.
"""

from __future__ import annotations

import numpy as np

from ..ir.module import Instruction, Module
from ..ir.op import OpKind, make_op
from ..ir.shape import Shape
from .constants import expanded, materialize, small_constant

EXPAND_LIMIT_BYTES = 1 << 24  # a constant is laid out anew up to this size

RESHAPE_LIKE = frozenset({"reshape", "squeeze", "unsqueeze", "flatten"})


def simplify_reshapes(module: Module) -> bool:
    changed = False
    for ins in module:
        if not ins.users or not isinstance(ins.shape, Shape) or ins.shape.is_dynamic:
            continue
        name = ins.op.name
        if name in RESHAPE_LIKE and len(ins.inputs) == 1:
            src = ins.inputs[0]
            # reshape(reshape(x)) -> reshape(x); squeeze/unsqueeze/flatten become plain reshapes
            while src.op.name in RESHAPE_LIKE and len(src.inputs) == 1:
                src = src.inputs[0]
            if src is not ins.inputs[0] or name != "reshape":
                new = module.insert(ins, make_op("reshape", dims=ins.shape.lens), src)
                module.replace(ins, new)
                changed = True
            elif _unsandwich(module, ins):
                changed = True
        elif name == "transpose" and ins.inputs[0].op.name == "transpose":
            inner = ins.inputs[0]
            perm = tuple(inner.op.perm[p] for p in ins.op.perm)
            src = inner.inputs[0]
            new = src if perm == tuple(range(len(perm))) else module.insert(ins, make_op("transpose", perm=perm), src)
            module.replace(ins, new)
            changed = True
    return changed


def _unsandwich(module: Module, ins: Instruction) -> bool:
    """reshape(f(reshape(x), constants...)) -> f(x, constants laid out as x) for a pointwise f read
    only by the outer reshape, when that reshape gives back x's shape."""
    f = ins.inputs[0]
    if f.op.kind is not OpKind.POINTWISE or len(f.users) != 1 or not isinstance(f.shape, Shape):
        return False
    inner = [x for x in f.inputs if x.op.name == "reshape" and isinstance(x.inputs[0].shape, Shape)
             and x.inputs[0].shape.lens == ins.shape.lens]
    if not inner:
        return False
    args = []
    for x in f.inputs:
        if any(x is r for r in inner):
            args.append(x.inputs[0])
            continue
        v = small_constant(x)
        if v is None or x.shape.bytes > EXPAND_LIMIT_BYTES:
            return False
        args.append(_laid_out(module, ins, expanded(v, f.shape.lens).reshape(ins.shape.lens), x.shape.dtype))
    module.replace(ins, module.insert(ins, f.op, *args))
    return True


def _laid_out(module: Module, before: Instruction, value: np.ndarray, dtype) -> Instruction:
    """`value` as a constant, each axis along which it does not vary kept at length 1."""
    small = value
    for axis in range(small.ndim):
        first = small.take([0], axis=axis)
        if small.shape[axis] > 1 and bool(np.all(small == first)):
            small = first
    return materialize(module, before, small, Shape.of(dtype, value.shape))
