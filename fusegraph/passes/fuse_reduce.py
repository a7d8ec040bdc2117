"""Fuses each reduction with its pointwise prologue and epilogue into one `fused_reduce`.

A region is keyed by the reduced input's lens and the reduced axes. Its members are reductions
(reduce_* and softmax/log_softmax) over exactly those axes of those lens, pointwise ops on the full
or the reduced lens, and broadcasts into them. A region grows from a reduction through producers
used only inside it (prologue) and through consumers whose other inputs come from before it
(epilogue), and is kept only if exactly one of its values, a tensor, is used outside. Layer norm (two means and
their arithmetic, plus the residual add before it) and softmax with its scaling and mask become one
kernel each; the body is a submodule, so the fused program still runs on the reference target.
"""

from __future__ import annotations

from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.shape import Shape
from ..ops.fused import FusedReduce

REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "moments"})
NORMALIZATIONS = frozenset({"softmax", "log_softmax"})


def _axes(ins: Instruction) -> tuple[int, ...] | None:
    if ins.op.name in REDUCTIONS:
        return tuple(sorted(ins.op.axes))
    if ins.op.name in NORMALIZATIONS:
        return (ins.op.axis % ins.shape.ndim,)
    return None


def _dynamic_input(ins: Instruction) -> bool:
    x = ins.inputs[0].shape
    return not isinstance(x, Shape) or x.is_dynamic


class _Region:
    def __init__(self, seed: Instruction, pos: dict[int, int], taken: set[int]):
        self.full = seed.inputs[0].shape.lens
        self.axes = _axes(seed)
        self.reduced = tuple(1 if k in self.axes else n for k, n in enumerate(self.full))
        self.pos = pos
        self.taken = taken  # members of earlier regions
        self.module = seed.module
        self.members: dict[int, Instruction] = {seed.uid: seed}

    def accepts(self, ins: Instruction) -> bool:
        s = ins.shape
        if ins.module_args or ins.module is not self.module or ins.uid in self.taken or s.is_dynamic:
            return False
        if ins.op.name == "get_tuple_elem":  # mean or variance out of moments
            return ins.inputs[0].uid in self.members
        if _axes(ins) is not None:
            return not _dynamic_input(ins) and ins.inputs[0].shape.lens == self.full and _axes(ins) == self.axes
        if not isinstance(s, Shape):
            return False
        if ins.op.kind is OpKind.POINTWISE:
            return s.lens in (self.full, self.reduced)
        return ins.op.name == "broadcast" and s.lens in (self.full, self.reduced)

    def grow(self) -> None:
        changed = True
        while changed:
            changed = False
            for m in list(self.members.values()):
                for x in m.inputs:  # prologue: producers used only inside the region
                    if (x.uid not in self.members and self.accepts(x)
                            and all(u.uid in self.members for u in x.users)):
                        self.members[x.uid] = x
                        changed = True
                for u in m.users:   # epilogue: consumers whose other inputs do not depend on us
                    if u.uid in self.members or not self.accepts(u):
                        continue
                    if not any(i.uid not in self.members and self.depends_on_members(i) for i in u.inputs):
                        self.members[u.uid] = u
                        changed = True

    def depends_on_members(self, ins: Instruction) -> bool:
        """Whether `ins` (not a member) is computed from a member: fusing it in would make a cycle."""
        first = min(self.pos[k] for k in self.members)
        stack, seen = [ins], set()
        while stack:
            x = stack.pop()
            for i in x.inputs:
                if i.uid in self.members:
                    return True
                if i.uid not in seen and self.pos.get(i.uid, -1) > first:
                    seen.add(i.uid)
                    stack.append(i)
        return False

    def outputs(self, module: Module) -> list[Instruction]:
        returned = {o.uid for o in module.outputs}
        return [m for m in self.members.values()
                if m.uid in returned or any(u.uid not in self.members for u in m.users)]

    def drop_epilogue(self, seed: Instruction) -> None:
        """Fall back to the seed and its prologue only."""
        keep = {seed.uid}
        stack = [seed]
        while stack:
            for x in stack.pop().inputs:
                if x.uid in self.members and x.uid not in keep:
                    keep.add(x.uid)
                    stack.append(x)
        self.members = {k: v for k, v in self.members.items() if k in keep}


def _build(module: Module, region: _Region, root: Instruction, index: int) -> Instruction:
    members = sorted(region.members.values(), key=lambda m: region.pos[m.uid])
    externals: list[Instruction] = []
    for m in members:
        for x in m.inputs:
            if x.uid not in region.members and all(x is not e for e in externals):
                externals.append(x)
    body = module.program.create_module(f"fused_reduce{index}", module)
    mapped = {e.uid: body.add_parameter(f"x{k}", e.shape) for k, e in enumerate(externals)}
    for m in members:
        mapped[m.uid] = body.add(m.op, *[mapped[x.uid] for x in m.inputs])
    body.add_return(mapped[root.uid])
    return module.insert(root, FusedReduce(axes=region.axes), *externals, module_args=[body])


def fuse_reduce(module: Module) -> bool:
    if module.program is None:
        return False
    done: set[int] = set()
    changed = False
    pos = {ins.uid: k for k, ins in enumerate(module.instructions)}
    for seed in module:
        if seed.uid in done or _axes(seed) is None or seed.shape.is_dynamic or _dynamic_input(seed):
            continue  # (a reduction of a dynamic tensor may give a static one: a max over boxes)
        region = _Region(seed, pos, done)
        region.grow()
        outs = region.outputs(module)
        if len(outs) != 1:
            region.drop_epilogue(seed)
            outs = region.outputs(module)
        # a fused_reduce is one tensor: moments fused with its prologue alone, its mean and variance
        # read outside, would give the op a tuple (no kernel writes one; the gpu plan cannot place it)
        if len(region.members) < 2 or len(outs) != 1 or not isinstance(outs[0].shape, Shape):
            continue
        done |= set(region.members)
        fused = _build(module, region, outs[0], len(module.program.modules))
        module.replace(outs[0], fused)
        changed = True
        pos = {ins.uid: k for k, ins in enumerate(module.instructions)}
    return changed
