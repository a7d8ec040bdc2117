"""The gpu Executable: a flat list of steps over fixed device memory, replayed as one CUDA graph.

Inputs are copied into fixed input buffers (host arrays: one host-to-device copy; device tensors:
one device copy, or none when the caller writes into `input_buffers()` directly); the steps (or the
captured graph) run on the caller's current stream, or the one given; outputs come back as numpy
arrays, or as device tensors that alias the executable's output buffers (valid until the next run,
like torch.compile's CUDA graphs) unless `copy_outputs` is asked for. One run at a time per
executable (a lock, and on the device the order of streams.py): the buffers and the graph are
shared; `context()` makes another executable over the same weights and kernels with buffers and a
graph of its own (contexts.py), which runs at once beside it, and `run_async` queues a run on a
CUDA stream without waiting (streams.py). An index out of range is the op's
ExecutionError, from the indexing steps' device flags (index_checks.py), in eager runs and graph
replays alike: at the end of `run`, or for `run_device` and `run_async` (which do not wait for the
device) at the executable's next call, `check()` or the future's `result()`.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ...errors import InputError
from ...ir import run_limits
from ...ir.dtypes import DType
from ...ir.program import Program
from ...ir.run_limits import running
from ...profile import phases
from ..base import CompileOptions, Executable
from . import kernels
from .device import StreamScope, to_host, torch, torch_dtype
from .index_checks import IndexChecks
from .lowering import Slot
from .streams import RunOrder


class DeviceDoor:
    """The run surface the gpu executables share (static, dynamic, segmented): numpy arrays in ->
    numpy arrays out through Executable.run (checked like every target); device tensors (torch, or
    any DLPack producer) in -> device tensors out through the subclass's `run_device`."""

    def run(self, inputs: Mapping[str, Any], *, deadline: float | None = None) -> list[Any]:
        if inputs and any(is_device_tensor(v) for v in inputs.values()):
            with running(deadline, self.options.max_loop_iterations):  # type: ignore[attr-defined]
                return self.run_device(inputs, checked=True)  # type: ignore[attr-defined]
        return super().run(inputs, deadline=deadline)  # type: ignore[misc]

    def check(self) -> None:
        """Wait for the device and raise the error an earlier `run_device` or `run_async` left (an
        index out of range: index_checks.py); the dynamic and segmented modes' runs raise theirs as
        they run, so for them this does nothing."""
        self._raise_late(wait=True)

    def _raise_late(self, wait: bool) -> None:
        """The static mode's late index errors (GpuExecutable)."""

    def run_async(self, inputs: Mapping[str, Any], *, stream: Any = None, after: Any = (),
                  deadline: float | None = None) -> Any:
        """Queue a run on `stream` (None: this executable's own); a DeviceFuture back (streams.py)."""
        from .streams import run_async

        return run_async(self, inputs, stream, after, deadline)


SLOW_STEP_NS = 5_000_000  # a step of the warm-up's walks this slow is in the compile log (what it waited for)


