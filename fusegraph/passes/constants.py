"""Reading constants through broadcasts: the frontend broadcasts small constants with explicit
`broadcast` instructions, so rewrites look through them to the small literal behind."""

from __future__ import annotations

import numpy as np

from ..ir.module import Instruction, Module
from ..ir.op import make_op
from ..ir.shape import Shape


def small_constant(ins: Instruction) -> np.ndarray | None:
    """The value of `ins` as an array of the same rank that broadcasts to its lens (kept small:
    broadcast axes have length 1), or None when `ins` is not a constant."""
    if not isinstance(ins.shape, Shape) or ins.shape.is_dynamic:
        return None
    if ins.is_literal:
        return ins.literal
    if ins.op.name == "broadcast" and ins.inputs[0].is_literal:
        v = ins.inputs[0].literal
        return v.reshape((1,) * (ins.shape.ndim - v.ndim) + v.shape)
    return None


def expanded(value: np.ndarray, lens: tuple[int, ...]) -> np.ndarray:
    """`value` broadcast to `lens` as a new array (np.broadcast_to's strided views reject ml_dtypes'
    types: float8, int4)."""
    out = np.empty(lens, dtype=value.dtype)
    out[...] = value
    return out


def is_splat(ins: Instruction, value: float) -> bool:
    v = small_constant(ins)
    return v is not None and v.size > 0 and bool(np.all(v == value))


def materialize(module: Module, before: Instruction, value: np.ndarray, shape: Shape) -> Instruction:
    """A constant of `shape` holding `value` (which broadcasts to it), as literal + broadcast."""
    value = np.asarray(value, dtype=shape.dtype.np)
    # drop leading 1-axes so the literal stays as small as the value really is
    while value.ndim > 0 and value.shape[0] == 1 and value.ndim > 1:
        value = value[0]
    lit = module.add_literal(np.array(value, order="C"))  # ascontiguousarray would make 0-d 1-d
    if value.shape == shape.lens:
        return lit
    return module.insert(before, make_op("broadcast", out_lens=shape.lens), lit)
