"""What every target provides, and the options that travel with a compile."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from ..ir.program import Program
from ..ir.shape import AnyShape
from ..runtime.validate import check_inputs


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Options of one compile; recorded with the compiled program. No global configuration."""

    optimize: bool = True          # run the target's pass pipeline
    threads: int | None = None     # cpu: worker threads (None: all cores)
    fp16: bool = False
    exhaustive_tune: bool = False
    device_resident: bool = False  # gpu: keep inputs/outputs on the device
    disabled_passes: tuple[str, ...] = ()


class Executable:
    """A compiled program: validates inputs, runs, returns outputs as numpy arrays."""

    def __init__(self, program: Program, options: CompileOptions):
        self.program = program
        self.options = options
        self.input_specs: dict[str, AnyShape] = program.get_parameter_shapes()
        self.output_shapes = program.get_output_shapes()

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        return self.execute(check_inputs(self.input_specs, inputs))

    def execute(self, inputs: dict[str, Any]) -> list[np.ndarray]:
        raise NotImplementedError


class Target:
    name: str = ""

    def passes(self, options: CompileOptions) -> list[Callable]:
        """The target's pass pipeline."""
        return []

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        raise NotImplementedError

    def compile(self, program: Program, options: CompileOptions | None = None, manager: Any = None) -> Executable:
        """Run the target's pipeline on `program` in place, then lower it. `manager` (a PassManager)
        may be given to collect per-pass records."""
        options = options or CompileOptions()
        if options.optimize:
            from ..passes.manager import run_pipeline

            run_pipeline(program, self.passes(options), options, manager)
        return self.lower(program, options)

    def __repr__(self) -> str:
        return f"<target {self.name}>"
