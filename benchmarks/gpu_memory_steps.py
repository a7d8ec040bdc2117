"""Where a gpu program's memory goes, step by step, next to eager torch's (issue 23's corpus rows).

    python benchmarks/gpu_memory_steps.py efficientnet_b0:32 mobilenet_v2:1 ... [--out-dir DIR]
    python benchmarks/gpu_memory_steps.py --plan-only resnext50_32x4d:32 ...   # no GPU needed

`--plan-only` gives what the plan alone decides, on any machine: the arena, the most bytes its
buffers hold at one step (the colouring's lower bound), the input buffers and the weights.

Each row (a gpu_models.py registry name and batch) is exported and compiled with fp16=True as
gpu_vs_torch.py does. Reported, in MiB above what was allocated before the build: the plan's arena
and output region, the activation allocation (arena + outputs + input buffers) and the weights; what
was allocated before and after the warm-up (the warm-up run, the GEMM tuning, the capture); and for
each run the step took (the warm-up's, the capture's) its eight steps whose allocator peak rose most
above what was allocated when they began, with what each left allocated ("peak, kept, step index,
kind and shape"). A step that keeps memory there holds a tensor of its own beside the arena (a
transient, a scratch matrix) or is the first cuBLAS call (its 33 MiB workspace on the H200). Then
eager torch on the same module: its weights and inputs, its peak, and the cuBLAS workspace it holds.
gpu_vs_torch.py's peak for fusegraph is about max(before + the largest step peak, after warm-up +
the caller's fp32 input). Writes gpu_memory_steps.json into --out-dir (default: the working dir).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks.gpu_vs_torch import build, export_onnx, memory_base  # noqa: E402
from fusegraph.targets.gpu import executable as gpu_executable  # noqa: E402

MIB = 2**20


class StepProbe:
    """Replaces GpuExecutable's step loop and warm-up with measured ones while active (host-side
    allocator counters only: nothing synchronizes, so a capture can be measured too)."""

    def __init__(self):
        self.runs: list[list[tuple[int, int, int]]] = []
        self.warm: tuple[int, int] = (0, 0)

    def __enter__(self):
        cls = gpu_executable.GpuExecutable
        self.saved = (cls._run_steps, cls.warm_up)
        probe, warm_up = self, cls.warm_up

        def run_steps(exe):
            per = []
            for k, step in enumerate(exe.steps):
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                step()
                per.append((torch.cuda.max_memory_allocated() - before, torch.cuda.memory_allocated() - before, k))
            probe.runs.append(per)

        def measured_warm_up(exe):
            before = torch.cuda.memory_allocated()
            warm_up(exe)
            probe.warm = (before, torch.cuda.memory_allocated())

        cls._run_steps, cls.warm_up = run_steps, measured_warm_up
        return self

    def __exit__(self, *exc):
        cls = gpu_executable.GpuExecutable
        cls._run_steps, cls.warm_up = self.saved


def fusegraph_row(onnx_bytes: bytes) -> dict:
    base = memory_base()
    with StepProbe() as probe:
        program = fusegraph.parse_onnx(onnx_bytes)
        program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True))
    exe = program.executable
    plan = exe.plan
    kind = {s.ins.uid: f"{s.kind} {s.ins.shape}" for s in plan.steps}
    uids = getattr(exe, "step_uids", [])
    row = {"arena": plan.arena_bytes / MIB, "outputs": plan.output_bytes / MIB,
           "activations": exe.memory[0].numel() / MIB, "weights": exe.memory[1].numel() / MIB,
           "before_warm_up": (probe.warm[0] - base) / MIB, "after_warm_up": (probe.warm[1] - base) / MIB}
    for i, per in enumerate(probe.runs):
        top = sorted(per, reverse=True)[:8]
        row[f"run{i}_steps"] = [(round(peak / MIB, 2), round(kept / MIB, 2), k,
                                 kind.get(uids[k], "release") if k < len(uids) else "?") for peak, kept, k in top]
    return row


def eager_row(name: str, batch: int) -> dict:
    timed, _, inputs, _, convnet = build(name, batch)
    fmt = torch.channels_last if convnet else torch.contiguous_format
    base = memory_base()
    model = timed.cuda().half().to(memory_format=fmt)
    args = tuple(x.cuda().half().contiguous(memory_format=fmt) if x.is_floating_point() else x.cuda() for x in inputs)
    held = torch.cuda.memory_allocated() - base
    with torch.no_grad():
        model(*args)
    torch.cuda.synchronize()
    row = {"eager_weights_inputs": held / MIB, "eager_peak": (torch.cuda.max_memory_allocated() - base) / MIB}
    allocated = torch.cuda.memory_allocated()
    torch._C._cuda_clearCublasWorkspaces()
    row["eager_cublas_workspace"] = (allocated - torch.cuda.memory_allocated()) / MIB
    return row


def plan_row(onnx_bytes: bytes) -> dict:
    """The static plan of the gpu target for the program, made without a device."""
    from fusegraph.passes.memory_coloring import Buffer, max_live
    from fusegraph.targets.gpu import GpuTarget
    from fusegraph.targets.gpu.lowering import storage_mode
    from fusegraph.targets.gpu.plan import make_plan

    program = fusegraph.parse_onnx(onnx_bytes)
    GpuTarget(device="cpu").optimize(program, fusegraph.CompileOptions(fp16=True))
    main = program.main
    plan = make_plan(main, storage_mode, stage_inputs=True)
    first: dict[int, int] = {}
    for k, step in enumerate(plan.steps):
        first.setdefault(plan.owner[step.ins.uid], k)
    by_uid = {i.uid: i for i in main.instructions}
    spans = [Buffer(u, by_uid[u].shape.bytes, first[u], max(plan.last_use.get(u, first[u]), first[u]))
             for u in plan.offsets]
    inputs = sum(p.shape.elements * plan.staged.get(p.uid, p.shape.dtype).itemsize for p in main.parameters)
    return {"arena": plan.arena_bytes / MIB, "max_live": max_live(spans) / MIB, "outputs": plan.output_bytes / MIB,
            "input_buffers": inputs / MIB, "weights": sum(i.shape.bytes for i in main.instructions if i.is_literal) / MIB,
            "steps": len(plan.steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="name:batch (gpu_models.py --list)")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--plan-only", action="store_true", help="the plan's figures alone (no GPU)")
    args = ap.parse_args()
    results = {}
    for spec in args.rows:
        name, batch = spec.split(":")
        _, export, inputs, names, _ = build(name, int(batch))
        if args.plan_only:
            results[spec] = plan_row(export_onnx(export, inputs, names))
            print(spec, {k: round(v, 1) for k, v in results[spec].items()}, flush=True)
            continue
        row = fusegraph_row(export_onnx(export, inputs, names))
        torch.cuda.empty_cache()
        row.update(eager_row(name, int(batch)))
        results[spec] = row
        print(spec, json.dumps(row, indent=1), flush=True)
        (Path(args.out_dir) / "gpu_memory_steps.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
