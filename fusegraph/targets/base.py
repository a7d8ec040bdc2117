"""What every target provides, and the options that travel with a compile."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentError, CompileError
from ..ir.program import Program
from ..ir.shape import AnyShape
from ..runtime.validate import check_inputs


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Options of one compile; recorded with the compiled program. No global configuration."""

    optimize: bool = True          # run the target's pass pipeline
    threads: int | None = None     # cpu: worker threads (None: all cores)
    fp16: bool = False
    keep_fp32: tuple[str, ...] = ()  # with fp16: ops computed in float32 besides reductions, softmax, layer norms
    exhaustive_tune: bool = False
    device_resident: bool = False  # gpu: keep inputs/outputs on the device
    disabled_passes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # a value of the wrong type would surface deep in a target (a ctypes call, a pass lookup) as a bug
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(f.default, tuple) and isinstance(value, list):
                object.__setattr__(self, f.name, value := tuple(value))
            if not _OPTION_CHECKS[type(f.default)](value):
                raise ArgumentError(f"compile option {f.name}={value!r}: expected {_OPTION_KINDS[type(f.default)]}")


# per type of a field's default: what its values may be
_OPTION_CHECKS: dict[type, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    tuple: lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
    type(None): lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
}
_OPTION_KINDS = {bool: "True or False", tuple: "a tuple of names", type(None): "None or a positive int"}


class Executable:
    """A compiled program: validates inputs, runs, returns outputs as numpy arrays."""

    def __init__(self, program: Program, options: CompileOptions):
        self.program = program
        self.options = options
        self.input_specs: dict[str, AnyShape] = program.get_parameter_shapes()
        self.output_shapes = program.get_output_shapes()

    # Checks that must pass before the first run (a loaded file's weight checksums: see runtime/serialize.py).
    _pending_checks: tuple[Callable[[], None], ...] = ()

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        self._run_pending_checks()
        return self.execute(check_inputs(self.input_specs, inputs))

    def defer_check(self, check: Callable[[], None]) -> None:
        """Make `check` (which raises on failure) run once, before the first `run`; until it passes,
        every `run` raises its error."""
        if not self._pending_checks:
            self._checks_lock = threading.Lock()
        self._pending_checks = (*self._pending_checks, check)

    def _run_pending_checks(self) -> None:
        """Run the deferred checks still pending (none once they have passed: then a no-op)."""
        if not self._pending_checks:
            return
        with self._checks_lock:  # many threads may make the first run at once: check once
            while self._pending_checks:
                self._pending_checks[0]()
                self._pending_checks = self._pending_checks[1:]

    def execute(self, inputs: dict[str, Any]) -> list[np.ndarray]:
        raise NotImplementedError


class Target:
    name: str = ""

    def passes(self, options: CompileOptions) -> list[Callable]:
        """The target's pass pipeline."""
        return []

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        raise NotImplementedError

    def export_artifacts(self, executable: Executable) -> dict[str, bytes | memoryview]:
        """What this target built beyond the IR that a compiled file should keep (generated kernel
        sources, autotuning choices, pre-packed weights), by name. Stored with the program by
        `fusegraph.save`. They are verified at load, so keep them small, except those named weights/...:
        bulk data, verified like the weights (before the first run, unless the load is eager)."""
        return {}

    def load(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview]) -> Executable:
        """Rebuild the executable of an already-optimized `program` from its saved `artifacts`, running
        no passes. Raise TargetError when this machine cannot run the target (e.g. no GPU)."""
        return self.lower(program, options)

    def compile(self, program: Program, options: CompileOptions | None = None, manager: Any = None) -> Executable:
        """Run the target's pipeline on `program` in place, then lower it. `manager` (a PassManager)
        may be given to collect per-pass records."""
        options = options or CompileOptions()
        if options.keep_fp32 and not options.fp16:
            raise CompileError("keep_fp32 names ops to keep in float32 when computing in float16: it needs fp16=True")
        if options.optimize:
            from ..passes.manager import run_pipeline

            passes = self.passes(options)
            if options.fp16:  # a generic pass: every target computes in float16 when asked
                from ..quantize.fp16 import QuantizePass, fp16_pass

                if not any(isinstance(p, QuantizePass) for p in passes):
                    passes = [fp16_pass(options.keep_fp32), *passes]

            run_pipeline(program, passes, options, manager)
        return self.lower(program, options)

    def __repr__(self) -> str:
        return f"<target {self.name}>"
