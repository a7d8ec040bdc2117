"""Collapses chains of views: reshape of reshape -> one reshape, transpose of transpose -> one
transpose (or none), squeeze/unsqueeze/flatten -> reshape."""

from __future__ import annotations

from ..ir.module import Module
from ..ir.op import make_op
from ..ir.shape import Shape

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
        elif name == "transpose" and ins.inputs[0].op.name == "transpose":
            inner = ins.inputs[0]
            perm = tuple(inner.op.perm[p] for p in ins.op.perm)
            src = inner.inputs[0]
            new = src if perm == tuple(range(len(perm))) else module.insert(ins, make_op("transpose", perm=perm), src)
            module.replace(ins, new)
            changed = True
    return changed
