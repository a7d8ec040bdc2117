"""Building a gpu executable's steps: device memory (one activation allocation holding the arena, the
output region and the input buffers; one packed weight allocation), a Slot per value, and one run
closure per step from the lowering table."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.dtypes import DType
from ...ir.module import Instruction, Module
from ...ir.shape import Shape
from ...passes.memory_coloring import ALIGNMENT
from .device import has_torch_dtype, host_tensor, to_device, torch, torch_dtype
from .index_checks import IndexChecks
from .layout import dense_strides
from .lowering import Slot, find_lowering, storage_mode
from .plan import ARENA, LITERAL, OUTPUT, PARAM, SLICE, VIEW, Plan, make_plan


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class BuildContext:
    """What lowering builders see: torch, the device, build-time constants and kernel launchers."""

    def __init__(self, device: Any):
        self.torch = torch()
        self.device = device
        self.kernels: list[Any] = []  # Triton launchers (their sources are saved with the program)
        self.tuner: Any = None  # autotune.Tuner choosing GEMM templates (None: a default for the device)
        self.index_checks = IndexChecks(device)  # the indexing steps' error flags (index_checks.py)
        self.shared: dict[Any, dict] = {}  # what steps of one run share (lower_attention.shared_mask)
        self._scratch: Any = None

    def sources(self) -> dict[str, str]:
        """The generated kernels' sources (name -> text) of every launcher built so far."""
        return {name: src for k in self.kernels for name, src in k.sources.items()}

    def tuning(self) -> dict[str, dict]:
        """The GEMM choices (problem -> choice) of every autotuned step built so far."""
        return {key: c for k in self.kernels for key, c in getattr(k, "tuning", {}).items()}

    def gemm_kernels(self) -> list[Any]:
        """The compiled kernels of the chosen GEMM templates of every autotuned step built so far."""
        return [kernel for k in self.kernels for kernel in getattr(k, "gemm_kernels", ())]

    def scratch(self, lens: tuple[int, ...], dtype: Any) -> Any:
        """A temporary of `lens` and torch `dtype` over the executable's one scratch buffer, which
        every step needing a temporary shares (steps run one at a time, and a step's temporary is
        dead when it ends). Call it on each run: the buffer grows during the warm-up run, so it is
        final before the graph is captured. One buffer per step kept a matmul result per layer:
        12 x 24 MiB for BERT-base at batch 32, about its measured peak's rise from 345 to 615 MiB."""
        t = self.torch
        n = max(1, math.prod(lens) * dtype.itemsize)
        if self._scratch is None or self._scratch.numel() < n:
            self._scratch = t.empty(n, dtype=t.uint8, device=self.device)
        return self._scratch[:n].view(dtype).view(lens)

    def constant(self, value: np.ndarray) -> Any:
        """A small build-time array (index maps, divisors) on the device."""
        value = np.asarray(value)
        return to_device(value, DType.from_numpy(value.dtype), self.device)

    def submodule_runner(self, body: Module) -> Callable:
        """Run `body` op by op with the lowering table (buffers allocated per run)."""
        return EagerModule(self, body)


class EagerModule:
    """A submodule evaluated step by step, each value a fresh tensor: the fallback for fused bodies
    the kernel generator does not take."""

    def __init__(self, ctx: BuildContext, module: Module):
        self.plan = make_plan(module, storage_mode)
        self.module = module
        self.runs = []
        for step in self.plan.steps:
            entry = find_lowering(step)
            self.runs.append((step, entry.mode, entry.build(ctx, step)))
        self.params = [p.uid for p in module.parameters]
        self.literals = {i.uid: ctx.constant(i.literal) for i in module.instructions if i.is_literal}

    def __call__(self, out: Any, *inputs: Any) -> None:
        t = torch()
        env: dict[int, Any] = dict(zip(self.params, inputs))
        env.update(self.literals)
        for step, mode, run in self.runs:
            args = [env[x.uid] for x in step.inputs]
            if mode == "into":
                shape = step.ins.shape
                buf = t.empty(shape.lens, dtype=torch_dtype(shape.dtype), device=out.device)
                run(buf, *args)
                env[step.ins.uid] = buf
            else:
                env[step.ins.uid] = run(*args)
        out.copy_(env[self.module.outputs[0].uid])


def allocate(plan: Plan, module: Module, device: Any) -> tuple[dict[int, Slot], Any, Any]:
    """Slots of params, literals and arena/output buffers; the activation and weight allocations."""
    slots, activations = allocate_activations(plan, module, device)
    weight_slots, weights = allocate_weights(plan, module, device)
    slots.update(weight_slots)
    return slots, activations, weights


def _view(plan: Plan, storage: Any, offset: int, ins: Instruction, dtype: DType | None = None) -> Any:
    """`ins`'s tensor at `offset` of `storage` (channels-last where the plan says), of `dtype` if
    given (a staged input's), else of its own type."""
    shape = ins.shape
    dtype = dtype or shape.dtype
    order = plan.layouts.get(ins.uid, tuple(range(shape.ndim)))
    strides = dense_strides(shape.lens, order)
    flat = storage[offset:offset + max(shape.elements * dtype.itemsize, 0)].view(torch_dtype(dtype))
    return flat.as_strided(shape.lens, strides)


