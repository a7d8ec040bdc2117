"""Removes instructions that return their input unchanged: identity, same-dtype convert, reshape or
broadcast to the input's own lens, identity transpose, contiguous of a standard tensor."""

from __future__ import annotations

from ..ir.module import Instruction, Module
from ..ir.shape import Shape


def _is_noop(ins: Instruction) -> bool:
    if len(ins.inputs) != 1 or ins.module_args:
        return False
    x = ins.inputs[0]
    if not isinstance(x.shape, Shape) or not isinstance(ins.shape, Shape):
        return False
    name, op = ins.op.name, ins.op
    if name == "identity":
        return True
    same = x.shape.dims == ins.shape.dims and x.shape.dtype == ins.shape.dtype
    if name == "convert":
        return same
    if name in ("reshape", "broadcast", "contiguous"):
        return same and x.shape.standard
    if name == "transpose":
        return tuple(op.perm) == tuple(range(len(op.perm)))
    return False


def eliminate_identity(module: Module) -> bool:
    changed = False
    for ins in module:
        if _is_noop(ins) and ins.users:
            module.replace(ins, ins.inputs[0])
            changed = True
    return changed
