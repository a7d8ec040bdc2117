"""What the gpu target's GEMM autotuning costs and gains: each model compiled with the library path
only (`gemm="library"`: cuBLAS, then the epilogue's pointwise kernel) and with autotuning
(`gemm="auto"`), on a fresh machine's empty caches, then both timed alternating (fp16, CUDA graphs).

    python benchmarks/gpu_autotune.py [--rows resnet50:1,yolo:1,bert:1] [--keep-caches]

Per row: compile seconds of each (the tuned one with empty Triton and tuning caches unless
--keep-caches; a second tuned compile, from the caches, too), latency of each, how many matmul
problems were tuned and how many took the Triton template, and per problem every candidate's time.
The models are gpu_vs_torch.py's. Writes benchmarks/results/gpu_autotune-<host>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="resnet50:1,yolo:1,bert:1")
    ap.add_argument("--keep-caches", action="store_true", help="use this machine's Triton and tuning caches")
    args = ap.parse_args()
    if not args.keep_caches:  # before torch, triton and fusegraph read where their caches are
        home = tempfile.mkdtemp(prefix="fg-autotune-")
        os.environ["HOME"], os.environ["TRITON_CACHE_DIR"] = home, os.path.join(home, "triton")

    import torch

    import fusegraph
    from benchmarks._common import write_results
    from benchmarks.gpu_vs_torch import build, export_onnx, time_alternating
    from fusegraph.targets.gpu import GpuTarget

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    rows = []
    for spec in args.rows.split(","):
        name, batch = spec.split(":")
        _, export, inputs, names, _ = build(name, int(batch))
        onnx_bytes = export_onnx(export, inputs, names)
        feeds = {n: x.to("cuda") for n, x in zip(names, inputs)}
        exes, compile_s = {}, {}
        for label, gemm in (("library", "library"), ("auto", "auto"), ("auto, cached", "auto")):
            t0 = time.perf_counter()
            program = fusegraph.parse_onnx(onnx_bytes)
            program.compile(GpuTarget(gemm=gemm), fusegraph.CompileOptions(fp16=True))
            compile_s[label] = round(time.perf_counter() - t0, 2)
            exes[label] = program.executable
        times = time_alternating({k: (lambda e, f=feeds: lambda: e.run_device(f))(exes[k]) for k in ("library", "auto")})
        tuned = exes["auto"]
        picks = {key: choice["name"] for key, choice in tuned.tuning.items()}
        row = {"model": name, "batch": int(batch), "compile_s": compile_s,
               "ms": {k: round(statistics.median(v), 4) for k, v in times.items()},
               "problems": len(picks), "triton_picked": sum(p != "library" for p in picks.values()),
               "picks": picks,
               "candidate_us": {k: {c: round(s * 1e6, 2) for c, s in v.items()}
                                for k, v in getattr(tuned, "tuning_times", {}).items()}}
        rows.append(row)
        print(f"{name}:{batch}  ms library {row['ms']['library']}  auto {row['ms']['auto']}  "
              f"compile s {compile_s}  problems {row['problems']}  Triton picked {row['triton_picked']}", flush=True)
        print("wrote", write_results("gpu_autotune", {"device": torch.cuda.get_device_name(),
                                                      "fresh_caches": not args.keep_caches, "rows": rows}))


if __name__ == "__main__":
    main()