def allocate_activations(plan: Plan, module: Module, device: Any) -> tuple[dict[int, Slot], Any]:
    """Slots of params and arena/output buffers over one new activation allocation (what each
    execution context has of its own)."""
    t = torch()
    by_uid = {i.uid: i for i in module.instructions}
    params = [i for i in module.instructions if i.is_param]
    input_offsets, n_in = {}, 0
    for p in params:
        _check_tensor_type(p)
        input_offsets[p.uid] = n_in
        n_in += _align(p.shape.elements * plan.staged.get(p.uid, p.shape.dtype).itemsize)
    base_out = plan.arena_bytes
    base_in = base_out + plan.output_bytes
    activations = t.empty(max(base_in + n_in, 1), dtype=t.uint8, device=device)
    slots: dict[int, Slot] = {}
    for uid, offset in plan.offsets.items():
        slots[uid] = Slot(_view(plan, activations, offset, by_uid[uid]))
    for uid, offset in plan.output_offsets.items():
        slots[uid] = Slot(_view(plan, activations, base_out + offset, by_uid[uid]))
    for p in params:
        slots[p.uid] = Slot(_view(plan, activations, base_in + input_offsets[p.uid], p, plan.staged.get(p.uid)))
    for uid, (concat, axis, start) in plan.slices.items():  # concat inputs written in place
        slots[uid] = Slot(slots[concat].t.narrow(axis, start, by_uid[uid].shape.lens[axis]))
    return slots, activations


def allocate_weights(plan: Plan, module: Module, device: Any) -> tuple[dict[int, Slot], Any]:
    """Slots of the literals over one weight allocation, copied in from the host (shared by every
    execution context of an executable)."""
    t = torch()
    slots: dict[int, Slot] = {}
    literals = [i for i in module.instructions if i.is_literal and has_torch_dtype(i.shape.dtype)]
    offsets, n_w = {}, 0
    for lit in literals:
        offsets[lit.uid] = n_w
        n_w += _align(lit.shape.bytes)
    weights = t.empty(max(n_w, 1), dtype=t.uint8, device=device)
    for lit in literals:
        dst = _view(plan, weights, offsets[lit.uid], lit)
        dst.copy_(host_tensor(lit.literal, lit.shape.dtype).reshape(lit.shape.lens))  # one host-to-device copy
        slots[lit.uid] = Slot(dst)
    for i in module.instructions:
        if i.is_literal and i.uid not in slots:
            slots[i.uid] = Slot(None)  # no device type (strings, 4-bit): an error if a step reads it
    return slots, weights


def _check_tensor_type(ins: Instruction) -> None:
    if not isinstance(ins.shape, Shape) or not has_torch_dtype(ins.shape.dtype):
        raise CompileError(f"target 'gpu': {ins.op} of type {ins.shape} has no device tensor type")


def build_steps(plan: Plan, ctx: BuildContext, slots: dict[int, Slot],
                outputs: set[int]) -> tuple[list[Callable[[], None]], list[int | None]]:
    """The closures to run in order: one per step (none for views fixed at build time), each
    transient released right after the last step that reads it (program outputs are kept); and
    beside each, the uid of the instruction it computes (None for a release), for profiles."""
    releases: dict[int, list[Slot]] = {}
    per_step: list[list[Callable[[], None]]] = []
    for k, step in enumerate(plan.steps):
        fn = find_lowering(step).build(ctx, step)
        for x in step.inputs:
            if plan.storage.get(x.uid) == LITERAL and slots[x.uid].t is None:
                raise CompileError(f"target 'gpu': {step.ins.op} reads a {x.shape} literal, which has no device type")
        ins_slots = [slots[x.uid] for x in step.inputs]
        uid = step.ins.uid
        mode = plan.storage[uid]
        if mode in (ARENA, OUTPUT, SLICE):
            per_step.append([_into(fn, slots[uid].t, ins_slots)])
            continue
        slot = slots.setdefault(uid, Slot())
        if mode == VIEW and ins_slots[0].t is not None and _fixed(plan, step.inputs[0]):
            base = ins_slots[0].t
            v = fn(*[s.t for s in ins_slots])
            if _aliases(v, base):  # a true view of fixed memory: nothing to run
                slot.t = v
                per_step.append([])
                continue
        per_step.append([_value(fn, slot, ins_slots)])
        owner = plan.owner[uid]
        if owner not in outputs:
            releases.setdefault(max(plan.last_use.get(owner, k), k), []).append(slot)
    steps: list[Callable[[], None]] = []
    uids: list[int | None] = []
    if ctx.index_checks.ops:  # the run (and so the captured graph) starts by clearing the flags
        steps.append(ctx.index_checks.reset)
        uids.append(None)
    for k, runs in enumerate(per_step):
        steps.extend(runs)
        uids.extend([plan.steps[k].ins.uid] * len(runs))
        done = releases.get(k, ())
        steps.extend(_release(s) for s in done)
        uids.extend([None] * len(done))
    return steps, uids


def _fixed(plan: Plan, x: Instruction) -> bool:
    """Whether `x` lives in memory fixed at build time (so a view of it can be made once)."""
    return plan.storage.get(plan.owner.get(x.uid, -1)) in (ARENA, OUTPUT, PARAM, LITERAL, SLICE)


def _aliases(v: Any, base: Any) -> bool:
    t = torch()
    return isinstance(v, t.Tensor) and v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def _into(fn, out, ins_slots):
    if len(ins_slots) == 1:
        a = ins_slots[0]
        return lambda: fn(out, a.t)
    if len(ins_slots) == 2:
        a, b = ins_slots
        return lambda: fn(out, a.t, b.t)
    return lambda: fn(out, *[s.t for s in ins_slots])


def _value(fn, slot, ins_slots):
    def run():
        slot.t = fn(*[s.t for s in ins_slots])
    return run


def _release(slot):
    def run():
        slot.t = None
    return run
