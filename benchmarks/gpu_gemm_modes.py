"""fusegraph's gpu target against itself with each GEMM mode (`GpuTarget(gemm=...)`: "auto" times
cuBLAS against the Triton templates, except in programs smaller than cuBLAS's workspace
(targets/gpu/workspace.py, whose figures this script measured before that rule existed); "triton"
leaves cuBLAS out unless no template builds; "library" takes cuBLAS), on
issue 23's corpus rows: latency (CUDA events, alternating), the allocator's peak while compiling and
running once (gpu_vs_torch.memory_base; cuBLAS's workspace is 33 MiB on the H200) and the error
against the fp32 torch module. What a rule for leaving cuBLAS out is decided on.

    python benchmarks/gpu_gemm_modes.py --rows mobilenet_v2:1,lraspp_mobilenet_v3:1 [--modes auto,triton]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks.gpu_vs_torch import build, export_onnx, memory_base, rel_err, time_alternating  # noqa: E402
from fusegraph.targets.gpu import GpuTarget  # noqa: E402


def row(name: str, batch: int, modes: list[str]) -> dict:
    timed, export, inputs, names, _ = build(name, batch)
    onnx_bytes = export_onnx(export, inputs, names)
    dev = torch.device("cuda")
    with torch.no_grad():
        ref = timed.to(dev)(*[x.to(dev) for x in inputs]).float().cpu()
    timed.cpu()
    out: dict = {"model": name, "batch": batch, "peak_mb": {}, "rel_err": {}}
    fns, programs = {}, []
    for mode in modes:
        base = memory_base()
        program = fusegraph.parse_onnx(onnx_bytes)
        program.compile(GpuTarget(gemm=mode), fusegraph.CompileOptions(fp16=True))
        feeds = {n: x.to(dev) for n, x in zip(names, inputs)}
        y = program.executable.run_device(feeds)[0]
        torch.cuda.synchronize()
        out["peak_mb"][mode] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
        out["rel_err"][mode] = rel_err(y, ref)
        out.setdefault("library_steps", {})[mode] = sum(c["name"] == "library" for c in program.executable.tuning.values())
        fns[mode] = (lambda e, f: lambda: e.run_device(f))(program.executable, feeds)
        programs.append(program)
    times = time_alternating(fns)
    out["ms"] = {k: round(statistics.median(v), 4) for k, v in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", required=True, help="gpu_models.py name:batch,...")
    ap.add_argument("--modes", default="auto,triton")
    a = ap.parse_args()
    for spec in a.rows.split(","):
        name, batch = spec.split(":")
        print(json.dumps(row(name, int(batch), a.modes.split(","))), flush=True)


if __name__ == "__main__":
    main()
