"""The gpu target: NVIDIA GPUs through PyTorch as the device runtime (memory, streams, CUDA graphs,
cuBLAS and cuDNN) and Triton for the kernels it generates from the IR's scalar bodies.

    exe = program.compile(fusegraph.get_target("gpu"))     # numpy in / out
    outs = program.executable.run_device({"x": tensor})    # torch tensors (or DLPack) in / out

Pipeline: (fp16/bf16 quantization when asked) + the generic pipeline. Lowering, two modes:

* static (the fast path): every shape static, every step lowered to the device. plan.py decides
  steps, patterns and memory; lowering.py's table builds each step; executable.py runs them over
  one arena, captured as one CUDA graph per compiled shape.
* dynamic (dynamic.py): everything else, i.e. run-time shapes (dynamic dims, data-dependent outputs)
  and steps that run on the host (host.py: ops without a gpu lowering, lowerings that reject an
  instance, dtypes torch has no tensor type for). Values are allocated per run; no graph capture.

`GpuTarget(host_fallback=False)` refuses host steps with a CompileError naming the op; with the
default, a program with host steps compiles with one HostFallbackWarning naming those ops, and
`executable.describe()` / `executable.host_ops` show which steps run where. torch and triton are
imported when the target is used, never by `import fusegraph`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...ir.program import Program
from ..base import CompileOptions, Executable, Target


class GpuTarget(Target):
    name = "gpu"

    def __init__(self, device: str | None = None, graph_mode: bool = True, host_fallback: bool = True):
        self.device = device          # None: the current CUDA device ("cpu" runs Triton's interpreter)
        self.graph_mode = graph_mode  # capture the whole program as one CUDA graph (static mode)
        self.host_fallback = host_fallback  # run steps the device cannot run on the host

    def passes(self, options: CompileOptions) -> list:
        from ...passes import generic_pipeline

        pipeline = generic_pipeline()
        if options.fp16:
            from ...quantize.fp16 import quantize_fp16_pass

            pipeline = [quantize_fp16_pass, *pipeline]
        return pipeline

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        from ...errors import CompileError
        from .device import resolve_device
        from .dynamic import lower_dynamic

        device = resolve_device(self.device)
        if _fits_static(program):
            try:
                return self._lower_static(program, options, device)
            except CompileError:
                if not self.host_fallback:
                    raise
                # some lowering rejects its instruction: the dynamic mode finds which and hosts it
        return lower_dynamic(program, options, device, self.host_fallback)

    def _lower_static(self, program: Program, options: CompileOptions, device) -> Executable:
        from .build import BuildContext, allocate, build_steps
        from .executable import GpuExecutable
        from .lowering import storage_mode
        from .plan import make_plan

        main = program.main
        plan = make_plan(main, storage_mode)
        ctx = BuildContext(device)
        slots, activations, weights = allocate(plan, main, device)
        activations.zero_()  # inputs start as zeros: the warm-up run reads valid indices
        outputs = {plan.owner[o.uid] for o in main.outputs if o.uid in plan.owner}
        steps = build_steps(plan, ctx, slots, outputs)
        exe = GpuExecutable(program, options, device, steps, slots, (activations, weights),
                            self.graph_mode, {}, fp32_exact=True)
        exe.plan = plan
        exe.warm_up()
        for k in ctx.kernels:
            exe.sources.update(k.sources)
        return exe

    def export_artifacts(self, executable: Executable) -> dict[str, bytes]:
        sources: dict[str, str] = getattr(executable, "sources", {})
        return {f"triton/{name}.py": src.encode() for name, src in sorted(sources.items())}

    def load(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview]) -> Executable:
        # Kernels are regenerated from the IR (the saved sources document what ran; Triton's on-disk
        # cache makes recompiling them cheap).
        return self.lower(program, options)


def _fits_static(program: Program) -> bool:
    """Whether the static mode may take `program`: static shapes, device types and a lowering for
    every step (a lowering may still reject its instruction when built)."""
    from .host import device_type_ok, why_host
    from .plan import is_dynamic, list_steps

    main = program.main
    for ins in main.instructions:
        if ins.op.name != "@return" and (not device_type_ok(ins.shape) or is_dynamic(ins.shape)):
            return False
    return all(why_host(step) is None for step in list_steps(main))


TARGET = GpuTarget()

__all__ = ["TARGET", "GpuTarget"]
