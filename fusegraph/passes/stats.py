"""Program statistics for the analyze report: instructions, fused kernels, FLOPs, bytes."""

from __future__ import annotations

import dataclasses

from ..ir.op import OpKind
from ..ir.program import Program
from .flops import instruction_flops
from .memory_coloring import is_view, max_live, plan_buffers


@dataclasses.dataclass
class ProgramStats:
    instructions: int       # instructions that do work (no params, literals, return)
    kernels: int            # of those, the ones that are not views (what a target launches)
    fused_kernels: int      # fused_* instructions
    flops: int
    constant_bytes: int     # bytes of literals
    activation_bytes: int   # sum of every intermediate buffer (no reuse)
    max_live_bytes: int     # lower bound for any arena under this schedule
    arena_bytes: int | None  # planned arena, once memory_coloring ran

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def program_stats(program: Program) -> ProgramStats:
    work = kernels = fused = flops = const = 0
    for mod in program.modules_in_order():
        for ins in mod.instructions:
            if ins.is_literal:
                const += ins.literal.nbytes
            if ins.op.kind is OpKind.BUILTIN:
                continue
            work += 1
            kernels += not is_view(ins)
            fused += ins.op.name.startswith("fused_")
            flops += instruction_flops(ins)
    buffers = plan_buffers(program.main)
    plan = program.main.memory_plan
    return ProgramStats(work, kernels, fused, flops, const, sum(b.size for b in buffers), max_live(buffers),
                        plan.arena_bytes if plan is not None else None)
