"""Building a static gpu executable, and execution contexts: more executables of one compiled program.

A context shares its parent's plan, weight allocation (the literals' slots, so no second copy of the
weights), generated Triton kernels (load_kernel imports each source once per process, and Triton
keeps the compiled binaries per kernel) and GEMM choices (given to its tuner as recorded: nothing is
timed again). It owns what a run writes: the input, arena and output buffers (one activation
allocation), its steps' scratch buffer and index-check flags, its CUDA graph and its stream
(streams.py). Contexts run at once from several threads, each on its stream; one context's runs
are ordered on the device (streams.RunOrder).

Contexts are made before serving: each captures its CUDA graph when made, and a capture must not
meet other threads' allocations (torch's capture mode "global"); they are made one at a time.
"""

from __future__ import annotations

import threading
from typing import Any

from ...ir.program import Program
from ...profile import phases
from ..base import CompileOptions
from .build import BuildContext, allocate, allocate_activations, build_steps
from .executable import GpuExecutable
from .lowering import storage_mode, writes_in_place
from .plan import make_plan
from .workspace import leaves_cublas_out

_making = threading.Lock()  # one context built (and captured) at a time in the process


def build_static(program: Program, options: CompileOptions, device: Any, tuner: Any, graph_mode: bool,
                 shared: GpuExecutable | None = None) -> GpuExecutable:
    """The static-mode executable of `program`, warmed up (kernels compiled, GEMMs tuned, the graph
    captured); with `shared`, a context of that executable (its plan and weights)."""
    main = program.main
    ctx = BuildContext(device)
    ctx.tuner = tuner
    if shared is None:
        with phases.span("plan and weights"):
            plan = make_plan(main, storage_mode, stage_inputs=True, in_place=writes_in_place)
            slots, activations, weights = allocate(plan, main, device)
        own = activations.numel() * activations.element_size() + weights.numel() * weights.element_size()
        if tuner.mode == "auto" and leaves_cublas_out(plan.steps, own, device):
            tuner = tuner.templates_only()  # cuBLAS's workspace would outweigh the program (workspace.py)
            ctx.tuner = tuner
    else:
        plan = shared.plan
        slots, activations = allocate_activations(plan, main, device)
        slots.update({i.uid: shared._slots[i.uid] for i in main.instructions if i.is_literal})
        weights = shared.memory[1]
    activations.zero_()  # inputs start as zeros: the warm-up run reads valid indices
    outputs = {plan.owner[o.uid] for o in main.outputs if o.uid in plan.owner}
    with phases.span("lower steps"):
        steps, step_uids = build_steps(plan, ctx, slots, outputs)
    exe = GpuExecutable(program, options, device, steps, slots, (activations, weights), graph_mode, {},
                        fp32_exact=True, index_checks=ctx.index_checks)
    exe.step_uids = step_uids
    exe.plan = plan
    exe.tuner = tuner
    exe.literal_tensors = {i.uid: slots[i.uid].t for i in main.instructions if i.is_literal}
    exe.warm_up()  # GEMM epilogues are autotuned here, at their first run
    exe.sources.update(ctx.sources())
    exe.tuning = ctx.tuning()
    exe.gemm_kernels = ctx.gemm_kernels()
    return exe


def make_context(exe: GpuExecutable) -> GpuExecutable:
    """A new execution context of the static executable `exe` (see the module docstring)."""
    from .autotune import Tuner

    exe._run_pending_checks()  # a loaded file's weights are checked once, before a context reads them
    parent = exe.tuner
    tuner = Tuner.for_device(exe.device, parent.mode, parent.exhaustive, {**parent.recorded, **exe.tuning})
    with _making:
        new = build_static(exe.program, exe.options, exe.device, tuner, exe.graph_mode, shared=exe)
    new.peak_memory = exe.peak_memory
    new.tuning_times = {}
    return new
