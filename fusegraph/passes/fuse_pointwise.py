"""Fuses connected pointwise instructions into one `fused_pointwise` whose scalar body is the
composition of theirs.

Invariant afterwards: no pointwise instruction has a pointwise producer whose every user is that
instruction's fused group (such producers were absorbed). A group has one root (its only result).
"""

from __future__ import annotations

from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.shape import Shape
from ..ops.pointwise import FusedPointwise
from ..ops.scalar import Call, Expr, Var

MAX_BODY_NODES = 256  # keeps bodies (and generated kernels) small when a DAG would unroll into a big tree


def _fusible(ins: Instruction) -> bool:
    return (ins.op.kind is OpKind.POINTWISE and not ins.module_args and isinstance(ins.shape, Shape)
            and not ins.shape.is_dynamic)


def _size(e: Expr) -> int:
    return 1 + sum(_size(a) for a in e.args) if isinstance(e, Call) else 1


def _substitute(e: Expr, mapping: dict[int, Expr]) -> Expr:
    if isinstance(e, Var):
        return mapping[e.index]
    if isinstance(e, Call):
        return Call(e.fn, tuple(_substitute(a, mapping) for a in e.args))
    return e


def _group(root: Instruction, done: set[int]) -> set[int]:
    """Grow the group upwards from `root` through producers used only inside the group."""
    group = {root.uid}
    frontier = [root]
    while frontier:
        ins = frontier.pop()
        for x in ins.inputs:
            if (x.uid in group or x.uid in done or not _fusible(x) or x.module is not root.module
                    or x.shape.lens != root.shape.lens):
                continue
            if all(u.uid in group for u in x.users):
                group.add(x.uid)
                frontier.append(x)
    return group


def _body(root: Instruction, group: set[int]) -> tuple[Expr, list[Instruction]]:
    externals: list[Instruction] = []
    index: dict[int, int] = {}

    def build(ins: Instruction) -> Expr:
        if ins.uid not in group:
            if ins.uid not in index:
                index[ins.uid] = len(externals)
                externals.append(ins)
            return Var(index[ins.uid])
        return _substitute(ins.op.expr, {k: build(x) for k, x in enumerate(ins.inputs)})

    return build(root), externals


def fuse_pointwise(module: Module) -> bool:
    changed = False
    done: set[int] = set()
    for root in reversed(module.instructions[:]):
        if root.uid in done or not _fusible(root) or not root.users:
            continue
        group = _group(root, done)
        done |= group
        if len(group) < 2:
            continue
        body, externals = _body(root, group)
        if _size(body) > MAX_BODY_NODES:
            continue
        op = FusedPointwise(body_text=str(body), n_inputs=len(externals), out_type=root.shape.dtype)
        fused = module.insert(root, op, *externals)
        module.replace(root, fused)
        changed = True
    return changed
