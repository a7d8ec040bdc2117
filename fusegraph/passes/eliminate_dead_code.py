"""Removes instructions whose results nobody uses (parameters and the return always stay)."""

from __future__ import annotations

from ..ir.module import Module
from ..ir.op import OpKind


def eliminate_dead_code(module: Module) -> bool:
    changed = False
    for ins in reversed(module.instructions[:]):
        if not ins.users and ins.op.kind is not OpKind.BUILTIN:
            module.remove(ins)
            changed = True
        elif not ins.users and ins.is_literal:
            module.remove(ins)
            changed = True
    return changed
