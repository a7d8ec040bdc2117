"""Reorders the main module's instructions to lower peak memory, when it does.

A greedy list schedule: among the instructions whose inputs are ready, run next the one that adds the
fewest live bytes (its output minus the buffers it is the last reader of), ties broken by the
original order. The new order is kept only if its max-live bytes are lower than the current
order's. Invariant: the module stays topologically sorted (submodule reads count as inputs);
parameters and literals stay first and the return last.
"""

from __future__ import annotations

from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.shape import Shape
from .memory_coloring import is_view, max_live, plan_buffers, reads


def _bytes(ins: Instruction) -> int:
    s = ins.shape
    return s.bytes if isinstance(s, Shape) and not s.is_dynamic and not is_view(ins) else 0


def _greedy_order(body: list[Instruction], prologue: set[int]) -> list[Instruction]:
    deps = {i.uid: {u for u in reads(i) if u not in prologue} for i in body}
    users: dict[int, list[Instruction]] = {}
    for i in body:
        for u in deps[i.uid]:
            users.setdefault(u, []).append(i)
    remaining = {uid: len(users.get(uid, ())) for uid in deps}
    waiting = {i.uid: len(deps[i.uid]) for i in body}
    index = {i.uid: k for k, i in enumerate(body)}
    ready = [i for i in body if waiting[i.uid] == 0]
    order = []
    while ready:
        def cost(i: Instruction) -> tuple[int, int]:
            freed = sum(_bytes(x) for x in i.inputs if x.uid in remaining and remaining[x.uid] == 1)
            return _bytes(i) - freed, index[i.uid]

        best = min(ready, key=cost)
        ready.remove(best)
        order.append(best)
        for u in deps[best.uid]:
            remaining[u] -= 1
        for nxt in users.get(best.uid, ()):
            waiting[nxt.uid] -= 1
            if waiting[nxt.uid] == 0:
                ready.append(nxt)
    return order


def schedule_for_memory(module: Module) -> bool:
    if module.parent is not None:
        return False
    ins = module.instructions
    prologue = [i for i in ins if i.op.kind is OpKind.BUILTIN and i.op.name != "@return"]
    ret = [i for i in ins if i.op.name == "@return"]
    body = [i for i in ins if i.op.kind is not OpKind.BUILTIN]
    if len(prologue) + len(body) + len(ret) != len(ins) or len(body) < 3:
        return False
    before = max_live(plan_buffers(module))
    order = _greedy_order(body, {i.uid for i in prologue})
    if len(order) != len(body) or order == body:
        return False
    module.instructions = prologue + order + ret
    if max_live(plan_buffers(module)) < before:
        return True
    module.instructions = ins  # no better: keep the original order
    return False
