"""Removes instructions that return their input unchanged: identity, same-dtype convert, reshape or
broadcast to the input's own lens, identity transpose, contiguous of a standard tensor, and a sum,
mean, product, maximum or minimum over axes of length 1 (each output is its one input: silero-vad's
mean over a [1, 1] tensor, 17 us a run in numpy)."""

from __future__ import annotations

from ..ir.module import Instruction, Module
from ..ir.shape import Shape
from .manager import rewrite_each

# reductions whose value over one element is that element (an L2 norm's would be its magnitude)
_ONE_ELEMENT_IDENTITY = frozenset({"reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min"})


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
    if name in _ONE_ELEMENT_IDENTITY:  # reductions keep their axes: same dims, every reduced one 1
        return same
    if name == "transpose":
        return tuple(op.perm) == tuple(range(len(op.perm)))
    return False


def _drop(module: Module, ins: Instruction) -> bool:
    if not _is_noop(ins):
        return False
    module.replace(ins, ins.inputs[0])
    return True


def eliminate_identity(module: Module) -> bool:
    return rewrite_each(module, _drop)
