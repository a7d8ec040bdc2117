"""The reference target: numpy interpretation of the IR, the executable specification."""

from __future__ import annotations

from ...ir.program import Program
from ..base import CompileOptions, Executable, Target
from .interpreter import run_module


class RefExecutable(Executable):
    def execute(self, inputs):
        return run_module(self.program.main, inputs)

    def execute_observed(self, inputs, observer):
        return run_module(self.program.main, inputs, observer=observer)


class RefTarget(Target):
    name = "ref"

    def passes(self, options: CompileOptions):
        from ...passes.eliminate_dead_code import eliminate_dead_code

        return [eliminate_dead_code]

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        return RefExecutable(program, options)


TARGET = RefTarget()
