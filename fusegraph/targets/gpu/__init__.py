"""The gpu target: NVIDIA GPUs through PyTorch as the device runtime (memory, streams, CUDA graphs,
cuBLAS and cuDNN) and Triton for the kernels it generates from the IR's scalar bodies.

    exe = program.compile(fusegraph.get_target("gpu"))     # numpy in / out
    outs = program.executable.run_device({"x": tensor})    # torch tensors (or DLPack) in / out

Pipeline: the generic pipeline (after quantize_fp16 when options.fp16, as on every target). Lowering, three modes:

* static (the fast path): every shape static, every step lowered to the device. plan.py decides
  steps, patterns and memory; lowering.py's table builds each step; executable.py runs them over
  one arena, captured as one CUDA graph per compiled shape.
* dynamic (dynamic.py): everything else, i.e. run-time shapes (dynamic dims, data-dependent outputs)
  and steps that run on the host (host.py: ops without a gpu lowering, lowerings that reject an
  instance, dtypes torch has no tensor type for). Values are allocated per run; no graph capture.
* segmented (segmented.py): a program the static mode cannot take whole whose static prefix holds
  the work (a detector ending in NonMaxSuppression): the prefix in the static mode, the rest in the
  dynamic mode on the prefix's device outputs. A small prefix leaves the whole program dynamic.

`GpuTarget(host_fallback=False)` refuses host steps with a CompileError naming the op; with the
default, a program with host steps compiles with one HostFallbackWarning naming those ops, and
`executable.describe()` / `executable.host_ops` show which steps run where. torch and triton are
imported when the target is used, never by `import fusegraph`.

GEMM epilogues (autotune.py): `GpuTarget(gemm="auto")` times the Triton template's configs against
cuBLAS + the pointwise kernel for each matmul with a fused reader, once per machine (an on-disk
cache); on a CPU device nothing is timed and "auto" takes the library. "triton" / "library" force
one side (tests; FUSEGRAPH_GPU_GEMM sets the default for debugging). `CompileOptions.exhaustive_tune`
widens the config search. The choices are on `executable.tuning`, saved as autotune.json in a .fgx
and reused, untimed, when it is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...ir.program import Program
from ...profile import phases
from ..base import CompileOptions, Executable, Target
from . import ops_quant  # noqa: F401  (registers the quantized product ops a compiled file's IR may hold)


class GpuTarget(Target):
    name = "gpu"
    specializes = True  # dynamic input dims: one static compile per input shape (targets/specialize.py)
    specializes_values = True  # an integer input deciding an `if` (a sample rate): one static compile per value

    def __init__(self, device: str | None = None, graph_mode: bool = True, host_fallback: bool = True,
                 gemm: str | None = None):
        from ... import debug
        from .autotune import checked_mode

        self.device = device          # None: the current CUDA device ("cpu" runs Triton's interpreter)
        self.graph_mode = graph_mode  # capture the whole program as one CUDA graph (static mode)
        self.host_fallback = host_fallback  # run steps the device cannot run on the host
        self.gemm = checked_mode(gemm or debug.gpu_gemm() or "auto")  # GEMM epilogues: "auto" | "triton" | "library"

    def passes(self, options: CompileOptions) -> list:
        from ...passes import eliminate_dead_code, generic_pipeline
        from .bias_after_reshape import bias_after_reshape
        from .gather_views import gather_views
        from .merge_sibling_dots import merge_sibling_dots
        from .pointwise_after_transpose import pointwise_after_transpose
        from .rewrite_quantized import rewrite_quantized
        from .sink_concat import sink_concat

        # (Target.compile puts quantize_fp16 first when options.fp16)
        return [rewrite_quantized, gather_views, *generic_pipeline(before_fusion=(
            bias_after_reshape, eliminate_dead_code, merge_sibling_dots, sink_concat, pointwise_after_transpose,
            eliminate_dead_code))]

    def optimize(self, program: Program, options: CompileOptions, manager: Any = None) -> None:
        if self.device is None or str(self.device).startswith("cuda"):  # (no torch import: a plan needs none)
            from .kernels import set_up_triton

            set_up_triton()  # in the background, while the passes run (GPT-2 on the H200: 1.4 s)
        super().optimize(program, options, manager)

    def lower(self, program: Program, options: CompileOptions) -> Executable:
        from .device import resolve_device

        if resolve_device(self.device).type == "cuda":
            from .kernels import set_up_triton

            set_up_triton()  # (begun in the passes, unless they were skipped)
        return self._lower(program, options, {})

    def memory_capacity(self) -> int:
        """The device's memory (weights and arena live there); the host's RAM on Triton's interpreter."""
        from .device import resolve_device, torch

        device = resolve_device(self.device)
        if device.type == "cuda":
            return int(torch().cuda.get_device_properties(device).total_memory)
        return super().memory_capacity()

    def _lower(self, program: Program, options: CompileOptions, recorded: Mapping[str, dict]) -> Executable:
        from ...errors import CompileError
        from .autotune import Tuner
        from .device import resolve_device
        from .dynamic import lower_dynamic

        device = resolve_device(self.device)
        tuner = Tuner.for_device(device, self.gemm, options.exhaustive_tune, recorded)
        if _fits_static(program):
            try:
                return self._lower_static(program, options, device, tuner)
            except CompileError:
                if not self.host_fallback:
                    raise
                # some lowering rejects its instruction: the dynamic mode finds which and hosts it
        else:
            segmented = self._lower_segmented(program, options, device, tuner)
            if segmented is not None:
                return segmented
        return lower_dynamic(program, options, device, self.host_fallback, tuner)

    def _lower_segmented(self, program: Program, options: CompileOptions, device, tuner) -> Executable | None:
        """The static prefix in the static mode and the rest in the dynamic mode (segmented.py), or
        None when the prefix is not worth it or one of its lowerings rejects its instruction."""
        from ...errors import CompileError
        from .dynamic import lower_dynamic
        from .segmented import SegmentedExecutable, split_program

        split = split_program(program.main)
        if split is None:
            return None
        try:
            prefix = self._lower_static(split.prefix, options, device, tuner)
        except CompileError:
            return None  # as for a whole program: the dynamic mode finds the step and hosts it
        shared = split.shared_literals(prefix.literal_tensors)
        rest = lower_dynamic(split.rest, options, device, self.host_fallback, tuner, literals=shared)
        return SegmentedExecutable(program, options, split, prefix, rest)

    def _lower_static(self, program: Program, options: CompileOptions, device, tuner) -> Executable:
        from .contexts import build_static

        with phases.recording() as log:  # where the compile's time goes: `fusegraph trace`, Executable.compile_log
            exe = build_static(program, options, device, tuner, self.graph_mode)
        exe.tuning_times = {k: tuner.timings[k] for k in exe.tuning if k in tuner.timings}  # timed by this compile
        exe.compile_log = sorted(log.spans, key=lambda s: s[2])
        return exe

    def export_artifacts(self, executable: Executable) -> dict[str, bytes]:
        sources: dict[str, str] = getattr(executable, "sources", {})
        out = {f"triton/{name}.py": src.encode() for name, src in sorted(sources.items())}
        tuning: dict[str, dict] = getattr(executable, "tuning", {})
        if tuning:
            out["autotune.json"] = json.dumps(tuning, indent=1, sort_keys=True).encode()
        from .binaries import export_binaries

        out.update(export_binaries(sources, getattr(executable, "gemm_kernels", ())))
        return out

    def load(self, program: Program, options: CompileOptions, artifacts: Mapping[str, memoryview], *,
             trusted: bool = False) -> Executable:
        # Kernels are regenerated from the IR (the saved sources document what ran); a signed file's
        # saved binaries serve as Triton's cache meanwhile (binaries.py), so none is compiled again on
        # the same Triton and GPU architecture. An unsigned file's binaries are never run: nothing ties
        # a cubin to its source but the writer's word. Recorded GEMM choices are reused, not timed
        # again: each names one of the candidates generated here for its GEMM, or is ignored.
        from .autotune import read_recorded
        from .binaries import saved_kernels
        from .device import resolve_device

        recorded = read_recorded(artifacts.get("autotune.json"))
        with saved_kernels(artifacts if trusted else {}, resolve_device(self.device)):
            return self._lower(program, options, recorded)


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
