"""What every target provides, and the options that travel with a compile."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, CompileError, TargetError
from ..ir.limits import check_nesting
from ..ir.program import Program
from ..ir.run_limits import DEFAULT_MAX_LOOP_ITERATIONS, start, stop
from ..ir.shape import AnyShape
from ..runtime.validate import check_inputs


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Options of one compile; recorded with the compiled program. No global configuration."""

    optimize: bool = True          # run the target's pass pipeline
    threads: int | None = None     # cpu: worker threads (None: all cores)
    fp16: bool = False
    keep_fp32: tuple[str, ...] = ()  # with fp16: ops computed in float32 besides reductions, softmax, layer norms
    # with fp16: the float32 inputs and outputs become float16 too, as ONNX Runtime's keep_io_types=False
    # (callers pass and receive float16 arrays; half the output memory and the host-device copies)
    fp16_io: bool = False
    exhaustive_tune: bool = False
    device_resident: bool = False  # gpu: keep inputs/outputs on the device
    disabled_passes: tuple[str, ...] = ()
    max_memory: int | None = None  # bytes a run may hold (weights, intermediates, outputs); None: the target's memory
    max_loop_iterations: int = DEFAULT_MAX_LOOP_ITERATIONS  # a Loop past this fails (ir/run_limits.py says why 10**6)
    # dynamic input dims on cpu/gpu: static executables compiled per input shape, this many kept
    # (least recently used dropped); 0: the target's own dynamic mode (targets/specialize.py)
    dynamic_cache_size: int = 8

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
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),  # ranges are checked where they apply
    tuple: lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
    type(None): lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
}
_OPTION_KINDS = {bool: "True or False", int: "an int", tuple: "a tuple of names",
                 type(None): "None or a positive int"}


class Executable:
    """A compiled program: validates inputs, runs, returns outputs as numpy arrays."""

    def __init__(self, program: Program, options: CompileOptions):
        self.program = program
        self.options = options
        self.input_specs: dict[str, AnyShape] = program.get_parameter_shapes()
        self.output_shapes = program.get_output_shapes()

    peak_memory: Any = None  # what one run holds by the IR (targets/resources.py MemoryUse), set by compile and load
    # (name, lane, start ns, end ns) of the target's own compile phases on time.perf_counter_ns()'s clock
    # (profile/phases.py): the gpu target's static mode records its plan, lowering, every kernel
    # compile (a lane per compile thread), every GEMM problem's timing and the graph capture
    compile_log: Sequence[tuple[str, str, int, int]] = ()

    # Checks that must pass before the first run (a loaded file's weight checksums: see runtime/serialize.py).
    _pending_checks: tuple[Callable[[], None], ...] = ()

    def run(self, inputs: Mapping[str, Any], *, deadline: float | None = None) -> list[np.ndarray]:
        """Run on `inputs`; with `deadline` (seconds), DeadlineExceeded once it has passed, checked
        between steps (and Loop iterations) on every target."""
        self._run_pending_checks()
        token = start(deadline, self.options.max_loop_iterations)  # (`running`, without its context manager's cost)
        try:
            return self.execute(check_inputs(self.input_specs, inputs))
        finally:
            stop(token)

    # -- concurrency (targets/asynchronous.py; the gpu target's: targets/gpu/streams.py) ------------
    def context(self) -> Executable:
        """An execution context: an executable sharing this one's weights and kernels, with run-time
        state (arena, stream, CUDA graph) of its own, so that contexts run at once from several
        threads. Host targets keep that state per thread already: their context is the executable."""
        return self

    def async_workers(self) -> int:
        """How many runs `run_async` lets run at once (the rest queue): one per core."""
        from .asynchronous import cores

        return cores()

    def holding_cores(self) -> Any:
        """A block in which a run_async worker holds the cores its run uses (the cpu target's budget)."""
        import contextlib

        return contextlib.nullcontext()

    def run_async(self, inputs: Mapping[str, Any], *, stream: Any = None, after: Any = (),
                  deadline: float | None = None) -> Any:
        """Start a run; a Future-like handle back (`.result()`, `.done()`). `after`: handles of runs
        that must finish first. `stream` is the gpu target's (a torch.cuda.Stream)."""
        from .asynchronous import submit

        return submit(self, inputs, stream, after, deadline)

    def check(self) -> None:
        """Raise the error an earlier run left that has not been raised yet: the gpu target's
        `run_device` does not wait for the device, so an index out of range there surfaces at the
        next call or here (targets/gpu/index_checks.py). Host targets' runs raise as they run."""

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

    # -- seeing inside: per-step times and values (fusegraph/profile) ---------------------------------
    def execute_observed(self, inputs: dict[str, Any], observer: Any) -> list[Any]:
        """`execute`, telling `observer` (a profile.Recorder) each kernel step's uid, start and end
        times and value. A separate loop from `execute`'s: profiling off costs the hot loop nothing."""
        raise TargetError(f"target {getattr(self.program, 'target_name', '?')!r} cannot report per-step times")

    def recorder(self, capture: bool = False) -> Any:
        """A Recorder over this program's instructions (a Capture, keeping every step's value, when
        `capture`)."""
        from ..passes.flops import instruction_flops
        from ..profile import Capture, Recorder

        instructions = {i.uid: i for m in self.program.modules.values() for i in m.instructions}
        cls = Capture if capture else Recorder
        return cls(getattr(self.program, "target_name", "") or "", instructions, instruction_flops,
                   self.step_members(), self.step_kinds())

    def step_members(self) -> dict[int, list[Any]]:
        """uid -> the instructions that uid's step computes with it, where one kernel step covers
        several instructions the IR keeps apart (none here; the gpu target's GEMM epilogues)."""
        return {}

    def step_kinds(self) -> dict[int, str]:
        """uid -> the kernel that uid's step runs, where it is not the instruction's own op (none here;
        the gpu target's patterns: attention, gemm_epilogue...)."""
        return {}

    def profile(self, inputs: Mapping[str, Any], runs: int = 10, warmup: int = 1) -> Any:
        """`warmup` plain runs, then `runs` runs with every kernel step timed: a profile.Profile."""
        checked = check_inputs(self.input_specs, inputs)
        self._run_pending_checks()
        for _ in range(warmup):
            self.execute(checked)
        rec = self.recorder()
        for _ in range(runs):
            rec.begin_run()
            self.execute_observed(checked, rec)
            rec.end_run()
        return rec.profile()

    def capture(self, inputs: Mapping[str, Any]) -> dict[int, Any]:
        """One run keeping every kernel step's value, by uid (verify --bisect compares them)."""
        checked = check_inputs(self.input_specs, inputs)
        self._run_pending_checks()
        rec = self.recorder(capture=True)
        rec.begin_run()
        self.execute_observed(checked, rec)
        return rec.values


