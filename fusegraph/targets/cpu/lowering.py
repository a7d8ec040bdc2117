"""The cpu target's lowering table: op name -> kernel factory.

A kernel is `fn(args, out) -> array`: `args` are the input arrays, `out` a preallocated output
buffer (a view into the arena) or None; a kernel may return `out` or an array of its own.
Every op the cpu target runs is listed here — by name for the fast kernels, by kind or name for
the ops whose numpy reference is the kernel (views, indexing, control flow). An op in neither list
is a CompileError naming it: never a silent slow path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import CompileError, FusegraphError
from ...ir.builtin import Literal, Param, Return
from ...ir.module import Instruction, Module
from ...ir.op import OpKind
from ...ir.shape import Shape, from_nothing
from ...passes.memory_coloring import is_view
from ..base import CompileOptions
from ..ref.interpreter import failed
from .executable import ModuleSteps, Step, output_buffer

Kernel = Callable[[list, Any], Any]


@dataclasses.dataclass
class LowerContext:
    options: CompileOptions
    threads: int
    deferred: list = dataclasses.field(default_factory=list)  # callbacks run once every kernel is known
    kernel_sources: list = dataclasses.field(default_factory=list)  # generated C, built as one library
    library: Any = None
    scratch: Any = None  # kernels/winograd.WinogradScratch: the program's one, made by its first step

    def const(self, ins: Instruction) -> np.ndarray | None:
        return ins.literal if ins.is_literal else None

    def threads_for(self, flops: float) -> int:
        """Threads for a library kernel of `flops`: one below FORK_WORK, where handing work to the
        other workers costs more than splitting it saves."""
        return 1 if flops < FORK_WORK else self.threads

    def finish(self) -> None:
        """Build the generated kernels (one library), then run the deferred callbacks."""
        if self.kernel_sources:
            from .codegen import build_library

            self.library = build_library(self.kernel_sources, threads=self.threads)
        for cb in self.deferred:
            cb()


LOWERINGS: dict[str, Callable[[Instruction, LowerContext], Kernel]] = {}
# FLOPs under which a product is too small for a library call (recurrent.py's input projections).
# It was the one-thread bound too: with workers asleep between kernels (OMP_WAIT_POLICY
# passive) waking them cost more than splitting saved up to ~30 MFLOP; now that they spin between
# kernels (cpu/__init__.py) splitting pays from about 1 MFLOP. On the 2-core VM with libgomp's
# defaults (benchmarks/cpu_vs_ort.py, 30 runs, two runs of each), going from 30e6 to 1e6: YOLOv8n
# (nudenet) 16.7-17.0 -> 13.3-14.7 ms, ResNet-50 34.3 -> 32.0-32.3 ms, MiniLM 15.4 -> 15.2-15.4 ms.
SMALL_WORK = 1e6
# FLOPs under which a library kernel (oneDNN) runs on the calling thread. Between kernels this small
# libgomp's workers have gone to sleep (GOMP_SPINCOUNT, openmp.py), and a fork waits for one to wake
# and get a core: on the 2-core VM with one busy-looping process, kernels of 1-4 MFLOP forked on two
# threads took grouped_cnn 0.28 ms a run against 0.04 on one, ssd_detector 0.73 against 0.28,
# unet_segmenter 0.80 against 0.29; quiet, the fork saved nothing there either (ssd 0.35 against
# 0.28). YOLOv8n (nudenet 320²) has 2 of its 75 library kernels in that range (5 of 2026 MFLOP).
FORK_WORK = 4e6

# Ops whose numpy reference is the right cpu kernel: numpy's own copies, gathers and views, and
# control flow, which runs its submodules through the interpreter.
REFERENCE_KINDS = frozenset({OpKind.MOVEMENT, OpKind.OPAQUE, OpKind.CONTROL})
REFERENCE_OPS = frozenset({
    "reduce_dynamic", "einsum", "quant_dot", "det", "causal_conv_with_state",
    "deform_convolution", "max_pooling_indices", "quantize_linear", "dequantize_linear", "moments",
    "deconvolution", "reduce_prod",
})


def lowering(*names: str):
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn

    return deco


def reference_kernel(ins: Instruction, ctx: LowerContext) -> Kernel:
    op = ins.op
    if ins.module_args:
        from ..ref.interpreter import run_module

        subs = ins.module_args

        def control(args, out, env):
            r = op.compute_control(args, subs, lambda m, p: run_module(m, p, env))
            # a planned result (a fused_reduce the generator left to numpy) lives in its buffer: the
            # views of it the executable made once read that buffer, not what the interpreter returned
            if out is None:
                return r
            np.copyto(out, r)
            return out

        control.needs_env = True  # type: ignore[attr-defined]
        return control
    compute = op.compute
    # numpy may answer with a view of an input (a slice, a squeeze); unless the plan knows the op
    # for a view, the input's buffer may be reused while the result is still read: it is copied
    own = not is_view(ins)

    def run(args, out):
        try:
            r = compute(args)
        except FusegraphError:
            raise
        except Exception as e:  # the reference failed on these values: the ref target's error, naming the op
            raise failed(op, args, e) from e
        if out is None:  # numpy reductions of 0-d values give numpy scalars; kernels take arrays
            if isinstance(r, np.generic):
                return np.asarray(r)
            return r.copy() if own and isinstance(r, np.ndarray) and r.base is not None else r
        # A planned buffer is the result's home: numpy's result may be a view of an input (a slice,
        # a squeeze) whose buffer the plan frees after this step, so it is copied in.
        if isinstance(out, tuple):  # a tuple's elements planned (plan_memory.TUPLE_WRITERS)
            return tuple(v if o is None else _into(o, v) for o, v in zip(out, r))
        return _into(out, r)

    return run


def _into(out: np.ndarray, r: Any) -> np.ndarray:
    np.copyto(out, r)
    return out


def lower_instruction(ins: Instruction, ctx: LowerContext) -> Kernel:
    if isinstance(ins.shape, Shape) and not ins.shape.is_dynamic and ins.shape.elements == 0:
        # an empty value: no kernel runs (the generated reductions wrote past the empty buffer of a
        # LayerNorm or InstanceNorm over a batch of 0: heap corruption, found by valgrind)
        return _nothing(ins)
    # a value made out of an empty input (a reduction over an axis of length 0, a product over
    # K = 0): the reference computes what ONNX defines there; the generated reductions left such an
    # output unwritten (ReduceMax over [2, 0] gave the arena's old bytes), oneDNN refused the shapes
    if ins.op.kind is not OpKind.MOVEMENT and from_nothing(ins.shape, [x.shape for x in ins.inputs]):
        return reference_kernel(ins, ctx)
    factory = LOWERINGS.get(ins.op.name)
    if factory is not None:
        return factory(ins, ctx)
    if ins.op.kind in REFERENCE_KINDS or ins.op.name in REFERENCE_OPS:
        return reference_kernel(ins, ctx)
    raise CompileError(f"cpu target: no kernel for {ins.op} (an op of kind {ins.op.kind.value})")


def _nothing(ins: Instruction) -> Kernel:
    """The kernel of an instruction whose value has no element: its planned (empty) buffer, or a new
    empty array."""
    lens, dtype = ins.shape.lens, ins.shape.dtype.np

    def run(args, out):
        return out if out is not None else np.empty(lens, dtype)

    return run


def lower_module(module: Module, ctx: LowerContext) -> ModuleSteps:
    """`module`'s instructions as kernel steps into its memory plan's buffers (a body is planned
    here), its literals as constants. Constant movement steps are folded once `ctx.finish()` built
    the kernels."""
    from ..ref.interpreter import last_uses
    from .passes.plan_memory import plan_memory

    if module.memory_plan is None:  # a control-flow body (passes plan the main module only)
        plan_memory(module, body=True)
    frees = last_uses(module)
    keep = {i.uid for i in module.outputs}
    steps, constants = [], {}
    for pos, ins in enumerate(module.instructions):
        if isinstance(ins.op, Literal):
            constants[ins.uid] = ins.op.value
        if isinstance(ins.op, (Param, Literal, Return)):
            continue
        fn = lower_instruction(ins, ctx)
        dead = tuple(u for u in frees.get(pos, ()) if u not in keep)
        view = ins.shape if is_view(ins) and len(ins.inputs) == 1 and isinstance(ins.shape, Shape) else None
        steps.append(Step(fn, tuple(i.uid for i in ins.inputs), ins.uid, dead,
                          output_buffer(ins, module.memory_plan), getattr(fn, "needs_env", False), ins.op.name,
                          view))
    lowered = ModuleSteps(module, steps, constants, module.memory_plan.arena_bytes)
    ctx.deferred.append(lowered.fold_constants)
    return lowered
