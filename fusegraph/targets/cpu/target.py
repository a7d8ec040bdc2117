"""The cpu target: generic passes + conv epilogue fusion, lowered to oneDNN and numpy kernels over
one planned arena."""

from __future__ import annotations

import os

from ...ir.builtin import Literal, Param, Return
from ...ir.program import Program
from ...passes import eliminate_dead_code, generic_pipeline, memory_coloring
from ..base import CompileOptions, Executable, Target
from . import kernels  # noqa: F401  (fills the lowering table)
from .executable import CpuExecutable, Step, output_buffer
from .lowering import LowerContext, lower_instruction
from .passes import choose_layout, fuse_conv_epilogue, fuse_dot_epilogue


class CpuTarget(Target):
    name = "cpu"

    def passes(self, options: CompileOptions) -> list:
        generic = generic_pipeline()
        assert generic[-1] is memory_coloring
        # epilogues fuse in N, C, H, W, then layouts change; the plan must come last: both change
        # which buffers exist
        return generic[:-1] + [fuse_conv_epilogue, fuse_dot_epilogue, choose_layout, eliminate_dead_code,
                               memory_coloring]

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        main = program.main
        if main.memory_plan is None:
            memory_coloring(main)
        threads = options.threads or len(os.sched_getaffinity(0))
        ctx = LowerContext(options, threads)
        from ..ref.interpreter import last_uses

        frees = last_uses(main)
        keep = {i.uid for i in main.outputs}
        steps = []
        for pos, ins in enumerate(main.instructions):
            if isinstance(ins.op, (Param, Literal, Return)):
                continue
            fn = lower_instruction(ins, ctx)
            dead = tuple(u for u in frees.get(pos, ()) if u not in keep)
            steps.append(Step(fn, tuple(i.uid for i in ins.inputs), ins.uid, dead,
                              output_buffer(ins, main.memory_plan), getattr(fn, "needs_env", False), ins.op.name))
        if ctx.kernel_sources:
            from .codegen import build_library

            ctx.library = build_library(ctx.kernel_sources, threads=threads)
        for cb in ctx.deferred:
            cb()
        plan = main.memory_plan
        return CpuExecutable(program, options, steps, plan.arena_bytes if plan else 0)


TARGET = CpuTarget()
