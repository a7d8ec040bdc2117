"""What the gpu target's pattern matchers (patterns*.py) share: the match record and facts about values."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir.module import Instruction
from ...ops.scalar import Call, Expr, converts_to

FLOATS = ("float16", "bfloat16", "float32")
VIEW_CHAIN = ("broadcast", "reshape", "squeeze", "unsqueeze", "flatten", "contiguous")


@dataclasses.dataclass
class Group:
    kind: str
    root: Instruction
    members: list[Instruction]
    inputs: list[Instruction]
    data: dict


def only_user(x: Instruction, user: Instruction) -> bool:
    return len(x.users) == 1 and x.users[0] is user and not is_output(x)


def is_output(x: Instruction) -> bool:
    return x.module is not None and any(o is x for o in x.module.outputs)


def constant_scalar(x: Instruction) -> float | None:
    """The value of `x` when it is a literal (seen through broadcasts and reshapes) whose elements are
    all equal; else None."""
    while x.op.name in VIEW_CHAIN:
        x = x.inputs[0]
    if not x.is_literal:
        return None
    v = np.asarray(x.literal)
    if v.size == 0 or v.dtype.kind != "f" or not np.all(v == v.reshape(-1)[0]):
        return None
    return float(v.reshape(-1)[0])


def strip_convert(expr: Expr) -> Expr:
    """`expr` without its outer conversions between float types (a half body's roundings)."""
    while isinstance(expr, Call) and (to := converts_to(expr.fn)) is not None and to.is_float:
        expr = expr.args[0]
    return expr
