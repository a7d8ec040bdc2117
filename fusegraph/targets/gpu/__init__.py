"""The gpu target: NVIDIA GPUs through PyTorch as the device runtime (memory, streams, CUDA graphs,
cuBLAS and cuDNN) and Triton for the kernels it generates from the IR's scalar bodies.

    exe = program.compile(fusegraph.get_target("gpu"))     # numpy in / out
    outs = program.executable.run_device({"x": tensor})    # torch tensors (or DLPack) in / out

Pipeline: (fp16/bf16 quantization when asked) + the generic pipeline. Lowering: plan.py decides
steps, patterns and memory; lowering.py's table builds each step; executable.py runs them, captured
as one CUDA graph per compiled shape. torch and triton are imported when the target is used, never
by `import fusegraph`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...ir.program import Program
from ..base import CompileOptions, Executable, Target


class GpuTarget(Target):
    name = "gpu"

    def __init__(self, device: str | None = None, graph_mode: bool = True):
        self.device = device          # None: the current CUDA device ("cpu" runs Triton's interpreter)
        self.graph_mode = graph_mode  # capture the whole program as one CUDA graph

    def passes(self, options: CompileOptions) -> list:
        from ...passes import generic_pipeline

        pipeline = generic_pipeline()
        if options.fp16:
            from ...quantize.fp16 import quantize_fp16_pass

            pipeline = [quantize_fp16_pass, *pipeline]
        return pipeline

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        from .build import BuildContext, allocate, build_steps
        from .device import resolve_device
        from .executable import GpuExecutable
        from .lowering import storage_mode
        from .plan import make_plan

        device = resolve_device(self.device)
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


TARGET = GpuTarget()

__all__ = ["TARGET", "GpuTarget"]