class GpuExecutable(DeviceDoor, Executable):
    def __init__(self, program: Program, options: CompileOptions, device: Any, steps: list[Callable[[], None]],
                 slots: dict[int, Slot], memory: tuple[Any, Any], graph_mode: bool, sources: dict[str, str],
                 fp32_exact: bool, index_checks: IndexChecks | None = None):
        super().__init__(program, options)
        self.device = device
        self.steps = steps
        self.memory = memory  # (activations, weights): keeps the allocations alive
        self.sources = sources
        self.gemm_kernels: list[Any] = []  # the chosen GEMM templates' compiled kernels (set when built)
        main = program.main
        self._inputs = {p.op.param_name: (slots[p.uid].t, p.shape.dtype) for p in main.parameters}
        self._outputs = [(slots[o.uid], o.shape.dtype) for o in main.outputs]
        self._lock = threading.Lock()
        self._slots = slots
        self.step_uids: list[int | None] = [None] * len(steps)  # set by the build: each step's instruction
        self._fp32_exact = fp32_exact
        self.index_checks = index_checks or IndexChecks(device)  # its steps' flags (none: no indexing step)
        self.graph = None
        self.graph_mode = graph_mode and device.type == "cuda"
        self._warm = False
        self.plan: Any = None  # the static build's plan.Plan (set when built): its steps' pattern members
        self._order = RunOrder()  # a run on another stream than the last waits for it (streams.py)

    def step_members(self) -> dict[int, list[Any]]:
        """A pattern step (a GEMM and its epilogue) computes all its members: profiles name them all."""
        if self.plan is None:
            return {}
        return {s.ins.uid: s.members for s in self.plan.steps if s.members}

    def step_kinds(self) -> dict[int, str]:
        """A pattern step is named by its pattern (attention, gemm_epilogue), not by its last
        instruction's op (an attention's second product, a dot)."""
        if self.plan is None:
            return {}
        return {s.ins.uid: s.kind for s in self.plan.steps if s.members and s.kind != s.ins.op.name}

    def context(self) -> GpuExecutable:
        """An execution context (contexts.py): these weights and kernels, its own input and output
        buffers, arena, scratch and CUDA graph (captured now), so it runs beside this one."""
        from .contexts import make_context

        return make_context(self)

    # -- running ----------------------------------------------------------------------------------
    def _precision(self):
        """The library settings every step runs (and is captured) under: fp32 math in true fp32
        (cuDNN and cuBLAS would otherwise use TF32), cuDNN's algorithms chosen by its heuristics."""
        return library_flags(self.device, self._fp32_exact)

    def _run_steps(self) -> None:
        deadline = run_limits.current().deadline_at
        log = phases.current() if not self._warm else None  # the warm-up's walks: their slow steps logged
        kinds: dict[int, str] | None = None  # (made at the first slow step)
        for k, step in enumerate(self.steps):
            if deadline is not None and time.monotonic() > deadline:  # (launches are asynchronous)
                run_limits.check_deadline(f"step {k} of {len(self.steps)}")
            if log is None:
                step()
                continue
            t0 = time.perf_counter_ns()
            step()
            if time.perf_counter_ns() - t0 >= SLOW_STEP_NS:
                if kinds is None:
                    kinds = {s.ins.uid: s.kind for s in self.plan.steps} if self.plan is not None else {}
                uid = self.step_uids[k] if k < len(self.step_uids) else None
                log.add(f"step {k} {kinds.get(uid, '?')}", phases.MAIN, t0, time.perf_counter_ns())

    def warm_up(self) -> None:
        """Run once (compiling kernels, choosing cuDNN algorithms), then capture the graph."""
        t = torch()
        with self._precision():
            if self.device.type != "cuda":
                self._run_steps()
                self._warm = True
                return
            side = t.cuda.Stream(self.device)
            side.wait_stream(t.cuda.current_stream(self.device))
            with t.cuda.stream(side):  # one run: kernels compiled, cuDNN algorithms chosen, workspaces made
                with phases.span("compile kernels"), kernels.compile_all() as compiling:  # every step's, at once
                    if compiling:
                        with phases.span("submit compiles"):  # the steps walked; then the wait for the threads
                            self._run_steps()
                with phases.span("first run"), kernels.compile_async():  # (waits for kernels still compiling)
                    self._run_steps()
            t.cuda.current_stream(self.device).wait_stream(side)
            if self.graph_mode:
                graph = t.cuda.CUDAGraph()
                with phases.span("capture graph"), _own_cublas_workspace(t), no_collection(), t.cuda.graph(graph):
                    self._run_steps()
                self.graph = graph
        self._warm = True

    def _launch(self) -> None:
        if self.graph is not None:
            run_limits.check_deadline("the graph's launch")  # one step: the whole captured program
            self.graph.replay()
            return
        with self._precision():
            self._run_steps()

    def _raise_late(self, wait: bool) -> None:
        with self._lock:
            self.index_checks.raise_late(wait)

    def _check_indices(self) -> None:
        """The op's ExecutionError when an indexing step met an index out of range this run (one
        read of its flags; nothing without indexing steps)."""
        self.index_checks.raise_if_flagged(self._rerun_checked)

    def _rerun_checked(self) -> None:
        """The run again, uncaptured, its indices checked on the host (index_checks.py)."""
        kept = {uid: slot.t for uid, slot in self._slots.items()}  # a graph's replays read these tensors
        try:
            with self._precision():
                self._run_steps()
        finally:
            for uid, value in kept.items():
                self._slots[uid].t = value

    def input_buffers(self) -> dict[str, Any]:
        """The device tensors the program reads its inputs from: write into them and call
        `run_device()` with no inputs for zero-copy input. An fp16 program's buffer of an fp32 input
        it only converts holds fp16 (`copy_` converts what is written into it)."""
        return {name: buf for name, (buf, _) in self._inputs.items()}

    def execute(self, inputs: dict[str, Any]) -> list[np.ndarray]:
        """numpy in (already checked by `run`), numpy out."""
        return self._host_run(inputs, self._launch)

    def execute_observed(self, inputs: dict[str, Any], observer: Any) -> list[np.ndarray]:
        """`execute` step by step, never as the graph: each step's device time from CUDA events, and
        its launch (host) time on a lane of its own (gpu/profile.py)."""
        from .profile import observe_steps

        captured: dict[int, Any] = {}

        def launch() -> None:
            # steps that make their own tensors set them anew: the graph's replays read the captured ones
            captured.update({uid: slot.t for uid, slot in self._slots.items()})
            with self._precision():
                observe_steps(self.device, self.steps, self.step_uids, self._slots, observer)

        def restore() -> None:
            if self.graph is not None:
                for uid, t in captured.items():
                    self._slots[uid].t = t

        return self._host_run(inputs, launch, restore)

    def _host_run(self, inputs: dict[str, Any], launch: Callable[[], None],
                  after: Callable[[], None] | None = None) -> list[np.ndarray]:
        with self._lock, StreamScope(None, self.device) as stream:
            self._order.before(stream)
            self.index_checks.raise_late(wait=True)  # an earlier run_device's error first
            for name, value in inputs.items():
                buf, dt = self._inputs[name]
                _copy_in(buf, value, dt)
            if not self._warm:
                self.warm_up()
            try:
                launch()
                self._order.after(stream)
                self._check_indices()
                return [to_host(slot.t, dt) for slot, dt in self._outputs]
            finally:
                if after is not None:
                    after()

    def run_device(self, inputs: Mapping[str, Any] | None = None, stream: Any = None,
                   copy_outputs: bool = False, checked: bool = False) -> list[Any]:
        """Run on device tensors. `inputs` may be torch tensors, DLPack producers or numpy arrays;
        None uses what `input_buffers()` hold. Runs on `stream` (a torch.cuda.Stream) if given, else
        on the current stream. Outputs alias the executable's buffers unless `copy_outputs`.

        Nothing waits for the device: an index out of range in this run is raised by a later call
        (the next run, `check()`), as CUDA reports its own asynchronous errors; `checked=True`
        waits for the run and raises it now, with the offending value (as `run` does)."""
        self._run_pending_checks()
        with self._lock, StreamScope(stream, self.device) as current:
            self._order.before(current)
            self.index_checks.raise_late(wait=checked)  # earlier runs' errors, where known by now
            if inputs is not None:
                check_input_names(inputs, self._inputs)
                for name, value in inputs.items():
                    buf, dt = self._inputs[name]
                    _copy_in(buf, as_tensor(value), dt, name)
            if not self._warm:
                self.warm_up()
            self._launch()
            if checked or current is None:  # (off CUDA the run is done already)
                self._check_indices()
            else:
                self.index_checks.read_later(current)
            outs = [slot.t for slot, _ in self._outputs]
            outs = [o.clone() for o in outs] if copy_outputs else outs
            self._order.after(current)  # (after the copies: they read the buffers too)
            return outs

    # -- description --------------------------------------------------------------------------------
    @property
    def host_ops(self) -> list[str]:
        """Ops of the steps that run on the host: none, the static mode runs all on the device."""
        return []

    def describe(self) -> list[str]:
        """One line per step: the lowering that runs it (all on the device, captured as one graph)."""
        from .lowering import describe_lowering

        plan = getattr(self, "plan", None)
        return [f"%{s.ins.uid} = {describe_lowering(s)}" for s in plan.steps] if plan is not None else []


