"""The cpu target: the generic passes, then its own (epilogues fused into convolutions and products,
parallel products merged, channels-last layouts, a memory plan where epilogues write over their
residuals), lowered to oneDNN, generated and numpy kernels over one planned arena per thread."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ...ir.program import Program
from ...passes import eliminate_dead_code, generic_pipeline, memory_coloring
from ..base import CompileOptions, Executable, Target
from . import kernels  # noqa: F401  (fills the lowering table)
from .artifacts import building, export, providing
from .executable import CpuExecutable
from .lowering import LowerContext, lower_module
from .openmp import on_passing_thread
from .passes import (
    choose_layout,
    choose_winograd,
    fuse_conv_epilogue,
    fuse_dot_epilogue,
    fuse_dynamic_int8,
    fuse_int8,
    gather_elements_as_gather,
    merge_parallel_dots,
    move_reduced_axes_last,
    plan_memory,
    split_sliced_conv,
    tabulate_int8,
    widen_half,
)
from .precision import warn_half_precision
from .shared import SharedConstants, active


class CpuTarget(Target):
    name = "cpu"
    specializes = True  # dynamic input dims: one static compile per input shape (targets/specialize.py)

    def passes(self, options: CompileOptions) -> list:
        generic = generic_pipeline()
        assert generic[-1] is memory_coloring
        # epilogues fuse in N, C, H, W, then layouts change; the plan must come last: both change
        # which buffers exist (and it is the cpu's: epilogues write over their dying residuals)
        # int8 regions first: the generic passes fold dequantize(int8 weights) into float weights (and
        # fuse a dynamic product's float epilogue away from it)
        # half precision computes in float32 (the cpu has float32 kernels), before anything fuses
        return [widen_half, fuse_int8, fuse_dynamic_int8] + generic[:-1] + [gather_elements_as_gather, move_reduced_axes_last, fuse_conv_epilogue, fuse_dot_epilogue, merge_parallel_dots, split_sliced_conv,
                               choose_layout, choose_winograd, tabulate_int8, eliminate_dead_code, plan_memory]

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        """Lowered on a thread that ends with it: the caller's thread keeps no OpenMP team, which
        would throttle the teams of the threads that run the program (openmp.on_passing_thread)."""
        return on_passing_thread(self._lower, program, options)

    def _lower(self, program: Program, options: CompileOptions) -> Executable:
        main = program.main
        if main.memory_plan is None:
            plan_memory(main)
        threads = options.threads or len(os.sched_getaffinity(0))
        warn_half_precision(main, options.fp16)
        shared = active()
        if shared is not None:  # a specialization of a dynamic program: one copy of each constant
            shared.intern(program)
        with building(program) as built:  # what a compiled file keeps: packed weights, generated kernels
            ctx = LowerContext(options, threads)
            steps = lower_module(main, ctx)
            ctx.finish()
        built.library = ctx.library
        plan = main.memory_plan
        exe = CpuExecutable(program, options, steps, plan.arena_bytes if plan else 0)
        exe.built = built
        exe.threads = threads
        return exe

    def specialization_scope(self, program: Program):
        # the static compiles of one dynamic program share its constants and packed weights
        return SharedConstants(program).scope

    def export_artifacts(self, executable: Executable) -> dict[str, bytes | memoryview]:
        return export(getattr(executable, "built", None))

    def load(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview], *,
             trusted: bool = False) -> Executable:
        # the same lowering, with weights packed (and kernels generated) when the file was saved; both
        # are checked against the IR whether or not the file is signed (artifacts.py: it costs little)
        with providing(program, artifacts):
            return self.lower(program, options)


TARGET = CpuTarget()
