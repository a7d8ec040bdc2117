"""The cpu executable: flat lists of kernel steps, each module's (the main one's, and those of
control-flow bodies: If/Loop/Scan) over its own preallocated arena, one per thread.

A step is `fn(args, out[, env])`: args are values looked up by uid in an environment (a dict), out a
view of the arena or None. Constants — literals, and movement ops over them (a bias broadcast, a
transposed weight) evaluated once when the steps are built — sit in the environment from the start;
views among them get exactly the strides the IR gives them, so kernels take their fast path. Views
of arena buffers (the reshapes and transposes around every matmul) are fixed too, since each
thread's arena is: they are made once per thread and never run again. The run loop is what every
inference pays per step: it reads prebuilt tuples and nothing else.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ... import debug
from ...ir import run_limits
from ...ir.builtin import Literal, Param
from ...ir.dtypes import DType
from ...ir.module import Module
from ...ir.op import OpKind
from ...ir.program import Program
from ...ir.shape import Shape, TupleShape, same_steps
from ...passes.memory_coloring import ALIGNMENT, reads
from ..asynchronous import cores
from ..base import CompileOptions, Executable
from .cores import budget

SMALL_STAGE = 1 << 16  # bytes: moving values up to this size are copied into the arena (ModuleSteps.stage)


@dataclasses.dataclass
class Step:
    fn: Callable[..., Any]
    args: tuple[int, ...]        # uids of the inputs
    out: int                     # uid of the result
    frees: tuple[int, ...]       # uids dead after this step (dropped so memory is returned early)
    buffer: tuple[int, tuple[int, ...], np.dtype] | None  # arena offset, lens, dtype of the output
    needs_env: bool = False
    name: str = ""
    view: Shape | None = None    # the result's shape when it is a view of the first input


class ModuleSteps:
    """One module's steps, its constants, parameters and outputs; `run` evaluates it."""

    def __init__(self, module: Module, steps: list[Step], constants: dict[int, Any], arena_bytes: int = 0):
        self.module = module
        self.steps = steps
        self.constants = constants
        self.arena_bytes = arena_bytes
        self._local = threading.local()
        self.params = [(i.uid, i.op.param_name) for i in module.instructions if isinstance(i.op, Param)]
        self.outputs = [i.uid for i in module.outputs]
        # values of enclosing modules this one reads, its own bodies' reads included (a body only
        # copies those from its caller's env: a body nested two deep reads the main module's values
        # through the one between), by its steps or as outputs it returns unchanged
        enclosing: set[int] = set()
        m = module.parent
        while m is not None:
            enclosing.update(i.uid for i in m.instructions)
            m = m.parent
        self.outer = sorted({u for s in steps for u in s.args if u in enclosing}
                            | {u for i in module.instructions for u in reads(i) if u in enclosing}
                            | {u for u in self.outputs if u in enclosing})
        self._set_rows()

    def _staging(self) -> list[tuple[int, tuple[int, ...], np.dtype]]:
        """The values that move between runs (parameters, enclosing modules' values) that steps read
        and that are small: each run copies them into buffers past the arena (`stage`), so the
        steps reading them see buffers that stay where they are and join native programs."""
        shapes: dict[int, Any] = {}
        m = self.module
        while m is not None:
            shapes.update((i.uid, i.shape) for i in m.instructions if not isinstance(i.op, Literal))
            m = m.parent
        # (what control flow's bodies read from here too: their native forms copy it from these buffers)
        read = {u for s in self.steps for u in s.args} | {
            u for s in self.steps for body in getattr(s.fn, "bodies", {}).values() for u in body.outer}
        moving = [u for u, _ in self.params] + self.outer
        return [(u, shapes[u].lens, shapes[u].dtype.np) for u in moving
                if u in read and u in shapes and u not in self.outputs and isinstance(shapes[u], Shape)
                and not shapes[u].is_dynamic and shapes[u].dtype != DType.string and 0 < shapes[u].bytes <= SMALL_STAGE]

    def stage(self, env: dict[int, Any]) -> None:
        """Copy this run's moving values into their buffers (see `_staging`); call after `thread_plan`."""
        for uid, buf in self._local.staged:
            np.copyto(buf, env[uid], casting="no")
            env[uid] = buf

    def _set_rows(self) -> None:
        self._rows = [(s.fn, s.args, s.out, s.frees, s.needs_env, None) for s in self.steps]

    def fold_constants(self) -> None:
        """Evaluate once the movement steps whose inputs are all constants."""
        kept = []
        by_uid = {i.uid: i for i in self.module.instructions}
        known = {**self._outer_literals(), **self.constants}  # (a body's broadcast of its caller's bias too)
        for s in self.steps:
            ins = by_uid[s.out]
            if (ins.op.kind is OpKind.MOVEMENT and ins.op.deterministic and not s.needs_env and s.args
                    and all(a in known for a in s.args)):
                known[s.out] = self.constants[s.out] = _as_described(s.fn([known[a] for a in s.args], None), ins.shape)
            else:
                kept.append(s)
        self.steps = kept
        self._set_rows()

    def with_arena(self, arena: np.ndarray, native: bool = False) -> tuple[list[tuple], dict[int, Any]]:
        """The steps over `arena` (64-byte aligned): each row with its output view, and the views of
        arena buffers, made here once, whose steps are left out; with `native`, runs of steps with C
        forms as native programs (one C call each: native_program.py)."""
        rows, fixed, static = [], dict(self._local.staged), {}
        for s, (fn, args, uid, frees, needs_env, _) in zip(self.steps, self._rows):
            if s.view is not None and args[0] in fixed and not needs_env:
                # (an element of a planned tuple is a view of it, though the plan keys its buffer by it)
                fixed[uid] = static[uid] = _as_described(fn([fixed[args[0]]], None), s.view)
            elif s.buffer is not None:
                out = _view(arena, s.buffer)
                fixed[uid] = out  # every kernel given an output buffer returns it
                rows.append((fn, args, uid, frees, needs_env, out))
            else:
                rows.append((fn, args, uid, frees, needs_env, None))
        # outputs in the arena are copied out at the end of a run (the caller's to keep)
        self._local.copy_out = [k for k, u in enumerate(self.outputs) if u in fixed]
        if native:
            from .native_program import native_rows

            rows = native_rows(rows, {**self._outer_literals(), **self.constants, **fixed})
        return rows, static

    def _outer_literals(self) -> dict[int, Any]:
        """The enclosing modules' literals this body reads: their arrays stay where they are."""
        m, found = self.module.parent, {}
        while m is not None:
            found.update((i.uid, i.op.value) for i in m.instructions if isinstance(i.op, Literal) and i.uid in self.outer)
            m = m.parent
        return found

    def thread_plan(self) -> tuple[list[tuple], dict[int, Any]]:
        """This thread's arena and the steps over it (made once per thread: runs on several threads
        never share a buffer)."""
        plan = getattr(self._local, "plan", None)
        if plan is None:
            staging = self._staging()
            offsets = np.cumsum([_align(self.arena_bytes)] + [_align(int(np.prod(lens)) * d.itemsize)
                                                              for _, lens, d in staging])
            raw = np.empty(int(offsets[-1]) + 64, np.uint8)
            base = (-raw.ctypes.data) % 64  # 64-byte aligned, as the plan assumes
            self._local.staged = [(u, _view(raw[base:], (int(o), lens, d))) for (u, lens, d), o in zip(staging, offsets)]
            plan = self._local.plan = self.with_arena(raw[base:], native=debug.native_programs())
            self._local.step_plan = self.with_arena(raw[base:]) if debug.native_programs() else plan
            self._local.arena = raw
            self._local.base = {**self.constants, **plan[1]}
        return plan

    def step_plan(self) -> tuple[list[tuple], dict[int, Any]]:
        """`thread_plan` with every step a row of its own (no native programs): what profiles time."""
        self.thread_plan()
        return self._local.step_plan

    def run(self, env: dict[int, Any], rows: Sequence[tuple]) -> list[Any]:
        deadline = run_limits.current().deadline_at
        if deadline is not None:
            return self._run_until(env, rows, deadline)
        for fn, args, uid, frees, needs_env, out in rows:
            values = [env[a] for a in args]
            env[uid] = fn(values, out, env) if needs_env else fn(values, out)
            for dead in frees:
                del env[dead]
        return [env[u] for u in self.outputs]

    def run_observed(self, env: dict[int, Any], rows: Sequence[tuple], observer: Any) -> list[Any]:
        """`run` with each step timed and reported to `observer` (a profile.Recorder); `run` itself
        stays as it is, so profiling off costs the hot loop nothing."""
        clock = observer.clock
        for fn, args, uid, frees, needs_env, out in rows:
            values = [env[a] for a in args]
            t0 = clock()
            env[uid] = fn(values, out, env) if needs_env else fn(values, out)
            observer.step(uid, t0, clock(), env[uid])
            for dead in frees:
                del env[dead]
        return [env[u] for u in self.outputs]

    def _run_until(self, env: dict[int, Any], rows: Sequence[tuple], deadline: float) -> list[Any]:
        """`run` with the clock read before each step (a loop of its own: runs without a deadline pay nothing)."""
        for fn, args, uid, frees, needs_env, out in rows:
            if time.monotonic() > deadline:
                run_limits.check_deadline(f"step %{uid} of module {self.module.name}")
            values = [env[a] for a in args]
            env[uid] = fn(values, out, env) if needs_env else fn(values, out)
            for dead in frees:
                del env[dead]
        return [env[u] for u in self.outputs]

    def run_body(self, params: Mapping[str, Any] | Sequence[Any], outer: Mapping[int, Any]) -> list[Any]:
        """Run as a control-flow body: parameters by name or position, enclosing values from `outer`."""
        rows, _ = self.thread_plan()
        env = self._local.base.copy()  # constants and fixed views, gathered once per thread
        for u in self.outer:
            env[u] = outer[u]
        values = [params[name] for _, name in self.params] if isinstance(params, Mapping) else params
        for (uid, _), v in zip(self.params, values):
            # a scan slices numpy scalars out of its inputs; kernels take arrays
            env[uid] = np.asarray(v) if isinstance(v, np.generic) else v
        self.stage(env)
        results = self.run(env, rows)
        for k in self._local.copy_out:  # the next run (a loop's next iteration) writes over them
            results[k] = results[k].copy()
        return results


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _view(arena: np.ndarray, buffer: tuple) -> Any:
    """The array of `buffer` (output_buffer's triple, or a tuple of them) in `arena`."""
    if not buffer or isinstance(buffer[0], (tuple, type(None))):
        return tuple(None if b is None else _view(arena, b) for b in buffer)
    offset, lens, dtype = buffer
    return arena[offset: offset + int(np.prod(lens)) * dtype.itemsize].view(dtype).reshape(lens)


