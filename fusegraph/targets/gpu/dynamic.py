"""The gpu target's dynamic execution mode, for programs the static plan cannot take: shapes known
only at run time (dynamic input dims, data-dependent outputs: nonzero, unique, nms, reshapes and
slices whose sizes are inputs, control flow) or steps that must run on the host (host.py).

The steps are the static mode's (one per instruction or pattern, same lowering table) without the
arena and without graph capture: each value is a tensor allocated when its step runs (torch's
caching allocator makes that cheap) and dropped after its last use. A device step whose shapes are
static is built once at compile time; one whose shapes change is built for each distinct set of
concrete input shapes it meets (a cached closure per set). Where a lowering rejects the concrete
shapes, or has no table entry, the step runs on the host. Programs with host steps run uncaptured
(not as CUDA-graph segments): the host steps synchronize anyway, and such programs are off the
benchmarks' static fast path, which stays arena + one CUDA graph.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import CompileError, FusegraphError
from ...ir import run_limits
from ...ir.module import Instruction, Module
from ...ir.program import Program
from ...ir.shape import AnyShape, Shape, TupleShape
from ..base import CompileOptions, Executable
from .build import BuildContext
from .device import StreamScope, torch, torch_dtype
from .executable import DeviceDoor, as_tensor, check_input_names, library_flags
from .host import device_value, host_runner, host_value, outer_reads, why_host
from .lowering import LOWERINGS, describe_lowering, find_lowering
from .plan import Step, is_dynamic, list_steps
from .streams import RunOrder

DEVICE, HOST = "device", "host"
# What a shape rule may raise on shapes it cannot take (the IR's own ShapeError, or numpy's errors).
_SHAPE_ERRORS = (FusegraphError, ValueError, IndexError, TypeError, ArithmeticError)


class HostFallbackWarning(UserWarning):
    """A compiled gpu program runs some of its steps on the host."""


@dataclasses.dataclass
class Run:
    """One step of a dynamic program and how it runs."""

    step: Step
    place: str                              # DEVICE or HOST (a device step may still fall back per shape)
    reason: str = ""                        # why it runs on the host
    outer: tuple[int, ...] = ()             # enclosing-module values its submodules read (host steps)
    frees: tuple[int, ...] = ()             # values dead after it
    to_device: bool = False                 # a host result a device step reads: moved right away
    built: dict = dataclasses.field(default_factory=dict)  # operand extents -> (mode, fn, shape) | reason
    host: Callable | None = None

    @property
    def static(self) -> bool:
        return not any(is_dynamic(x.shape) for x in (*self.step.inputs, self.step.ins))


def _on_device(t: Any, value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_on_device(t, v) for v in value)
    return isinstance(value, t.Tensor)


def _extents(t: Any, value: Any) -> Any:
    """A device operand's extents, hashable (torch.Size, nested for tuples); None for a value that is
    not one (its IR shape raises when the build is looked for)."""
    if isinstance(value, t.Tensor):
        return value.shape
    if isinstance(value, tuple):
        return tuple(_extents(t, v) for v in value)
    return None


def _concrete_shape(value: Any, shape: AnyShape) -> AnyShape:
    t = torch()
    if isinstance(value, t.Tensor):
        return Shape.of(shape.dtype, tuple(value.shape))  # type: ignore[union-attr]
    if isinstance(value, tuple) and isinstance(shape, TupleShape):
        return TupleShape(tuple(_concrete_shape(v, s) for v, s in zip(value, shape.elements)))
    raise CompileError(f"target 'gpu': a {type(value).__name__} value of type {shape} cannot be a device operand")


def _concrete_step(step: Step, shapes: list[AnyShape]) -> Step:
    """`step` with the given concrete input shapes and the output shape its op's rule gives for them
    (stand-in instructions outside any module: builders read shapes, ops and literals only)."""
    ins = step.ins
    inputs = [x if not is_dynamic(x.shape) else Instruction(x.op, x.inputs, s) for x, s in zip(step.inputs, shapes)]
    try:
        if ins.module_args:
            out = ins.op.compute_shape_with_modules(shapes, ins.module_args)  # type: ignore[attr-defined]
        else:
            out = ins.op.infer_shape(shapes)
    except _SHAPE_ERRORS as e:
        raise CompileError(f"target 'gpu': {ins.op} has no shape rule for inputs {shapes}: {e}") from e
    if is_dynamic(out) and not (step.kind in LOWERINGS and LOWERINGS[step.kind].sizes_output):
        # the output size depends on the data (nonzero, unique...): the host knows it
        raise CompileError(f"target 'gpu': {ins.op} has a data-dependent output shape {out}")
    return Step(step.kind, Instruction(ins.op, inputs, out, ins.module_args), inputs, dict(step.data))


def lower_dynamic(program: Program, options: CompileOptions, device: Any, host_fallback: bool,
                  tuner: Any = None, literals: Mapping[int, Any] | None = None) -> DynamicExecutable:
    """`tuner` (autotune.Tuner): how GEMM epilogues are chosen (None: the device's default).
    `literals`: device tensors already holding some literals (uid -> tensor), used instead of
    uploading them again (a segmented program's weights shared with its static prefix)."""
    main = program.main
    static = not any(is_dynamic(i.shape) for i in main.instructions if i.op.name != "@return")
    ctx = BuildContext(device)
    ctx.tuner = tuner
    runs = []
    for step in list_steps(main, patterns=static):  # the patterns read static shapes
        reason = why_host(step)
        run = Run(step, DEVICE if reason is None else HOST, reason or "")
        if run.place == DEVICE and run.static:
            try:
                entry = find_lowering(step)
                run.built[None] = (entry.mode, entry.build(ctx, step))
            except FusegraphError as e:  # the lowering rejects this op (attribute at run time, ...)
                run.place, run.reason = HOST, str(e)
        if run.place == HOST:
            if not step.ins.op.host_fallback:  # a custom op whose definition forbids it (custom/definition.py)
                raise CompileError(f"target 'gpu' cannot run {step.ins.op} on the device ({run.reason}) and its "
                                   "definition does not allow running its reference on the host (host_fallback=False)")
            if not host_fallback:
                find_lowering(step)  # today's error, naming the op, when it has no lowering at all
                raise CompileError(f"target 'gpu' cannot run {step.ins.op} on the device ({run.reason}) "
                                   "and host_fallback is off")
            run.host = host_runner(step)
        runs.append(run)
    _plan_values(main, runs)
    return DynamicExecutable(program, options, device, ctx, runs, host_fallback, literals)


def _plan_values(main: Module, runs: list[Run]) -> None:
    """Last uses (values are dropped after them) and which host results move to the device at once."""
    own = {i.uid for i in main.instructions}
    last: dict[int, int] = {}
    device_readers: set[int] = set()
    for k, run in enumerate(runs):
        run.outer = tuple(outer_reads(run.step.ins, own)) if run.place == HOST else ()
        for u in (*(x.uid for x in run.step.inputs), *run.outer):
            last[u] = k
        if run.place == DEVICE:
            device_readers.update(x.uid for x in run.step.inputs)
    keep = {o.uid for o in main.outputs}
    frees: dict[int, list[int]] = {}
    for u, k in last.items():
        if u not in keep:
            frees.setdefault(k, []).append(u)
    for k, run in enumerate(runs):
        run.frees = tuple(frees.get(k, ()))
        run.to_device = run.place == HOST and run.step.ins.uid in device_readers


class DynamicExecutable(DeviceDoor, Executable):
    """Runs a program step by step with fresh tensors per value (see the module docstring)."""

    def __init__(self, program: Program, options: CompileOptions, device: Any, ctx: BuildContext,
                 runs: list[Run], host_fallback: bool, literals: Mapping[int, Any] | None = None):
        super().__init__(program, options)
        main = program.main
        self.device, self.ctx, self.runs = device, ctx, runs
        self.host_fallback = host_fallback
        self.graph = None  # never captured
        self._lock = threading.Lock()
        self._order = RunOrder()
        self._shapes = {i.uid: i.shape for i in main.instructions}
        self._params = {p.op.param_name: p for p in main.parameters}
        self._outputs = list(main.outputs)
        read_on_device = {x.uid for r in runs if r.place == DEVICE for x in r.step.inputs}
        self._literals = {i.uid: i.literal for i in main.instructions if i.is_literal}
        uploaded = literals or {}
        self._device_literals = {u: uploaded[u] if u in uploaded else device_value(v, self._shapes[u], device)
                                 for u, v in self._literals.items() if u in read_on_device}
        self._warned: set[str] = set()
        if self.host_ops:
            warnings.warn(f"target 'gpu': {len(self.host_ops)} step(s) run on the host: "
                          f"{', '.join(sorted(set(self.host_ops)))}", HostFallbackWarning, stacklevel=2)

    # -- description --------------------------------------------------------------------------------
    @property
    def sources(self) -> dict[str, str]:
        """Generated Triton sources (they grow as steps meet new shapes)."""
        return self.ctx.sources()

    @property
    def tuning(self) -> dict[str, dict]:
        """GEMM template choices (saved as autotune.json)."""
        return self.ctx.tuning()

    @property
    def gemm_kernels(self) -> list[Any]:
        return self.ctx.gemm_kernels()

    @property
    def host_ops(self) -> list[str]:
        """Names of the ops of the steps that run on the host (known at compile time)."""
        return [r.step.ins.op.name for r in self.runs if r.place == HOST]

    def describe(self) -> list[str]:
        """One line per step: how it runs (its lowering, or on the host and why)."""
        lines = []
        for r in self.runs:
            head = f"%{r.step.ins.uid} = {r.step.kind}"
            if r.place == HOST:
                lines.append(f"{head}: host ({r.reason})")
            else:
                lines.append(f"{head}: {describe_lowering(r.step).split(': ', 1)[1]}"
                             + ("" if r.static else ", built per input shapes"))
        return lines

    # -- running ------------------------------------------------------------------------------------
    def execute(self, inputs: dict[str, Any]) -> list[Any]:
        outs = self._run(inputs)
        return [host_value(v, o.shape) for v, o in zip(outs, self._outputs)]

    def run_device(self, inputs: Mapping[str, Any], stream: Any = None, copy_outputs: bool = False,
                   checked: bool = True) -> list[Any]:
        """Torch tensors (or numpy arrays) in, device tensors out (values torch cannot hold stay
        numpy). Outputs are fresh tensors: `copy_outputs` changes nothing. Its runs wait for the
        device at their host steps anyway: indices are always checked at once (`checked`)."""
        self._run_pending_checks()
        check_input_names(inputs, self._params)
        with StreamScope(stream, self.device):
            outs = self._run({name: as_tensor(v) for name, v in inputs.items()})
        return [device_value(v, o.shape, self.device) for v, o in zip(outs, self._outputs)]

    def _run(self, inputs: dict[str, Any]) -> list[Any]:
        with self._lock, library_flags(self.device, exact=True), StreamScope(None, self.device) as stream:
            self._order.before(stream)  # its scratch and flags serve one run at a time (streams.py)
            outs = self._run_steps(inputs)
            # an index out of range: the op's ExecutionError (one read of the flags, index_checks.py)
            self.ctx.index_checks.raise_if_flagged(lambda: self._run_steps(inputs))
            self._order.after(stream)
            return outs

    def _run_steps(self, inputs: dict[str, Any]) -> list[Any]:
        env: dict[int, Any] = {p.uid: inputs[name] for name, p in self._params.items()}
        env.update(self._literals)
        env.update(self._device_literals)
        hosted: dict[int, Any] = dict(self._literals)  # host copies of device values, made once per run
        deadline = run_limits.current().deadline_at
        self.ctx.index_checks.reset()
        for run in self.runs:
            ins = run.step.ins
            if deadline is not None and time.monotonic() > deadline:
                run_limits.check_deadline(f"%{ins.uid} {ins.op.name}")
            if run.place == DEVICE:
                value = self._device_step(run, env, hosted)
            else:
                value = self._host_step(run, env, hosted)
            env[ins.uid] = value
            for u in run.frees:
                env.pop(u, None)
                hosted.pop(u, None)
        return [env[o.uid] for o in self._outputs]

    def _host_step(self, run: Run, env: dict[int, Any], hosted: dict[int, Any]) -> Any:
        def get(u: int) -> Any:
            if u not in hosted:
                hosted[u] = host_value(env[u], self._shapes[u])
            return hosted[u]

        args = [get(x.uid) for x in run.step.inputs]
        value = run.host(args, {u: get(u) for u in run.outer})  # type: ignore[misc]
        hosted[run.step.ins.uid] = value
        return device_value(value, run.step.ins.shape, self.device) if run.to_device else value

    def _device_step(self, run: Run, env: dict[int, Any], hosted: dict[int, Any]) -> Any:
        step = run.step
        t = torch()
        args = []
        for x in step.inputs:
            v = env[x.uid]
            if not _on_device(t, v):  # a host value: moved once, its host copy kept
                hosted.setdefault(x.uid, v)
                v = env[x.uid] = device_value(v, x.shape, self.device)
            args.append(v)
        # the operands' extents look the build up (IR shapes are made only when it is missing)
        key = None if run.static else tuple(_extents(t, a) for a in args)
        built = run.built.get(key)
        if built is None:
            try:
                shapes = tuple(_concrete_shape(a, x.shape) for a, x in zip(args, step.inputs))
            except CompileError:  # a sequence or an optional: not a device operand
                return self._fallback(run, env, hosted, "a host-only operand")
            built = run.built[key] = self._build(run, shapes)
        if isinstance(built, str):  # the lowering rejects these shapes: the host runs this one
            return self._host_step(run, env, hosted)
        mode, fn, *out = built
        if mode == "into":
            shape = out[0] if out else step.ins.shape
            buf = torch().empty(shape.lens, dtype=torch_dtype(shape.dtype), device=self.device)
            fn(buf, *args)
            return buf
        return fn(*args)

    def _build(self, run: Run, shapes: tuple) -> Any:
        """(mode, fn, out shape) for these concrete input shapes, or why they must run on the host."""
        try:
            concrete = _concrete_step(run.step, list(shapes))
            entry = find_lowering(concrete)
            return entry.mode, entry.build(self.ctx, concrete), concrete.ins.shape
        except FusegraphError as e:
            if not (self.host_fallback and run.step.ins.op.host_fallback):
                raise
            self._prepare_host(run, f"for input shapes {list(shapes)}: {e}")
            return str(e)

    def _prepare_host(self, run: Run, why: str) -> None:
        """Make `run` able to run on the host, warning once per op (the compile-time warning could
        not know it)."""
        if run.host is None:
            run.host = host_runner(run.step)
        name = run.step.ins.op.name
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(f"target 'gpu': {name} runs on the host {why}", HostFallbackWarning, stacklevel=5)

    def _fallback(self, run: Run, env: dict[int, Any], hosted: dict[int, Any], why: str) -> Any:
        if not (self.host_fallback and run.step.ins.op.host_fallback):
            raise CompileError(f"target 'gpu': {run.step.ins.op} reads {why} and host_fallback is off")
        self._prepare_host(run, f"(it reads {why})")
        return self._host_step(run, env, hosted)
