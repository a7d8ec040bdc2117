"""Replaces an `if` whose condition is a constant by the body of the branch it takes.

After it, no `if` whose results are all read through get_tuple_elem has a constant condition: the
taken branch's instructions are moved, in order, into the enclosing module just before the `if`
(the modules of its own control-flow instructions now hang from the enclosing module), each result
of the `if` (a get_tuple_elem reader) is replaced by the value the branch returns (one of its own,
an outer value it returns unchanged, or a literal), and the `if` and both branches are gone. The
moved instructions keep their identity (provenance, users), and the outer values they read are
visible from the enclosing module as they were from the branch. The branch not taken is discarded
with its uses of outer values; an inlined `if` inside the taken branch is handled in turn. A taken
branch that is a trap (a branch whose shapes cannot work) stays a trap: it raises when it runs.

The condition becomes constant when it is computed from literals only: a model exported with a
fixed flag, or a program specialized on the value of a small integer input (targets/specialize.py).
"""

from __future__ import annotations

import numpy as np

from ..ir.builtin import GetTupleElem
from ..ir.module import Instruction, Module
from .constants import small_constant


def _taken(ins: Instruction) -> Module | None:
    """The branch `ins` (an `if`) takes, when its condition is a constant and every reader of its
    results is a get_tuple_elem; else None."""
    if ins.op.name != "if" or len(ins.module_args) != 2 or ins.module_args[0] is ins.module_args[1]:
        return None
    cond = small_constant(ins.inputs[0])
    if cond is None or cond.size == 0 or not all(isinstance(u.op, GetTupleElem) for u in ins.users):
        return None
    branch = ins.module_args[0 if bool(np.asarray(cond).reshape(-1)[0]) else 1]
    if branch.parameters or branch.return_ins is None:  # not the form of an If branch
        return None
    return branch


def _inline(module: Module, ins: Instruction, branch: Module) -> None:
    program = module.program
    ret = branch.return_ins
    assert ret is not None
    results = list(ret.inputs)
    branch.remove(ret)
    at = module.index(ins)
    for moved in list(branch.instructions):
        module.adopt(moved, at)
        at += 1
        for sub in moved.module_args:
            sub.parent = module
    for reader in list(ins.users):
        home = reader.module
        assert home is not None
        home.replace(reader, results[reader.op.index])
        home.remove(reader)
    module.remove(ins)
    for sub in ins.module_args:
        if program is not None:
            program.discard_module(sub)  # the taken one is empty by now: only its name goes


def inline_constant_if(module: Module) -> bool:
    program = module.program
    if program is not None and program.modules.get(module.name) is not module:
        return False  # a branch discarded earlier in this run of the pass
    changed = False
    while True:  # a branch may hold an `if` of a constant condition too: scan again after each
        found = next(((i, b) for i in module.instructions if (b := _taken(i)) is not None), None)
        if found is None:
            return changed
        _inline(module, *found)
        changed = True
