"""Merges instructions that compute the same thing: the same op and attributes on the same inputs
(and small literals with equal contents). The earlier instruction survives."""

from __future__ import annotations

import hashlib

from ..ir.module import Instruction, Module
from ..ir.op import OpKind

SMALL_LITERAL_BYTES = 1 << 16  # hashing big weights costs more than merging them saves


def _key(ins: Instruction):
    if ins.is_literal:
        v = ins.literal
        if v.nbytes > SMALL_LITERAL_BYTES or v.dtype == object:
            return None
        return ("@literal", v.dtype.str, v.shape, hashlib.sha1(v.tobytes()).digest())
    op = ins.op
    if op.kind is OpKind.BUILTIN or not op.deterministic:
        return None
    try:
        hash(op)
    except TypeError:  # an op with unhashable attributes cannot be compared cheaply
        return None
    return (op, tuple(i.uid for i in ins.inputs), tuple(m.name for m in ins.module_args))


def eliminate_common_subexpression(module: Module) -> bool:
    seen: dict[object, Instruction] = {}
    changed = False
    for ins in module:
        key = _key(ins)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = ins
        elif ins.users:
            module.replace(ins, first)
            changed = True
    return changed