def _as_described(value: Any, shape: Any) -> Any:
    """`value` with the strides the IR gives it: numpy gives size-1 dims strides of its own (0 in a
    broadcast), the IR a canonical one; the generated kernels compare strides exactly."""
    if not isinstance(value, np.ndarray) or not isinstance(shape, Shape) or shape.is_dynamic:
        return value
    strides = tuple(s * value.itemsize for s in shape.strides)
    if value.shape != shape.lens or value.strides == strides:
        return value
    if not same_steps(value.strides, strides, value.shape):
        # another layout altogether (numpy's reshape of a transposed constant keeps it a view)
        return np.ascontiguousarray(value) if shape.standard else value
    if value.dtype.kind == "V" or value.dtype.type.__module__.startswith("ml_dtypes"):
        # as_strided rejects ml_dtypes' types (float8, int4...): the same bytes viewed as unsigned ints
        bits = value.view(np.dtype(f"u{value.itemsize}"))
        return np.lib.stride_tricks.as_strided(bits, value.shape, strides, writeable=False).view(value.dtype)
    return np.lib.stride_tricks.as_strided(value, value.shape, strides, writeable=False)


class CpuExecutable(Executable):
    def __init__(self, program: Program, options: CompileOptions, main: ModuleSteps, arena_bytes: int):
        super().__init__(program, options)
        self.main = main
        self.main.arena_bytes = arena_bytes

    @property
    def steps(self) -> list[Step]:
        return self.main.steps

    @property
    def arena_bytes(self) -> int:
        return self.main.arena_bytes

    threads = 1  # the cores one run uses (set by the target: its OpenMP team's size)

    def async_workers(self) -> int:
        return max(1, cores() // self.threads)

    def holding_cores(self):
        """run_async's runs take their cores from the process's budget (cores.py)."""
        return budget().take(self.threads)

    def execute(self, inputs: dict[str, Any]) -> list[np.ndarray]:
        rows, static = self.main.thread_plan()
        return self._results(self.main.run(self._env(inputs, static), rows))

    def execute_observed(self, inputs: dict[str, Any], observer: Any) -> list[np.ndarray]:
        rows, static = self.main.step_plan()
        return self._results(self.main.run_observed(self._env(inputs, static), rows, observer))

    def _env(self, inputs: dict[str, Any], static: dict[int, Any]) -> dict[int, Any]:
        env: dict[int, Any] = dict(self.main.constants)
        env.update(static)
        for uid, name in self.main.params:
            env[uid] = inputs[name]
        self.main.stage(env)
        return env

    @staticmethod
    def _results(values: list[Any]) -> list[np.ndarray]:
        results = []
        for r in values:
            # outputs are never planned into the arena, but may be views of inputs or weights
            results.append(r if isinstance(r, np.ndarray) and r.flags.owndata and r.flags.c_contiguous else _copy(r))
        return results


def _copy(r: Any) -> Any:
    return np.array(r, order="C", copy=True) if isinstance(r, np.ndarray) else r


def output_buffer(ins, plan) -> tuple | None:
    """Where `ins` writes its result: (arena offset, lens, dtype), or for an op writing a tuple's
    elements into buffers of their own (plan_memory.TUPLE_WRITERS) one such triple per element
    (None for an element nobody reads); None where its kernel allocates it."""
    if plan is None:
        return None
    if isinstance(ins.shape, TupleShape):
        readers = {u.op.index: u for u in ins.users if u.op.name == "get_tuple_elem"}
        if not readers or any(u.uid not in plan.buffers for u in readers.values()):
            return None  # not planned (or an element escapes): the kernel's own arrays
        return tuple(None if k not in readers else output_buffer(readers[k], plan)
                     for k in range(len(ins.shape.elements)))
    if ins.uid not in plan.buffers or not isinstance(ins.shape, Shape):
        return None
    b = plan.buffers[ins.uid]
    return (b.offset, ins.shape.lens, ins.shape.dtype.np)