class Target:
    name: str = ""
    specializes: bool = False  # compiles dynamic input dims per concrete shape (targets/specialize.py)
    specializes_values: bool = False  # and small integer inputs that decide an `if`, per value (likewise)

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

    def load(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview], *,
             trusted: bool = False) -> Executable:
        """Rebuild the executable of an already-optimized `program` from its saved `artifacts`, running
        no passes. Raise TargetError when this machine cannot run the target (e.g. no GPU). `trusted`:
        the file's signature was verified; otherwise an artifact is used only where it is checked
        against the IR, and none may make a kernel touch memory outside its buffers."""
        return self.lower(program, options)

    def rebuild(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview], *,
                trusted: bool = False) -> Executable:
        """`load`, or for a dynamic program this target specializes, an executable that compiles
        per input shape on first use (nothing is compiled now, so no artifact is used)."""
        if self._specializes(program, options):
            from .specialize import SpecializingExecutable

            return SpecializingExecutable(program, options, self)
        return self.load(program, options, artifacts, trusted=trusted)

    def specialization_scope(self, program: Program) -> Callable[[], Any]:
        """For a dynamic program this target specializes: a context manager factory; each static
        compile of it runs in one, where the target shares what the compiles have in common (the cpu
        target: constants and packed weights). By default they share nothing."""
        import contextlib

        return contextlib.nullcontext

    def _specializes(self, program: Program, options: CompileOptions) -> bool:
        from .specialize import has_dynamic_inputs, value_inputs

        return self.specializes and options.optimize and options.dynamic_cache_size > 0 and (
            has_dynamic_inputs(program) or bool(value_inputs(self, program)))

    def compile(self, program: Program, options: CompileOptions | None = None, manager: Any = None) -> Executable:
        """Run the target's pipeline on `program` in place, then lower it. `manager` (a PassManager)
        may be given to collect per-pass records."""
        options = options or CompileOptions()
        check_nesting(program.modules.values())  # deeper bodies would end a run in RecursionError
        if options.keep_fp32 and not options.fp16:
            raise CompileError("keep_fp32 names ops to keep in float32 when computing in float16: it needs fp16=True")
        if options.fp16_io and not options.fp16:
            raise CompileError("fp16_io makes the float32 inputs and outputs float16: it needs fp16=True")
        if options.fp16_io:  # before a dynamic program's specializing: its inputs are float16 too
            from ..quantize.fp16 import half_io

            half_io(program)
        if options.dynamic_cache_size < 0:
            raise CompileError(f"dynamic_cache_size must be >= 0, got {options.dynamic_cache_size}")
        if self._specializes(program, options):
            # the program stays as parsed: each input shape gets its own static compile on first use
            return self.rebuild(program, options, {})
        if options.optimize:
            self.optimize(program, options, manager)
        use = self.check_memory(program, options)
        exe = self.lower(program, options)
        exe.peak_memory = use
        return exe

    def optimize(self, program: Program, options: CompileOptions, manager: Any = None) -> None:
        """The target's pipeline on `program` in place, float16 first when asked: what `compile` runs
        before lowering (a tool may stop there: the gpu plan needs no device)."""
        from ..passes.manager import run_pipeline

        passes = self.passes(options)
        if options.fp16:  # a generic pass: every target computes in float16 when asked
            from ..quantize.fp16 import QuantizePass, fp16_pass

            if not any(isinstance(p, QuantizePass) for p in passes):
                passes = [fp16_pass(options.keep_fp32), *passes]
        run_pipeline(program, passes, options, manager)

    def memory_capacity(self) -> int:
        """The bytes a program may hold by default (`CompileOptions.max_memory` None): the machine's RAM."""
        from ..ir.limits import physical_memory

        return physical_memory()

    def check_memory(self, program: Program, options: CompileOptions) -> Any:
        """ResourceError, before anything is lowered, when one run of `program` would hold more than
        `options.max_memory` (targets/resources.py); else what it holds (a MemoryUse)."""
        from .resources import check_memory

        limit = options.max_memory if options.max_memory is not None else self.memory_capacity()
        return check_memory(program, limit, f"target {self.name!r}: the program")

    def __repr__(self) -> str:
        return f"<target {self.name}>"