def check_input_names(inputs: Mapping[str, Any], expected: Iterable[str]) -> None:
    """InputError unless `inputs` names exactly the inputs `expected` names."""
    expected = list(expected)
    missing = [n for n in expected if n not in inputs]
    extra = [n for n in inputs if n not in expected]
    if missing or extra:
        raise InputError(f"missing input(s) {missing}, unknown input(s) {extra} (the program takes "
                         f"{list(expected)})")


def library_flags(device: Any, exact: bool):
    """The library settings steps run (and are captured) under on CUDA; nothing elsewhere.

    cuDNN picks its convolution algorithms by its heuristics, not by timing them (`benchmark`): a
    timed choice is made again in every process and may differ between near-equal algorithms, so a
    saved program loaded in a new process gave other bits than it had when saved (ResNet-50 fp32 on
    the H200). On the H200, fp16, timing bought 2% at YOLOv8n b1 (0.498 against 0.510 ms) and nothing
    measurable at ResNet-50 b32 (1.172 / 1.174 ms) or YOLOv8n b16 (1.856 / 1.861 ms), and it cost
    217 MiB of trial workspaces at ResNet-50 b32."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return _LibraryFlags(torch(), exact)


class _LibraryFlags:
    def __init__(self, t, fp32_exact: bool):
        self.t, self.exact = t, fp32_exact

    def __enter__(self):
        t = self.t
        self.cudnn = t.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False,
                                             allow_tf32=not self.exact)
        self.cudnn.__enter__()
        self.old = t.backends.cuda.matmul.allow_tf32
        t.backends.cuda.matmul.allow_tf32 = not self.exact

    def __exit__(self, *exc):
        self.t.backends.cuda.matmul.allow_tf32 = self.old
        return self.cudnn.__exit__(*exc)


@contextlib.contextmanager
def no_collection():
    """Python's cyclic garbage collector held off during a CUDA-graph capture: a collection then can
    destroy an earlier program's graph or stream objects, a CUDA call that invalidates the capture
    ("operation failed due to a previous error during capture", seen on the H200 when tests compile
    program after program in one process). torch.cuda.graph collects before it starts."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def _own_cublas_workspace(t):
    """A capture whose cuBLAS workspace lies in its graph's memory pool, as torch.compile's CUDA
    graphs do: cuBLAS keeps one workspace per stream for the life of the process, so the warm-up's
    (on its side stream: 33 MiB on the H200, a second copy beside the capture's) is dropped before
    the capture, and the capture's after it, where its graph's pool keeps it. (A torch without the
    call captures as before: with the second workspace.)"""
    clear = getattr(t._C, "_cuda_clearCublasWorkspaces", lambda: None)
    clear()
    try:
        yield
    finally:
        clear()


def is_device_tensor(v: Any) -> bool:
    """A torch tensor or another DLPack producer (numpy arrays speak DLPack too, but are host data)."""
    return not isinstance(v, np.ndarray) and (isinstance(v, torch().Tensor) or hasattr(v, "__dlpack__"))


def as_tensor(v: Any) -> Any:
    """numpy arrays and torch tensors as they are; other DLPack producers as torch tensors sharing
    their memory (cupy, jax, ...)."""
    return v if isinstance(v, (np.ndarray, torch().Tensor)) else torch().from_dlpack(v)


def _copy_in(buf: Any, value: Any, dt: DType, name: str = "") -> None:
    if isinstance(value, np.ndarray):
        from .device import host_tensor

        value = host_tensor(value, dt)  # only read: copied once, into the input buffer
    want = torch_dtype(dt)  # the input's type (a staged input's buffer holds a narrower one: the copy converts)
    if tuple(value.shape) != tuple(buf.shape) or value.dtype != want:
        raise InputError(f"input {name!r}: expected {want} {list(buf.shape)}, got {value.dtype} {list(value.shape)}")
    buf.copy_(value, non_blocking=value.device.type != "cpu" or value.is_pinned())
