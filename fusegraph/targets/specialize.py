"""Dynamic input dims on a static-shape target, by specializing per concrete shape.

As torch.compile recompiles on a guard failure and TensorRT builds an engine per optimization profile,
a program with dynamic input dims compiles (on cpu and gpu) to a `SpecializingExecutable`: it keeps
the program as parsed, and on a run it reads the concrete input shapes (checked against the declared
ranges: a dim outside its range is an InputError naming the input, the dim and the range), and on the
first run at those shapes specializes the program to them (passes/specialize_shapes.py: every shape
re-derived from the inputs, run-time shape values folded) and compiles that static program with the
target's normal pipeline, so all its fusions, kernels, memory planning and, on gpu, one CUDA graph
per shape apply. The executables are kept in a bounded LRU cache (`CompileOptions.dynamic_cache_size`
entries); `specializations` records what each cost. Each compile runs in the target's
`specialization_scope(program)`, where the target shares what the compiles have in common (cpu: one
copy of each constant and packed weight, targets/cpu/shared.py). `dynamic_cache_size=0` leaves a dynamic program
to the target's own dynamic mode (the gpu target's runs any shape without recompiling).

Values too, on a target that asks for it (`Target.specializes_values`: gpu): a small integer input that
decides an `if` on its own (passes/specialize_values.py: silero-vad's sample rate) is part of the
key. The first `VALUES_PER_INPUT` distinct values of such an input each get a program specialized on
that value (the `if` replaced by its taken branch: one static program, one CUDA graph); the guard is
the key itself, read from the input on every run, so another value never runs a program made for
the first. Past that many values the input is left general: further values share one program that
reads the input and keeps the `if` (the target's control-flow path), so an input that varies freely
costs one compile, not one per value. A device tensor's value is read on the host (a small copy).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError, ShapeError, TargetError
from ..ir.program import Program
from ..ir.run_limits import running
from ..ir.shape import Shape
from ..runtime.validate import check_inputs
from .base import CompileOptions, Executable, Target

Lens = tuple[tuple[int, ...], ...]  # the lens of every input, in parameter order
Key = tuple[Lens, tuple[Any, ...]]   # and the value of every guarded input (None: not specialized)
VALUES_PER_INPUT = 4  # distinct values of one input that get their own program before it is left general


def has_dynamic_inputs(program: Program) -> bool:
    """Whether some input has a dynamic dim and every input is a tensor (sequences and optionals are
    left to the target: their shapes are not one key)."""
    specs = program.get_parameter_shapes().values()
    return all(isinstance(s, Shape) for s in specs) and any(s.is_dynamic for s in specs)


@dataclass(frozen=True)
class Specialization:
    """One specialization: the input lens, the seconds its specialize + compile took, and the
    values of the inputs it is specialized on (targets that specialize values)."""

    lens: dict[str, tuple[int, ...]]
    seconds: float
    values: dict[str, Any] = field(default_factory=dict)


class SpecializingExecutable(Executable):
    """A program with dynamic input dims, run by executables compiled per concrete input shape."""

    def __init__(self, program: Program, options: CompileOptions, target: Target):
        super().__init__(program, options)
        self.target = target
        self.capacity = max(1, options.dynamic_cache_size)
        self.specializations: list[Specialization] = []  # every compile, in order (evicted ones too)
        self._cache: OrderedDict[Key, Executable] = OrderedDict()
        self._lock = threading.Lock()
        self._scope = target.specialization_scope(program)  # what the specializations share
        self.guarded = value_inputs(target, program)  # inputs specialized by value, in parameter order
        self._seen: dict[str, set[Any]] = {name: set() for name in self.guarded}

    # -- the cache -------------------------------------------------------------------------------------
    @property
    def cached_shapes(self) -> list[dict[str, tuple[int, ...]]]:
        """The input lens of the cached executables, least recently used first."""
        return [self._named(k) for k in self._cache]

    def _named(self, key: Key) -> dict[str, tuple[int, ...]]:
        return dict(zip(self.input_specs, key[0]))

    def _values(self, key: Key) -> dict[str, Any]:
        return {n: v for n, v in zip(self.guarded, key[1]) if v is not None}

    def key(self, lens: Mapping[str, tuple[int, ...]], values: Mapping[str, Any] | None = None) -> Key:
        """The cache key of inputs of these lens and (for the guarded inputs) values: a value is in
        it while its input has shown at most VALUES_PER_INPUT distinct ones, else None (general)."""
        shape = tuple(tuple(int(n) for n in lens[name]) for name in self.input_specs)
        if not self.guarded:
            return shape, ()
        if values is None or set(self.guarded) - set(values):
            raise InputError(f"inputs {self.guarded} are specialized by value: their values are needed")
        out = []
        with self._lock:
            for name in self.guarded:
                v, seen = values[name], self._seen[name]
                if v not in seen and len(seen) < VALUES_PER_INPUT:
                    seen.add(v)
                out.append(v if v in seen else None)
        return shape, tuple(out)

    def executable_for(self, lens: Mapping[str, tuple[int, ...]], values: Mapping[str, Any] | None = None) -> Executable:
        """The static executable for inputs of these lens (which fit the input specs) and values of
        the guarded inputs (`guard_values`), compiled on first use. One compile at a time:
        concurrent first runs of one shape compile it once."""
        return self.executable_at(self.key(lens, values))

    def executable_at(self, key: Key) -> Executable:
        with self._lock:
            exe = self._cache.get(key)
            if exe is not None:
                self._cache.move_to_end(key)
                return exe
            start = time.perf_counter()
            exe = self._compile(key)
            self.specializations.append(Specialization(self._named(key), time.perf_counter() - start, self._values(key)))
            self._cache[key] = exe
            evicted = [self._cache.popitem(last=False)[1] for _ in range(len(self._cache) - self.capacity)]
        for old in evicted:  # their runs' late errors, before they are dropped
            old.check()
        return exe

    def check(self) -> None:
        for exe in list(self._cache.values()):
            exe.check()

    def _compile(self, key: Key) -> Executable:
        from ..passes.specialize_shapes import specialize

        named = self._named(key)
        try:
            static = specialize(self.program, named, self._values(key))
        except ShapeError as e:  # e.g. two inputs that share a dim given different sizes
            shapes = ", ".join(f"{n}[{','.join(map(str, v))}]" for n, v in named.items())
            raise InputError(f"inputs of shapes {shapes} do not fit together: {e}") from e
        with self._scope():  # the static program's own compile: an input left general is not specialized again
            return self.target.compile(static, dataclasses.replace(self.options, dynamic_cache_size=0))

    # -- running ---------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any], *, deadline: float | None = None) -> list[Any]:
        self._run_pending_checks()
        if isinstance(inputs, Mapping) and any(_is_device(v) for v in inputs.values()):
            # device tensors (gpu): the specialized executable's own door takes them
            return self.executable_for(self._device_lens(inputs), self._guard(inputs)).run(inputs, deadline=deadline)
        checked = check_inputs(self.input_specs, inputs)
        exe = self._for(checked)  # a first compile at this shape is not the run's time
        with running(deadline, self.options.max_loop_iterations):
            return exe.execute(checked)

    def execute(self, inputs: dict[str, Any]) -> list[Any]:
        return self._for(inputs).execute(inputs)

    def _for(self, checked: Mapping[str, Any]) -> Executable:
        """The executable for these (checked, numpy) inputs."""
        return self.executable_for(_lens(checked), self._guard(checked))

    def _guard(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The values of the guarded inputs, as Python scalars."""
        return {name: _scalar(name, inputs[name]) for name in self.guarded}

    def run_async(self, inputs: Mapping[str, Any], *, stream: Any = None, after: Any = (),
                  deadline: float | None = None) -> Any:
        """On a host target, a worker thread's run (compiling a new shape there too); on gpu, the run
        of the executable for these input shapes, queued on its stream."""
        if self.target.name != "gpu":
            return super().run_async(inputs, stream=stream, after=after, deadline=deadline)
        self._run_pending_checks()
        device = isinstance(inputs, Mapping) and any(_is_device(v) for v in inputs.values())
        exe = self.executable_for(self._device_lens(inputs), self._guard(inputs)) if device else \
            self._for(check_inputs(self.input_specs, inputs))
        return exe.run_async(inputs, stream=stream, after=after, deadline=deadline)

    def _device_lens(self, inputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        if set(inputs) != set(self.input_specs):
            raise InputError(f"inputs {sorted(inputs)} are not the program's {list(self.input_specs)}")
        lens = {n: tuple(int(d) for d in inputs[n].shape) for n in self.input_specs}
        for name, spec in self.input_specs.items():
            if not spec.matches(lens[name]):
                raise InputError(f"input {name!r}: expected shape {spec}, got {list(lens[name])}")
        return lens

    def context(self) -> Executable:
        """On gpu, an execution context (`SpecializedContext`): the same compiles, and per shape an
        execution context of the specialized executable, so contexts run at once; on host targets,
        this executable (their runs keep their state per thread already)."""
        return SpecializedContext(self) if self.target.name == "gpu" else self

    # profiling and capture run the specialized executable: its steps are the ones that run
    def profile(self, inputs: Mapping[str, Any], runs: int = 10, warmup: int = 1) -> Any:
        checked = check_inputs(self.input_specs, inputs)
        self._run_pending_checks()
        return self._for(checked).profile(checked, runs, warmup)

    def capture(self, inputs: Mapping[str, Any]) -> dict[int, Any]:
        checked = check_inputs(self.input_specs, inputs)
        self._run_pending_checks()
        return self._for(checked).capture(checked)

    def execute_observed(self, inputs: dict[str, Any], observer: Any) -> list[Any]:
        raise TargetError("a dynamic program's steps are those of its specializations: "
                          "use executable_for(lens).execute_observed, or profile()/capture()")

    def describe(self) -> str:
        by = "input shape" + (f" and the values of {', '.join(self.guarded)}" if self.guarded else "")
        lines = [f"dynamic program on {self.target.name}: specialized per {by}, "
                 f"{len(self._cache)} of at most {self.capacity} cached"]
        for s in self.specializations:
            lines.append(f"  {s.lens}{f' {s.values}' if self.guarded else ''}: compiled in {s.seconds * 1e3:.1f} ms")
        return "\n".join(lines)


class SpecializedContext(SpecializingExecutable):
    """An execution context of a gpu SpecializingExecutable. Shapes are compiled once, by the parent
    (its cache, its lock); a run at a shape goes to this context's own context of the parent's
    executable for it (made when the context first meets the shape: its buffers, CUDA graph and
    stream), so runs of several contexts at one shape run at once. At most the parent's capacity
    of them is kept, least recently used dropped, as the parent drops its executables."""

    def __init__(self, parent: SpecializingExecutable):
        Executable.__init__(self, parent.program, parent.options)
        self.parent, self.target, self.capacity = parent, parent.target, parent.capacity
        self._cache = parent._cache  # read only here (cached_shapes, describe): the parent compiles
        self.guarded = parent.guarded
        self._contexts: OrderedDict[Key, tuple[Executable, Executable]] = OrderedDict()  # key: (parent's, ours)
        self._lock = threading.Lock()

    @property
    def specializations(self) -> list[Specialization]:  # type: ignore[override]
        return self.parent.specializations

    def executable_for(self, lens: Mapping[str, tuple[int, ...]], values: Mapping[str, Any] | None = None) -> Executable:
        key = self.parent.key(lens, values)
        shared = self.parent.executable_at(key)
        with self._lock:
            held = self._contexts.get(key)
            if held is None or held[0] is not shared:  # new, or the parent compiled it again since
                held = self._contexts[key] = (shared, shared.context())
            self._contexts.move_to_end(key)
            evicted = [self._contexts.popitem(last=False)[1][1] for _ in range(len(self._contexts) - self.capacity)]
        for old in evicted:
            old.check()
        return held[1]

    def check(self) -> None:
        for _, exe in list(self._contexts.values()):
            exe.check()

    def context(self) -> Executable:
        return self.parent.context()


def value_inputs(target: Target, program: Program) -> list[str]:
    """The inputs `target` specializes `program` on by value (none unless it does that)."""
    if not target.specializes_values:
        return []
    from ..passes.specialize_values import condition_inputs

    return condition_inputs(program)


def _scalar(name: str, value: Any) -> Any:
    """The one element of a guarded input as a Python scalar (a device tensor's is copied to the host)."""
    try:
        host = np.asarray(value.cpu()) if hasattr(value, "cpu") else np.asarray(value)
        return host.reshape(-1)[0].item()
    except (TypeError, ValueError, IndexError, RuntimeError) as e:
        raise InputError(f"input {name!r}: cannot read its value ({type(value).__name__}): {e}") from e


def _lens(inputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    return {n: tuple(v.shape) for n, v in inputs.items()}


def _is_device(v: Any) -> bool:
    # numpy arrays and nested lists are host values; anything else with a shape and DLPack is a device's
    return hasattr(v, "__dlpack__") and hasattr(v, "shape") and type(v).__module__.split(".")[0] != "numpy"
