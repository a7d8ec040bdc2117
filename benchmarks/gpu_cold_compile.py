"""Cold compiles on the gpu target, as a new machine meets them: each row parsed and compiled in a child
process whose caches are empty (HOME, so fusegraph's sources and tuning choices; TRITON_CACHE_DIR;
inductor's), the clock started after imports and CUDA's set-up and stopped when the compile (kernels,
GEMM tuning, graph capture) is done.

    python benchmarks/gpu_cold_compile.py [--rows resnet50:1:fp32,resnet50:32:fp16] [--gemm auto]
                                          [--variant base=DIR] [--repeat N] [--runs N] [--profile] [--log] [--out-dir DIR]

A row is `model:batch:fp16|fp32` over fusegraph's built-in models or the rows of the architecture corpus
(benchmarks/gpu_models.py, exported before the clock starts). Per row: parse and compile seconds,
the compile's peak CUDA memory (torch's allocator: weights, arena, tuning, libraries' workspaces),
how many Triton binaries the compile built (cubins in its Triton cache: timed GEMM candidates too, and
each specialization of a source on its integer arguments) and how many generated sources the program
runs, its Triton compiles by kernel kind with their summed seconds (threads overlap), its phases (`phases_s`, from Executable.compile_log:
plan, lowering, compile-all, first run with the GEMM timings, capture), the GEMM tuner's timing of every
candidate of every problem (what tuning decisions are made from), and at batch 1 the largest
difference from ONNX Runtime (CPU) relative to the output's largest magnitude. `--variant NAME=DIR`
also compiles each row with the fusegraph package found under DIR (an older checkout: `git archive
<commit> fusegraph | tar -x -C DIR`), in turn with this one. `--profile` keeps a cProfile of each
compile (Python 3.12's profiles every thread) in --out-dir, and its overhead in the times; `--log`
writes there every span of each compile's log (ms from its start: which kernel compiles it waited for).
`--repeat N` compiles every row N times (the machines of one pool differed by 2x: medians are printed).
`--runs N` then times N runs of each compiled program on device-resident inputs (median ms, CUDA
events): with --variant, the speed side of a compile-time change, the variants in turn.
Writes benchmarks/results/gpu_cold_compile-<host>.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # after PYTHONPATH: a --variant child imports fusegraph from its own folder
    sys.path.append(str(ROOT))


def load_row(model: str, batch: int):
    """(ONNX model as its bytes, as a file holds it; input dims for the parser; sample feeds at `batch`)
    of one of fusegraph's built-in models or a row of the architecture corpus (benchmarks/gpu_models.py:
    exported here, before the clock)."""
    from fusegraph import models

    if model in models.MODELS:
        return (models.get_model(model).SerializeToString(), models.MODELS[model].default_shapes(batch=batch),
                models.sample_inputs(model, batch=batch))
    from benchmarks.gpu_vs_torch import build, export_onnx

    _, export, inputs, names, _ = build(model, batch)
    feeds = {n: x.numpy() for n, x in zip(names, inputs)}
    return export_onnx(export, inputs, names), None, feeds


def run_ms(executable, feeds: dict, runs: int) -> float:
    """Median milliseconds of one run on device-resident inputs, timed as gpu_vs_torch times every
    contender (CUDA events, after warm-up), at least `runs` runs."""
    import torch

    from benchmarks.gpu_vs_torch import PER_ROUND, time_alternating

    on_device = {n: torch.from_numpy(x).cuda() for n, x in feeds.items()}
    times = time_alternating({"run": lambda: executable.run_device(on_device)}, rounds=-(-runs // PER_ROUND))
    return statistics.median(times["run"])


def watch_compile() -> tuple[list[tuple[str, float]], list]:
    """Record, from here on, each Triton compile (kernel name, wall seconds in its thread) and each GEMM
    tuner made (their timings: which configs won each problem, by how much)."""
    import triton.compiler

    from fusegraph.targets.gpu import autotune

    compiles: list[tuple[str, float]] = []
    tuners: list = []
    compile_fn, tuner_init = triton.compiler.compile, autotune.Tuner.__init__

    def timed_compile(src, *args, **kwargs):  # what JITFunction calls (looked up at each kernel's binding)
        t0 = time.perf_counter()
        try:
            return compile_fn(src, *args, **kwargs)
        finally:
            compiles.append((getattr(getattr(src, "fn", None), "__name__", "?"), time.perf_counter() - t0))

    def kept_tuner(self, *args, **kwargs):
        tuner_init(self, *args, **kwargs)
        tuners.append(self)

    triton.compiler.compile, autotune.Tuner.__init__ = timed_compile, kept_tuner
    return compiles, tuners


def compile_summary(compiles: list[tuple[str, float]], tuners: list) -> dict:
    """Compiles per kernel kind (the name's prefix: mm_, pw_, red_, ...) as [count, summed seconds], and
    the tuners' timings in microseconds per problem and candidate."""
    kinds: dict[str, list] = {}
    for name, seconds in compiles:
        entry = kinds.setdefault(name.split("_")[0], [0, 0.0])
        entry[0] += 1
        entry[1] = round(entry[1] + seconds, 2)
    timings = {problem: {name: round(s * 1e6, 2) for name, s in candidates.items()}
               for tuner in tuners for problem, candidates in tuner.timings.items()}
    return {"compiles_by_kind": kinds, "tuning_us": timings}


def child(model: str, batch: int, fp16: bool, gemm: str, profile_to: str | None, runs: int, log_to: str | None) -> dict:
    import numpy as np
    import torch

    import fusegraph
    from benchmarks._common import phase_summary, write_compile_log
    from fusegraph.targets.gpu import GpuTarget

    onnx_model, dims, feeds = load_row(model, batch)
    compiles, tuners = watch_compile()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()  # CUDA set up before the clock starts
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    profile = cProfile.Profile() if profile_to else None
    t0 = time.perf_counter()
    if profile:
        profile.enable()
    program = fusegraph.parse_onnx(onnx_model, map_input_dims=dims)
    t1 = time.perf_counter()
    program.compile(GpuTarget(gemm=gemm), fusegraph.CompileOptions(fp16=fp16))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    peak_mb = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)  # the compile's, tuning and first calls too
    if profile:
        profile.disable()
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
        Path(profile_to).write_text(text.getvalue())
    if log_to:
        write_compile_log(program.executable, log_to)
    err = None
    if batch == 1:
        import onnxruntime as ort

        got = program.run(feeds)[0]
        want = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        err = float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))
    cubins = sum(1 for _ in Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.cubin"))
    sources = len(getattr(program.executable, "sources", {}))  # the generated kernel sources the program runs
    result = {"parse_s": round(t1 - t0, 3), "compile_s": round(t2 - t1, 3), "peak_mb": peak_mb, "cubins": cubins,
              "sources": sources, "rel_err_vs_ort": err,
              "phases_s": phase_summary(program.executable),
              **compile_summary(compiles, tuners)}
    if runs:
        result["run_ms"] = round(run_ms(program.executable, feeds, runs), 4)
    return result


def run_row(row: str, gemm: str, variant: str, package_dir: Path, out_dir: Path | None, runs: int,
            profile: bool, log: bool) -> dict:
    model, batch, precision = row.split(":")
    home = tempfile.mkdtemp(prefix="fg-cold-")
    env = {**os.environ, "HOME": home, "TRITON_CACHE_DIR": f"{home}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{home}/inductor",
           "PYTHONPATH": os.pathsep.join([str(package_dir), str(ROOT)])}
    stem = str(out_dir / f"{variant}_{row.replace(':', '_')}") if out_dir else ""
    paths = [stem + ".txt" if profile and stem else "", stem + "_log.json" if log and stem else ""]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", model, batch, precision, gemm, paths[0], str(runs), paths[1]],
                          env=env, capture_output=True, text=True)
    result = {"row": row, "variant": variant, "gemm": gemm, "process_s": round(time.perf_counter() - t0, 1)}
    try:
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        result["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return result


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        model, batch, precision, gemm, profile, runs, log = sys.argv[2:9]
        print(json.dumps(child(model, int(batch), precision == "fp16", gemm, profile or None, int(runs), log or None)))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="resnet50:1:fp32,resnet50:32:fp16")
    ap.add_argument("--gemm", default="auto", help="GpuTarget(gemm=...): auto | triton | library")
    ap.add_argument("--variant", action="append", default=[], help="NAME=DIR: also compile with the package under DIR")
    ap.add_argument("--repeat", type=int, default=1, help="compile each row this many times (rows and variants in turn)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--log", action="store_true", help="write each compile's spans (Executable.compile_log) to --out-dir")
    ap.add_argument("--runs", type=int, default=0, help="then time this many runs of the compiled program (median ms)")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    from benchmarks._common import write_results

    out_dir = Path(args.out_dir) if args.out_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    variants = [("this", ROOT)] + [(v.split("=", 1)[0], Path(v.split("=", 1)[1]).resolve()) for v in args.variant]
    results = []
    for _ in range(args.repeat):
        for row in args.rows.split(","):
            for name, package_dir in variants:  # in turn, row by row
                results.append(run_row(row, args.gemm, name, package_dir, out_dir, args.runs, args.profile, args.log))
                print(json.dumps({k: v for k, v in results[-1].items() if k != "tuning_us"}), flush=True)
    medians: dict[str, dict[str, float]] = {}
    for field in ("compile_s", "run_ms"):
        per_row: dict[str, list[float]] = {}
        for r in results:
            if field in r:
                per_row.setdefault(f"{r['row']} {r['variant']}", []).append(r[field])
        medians[field] = {key: statistics.median(values) for key, values in per_row.items()}
    for key, value in medians["compile_s"].items():
        ms = medians["run_ms"].get(key)
        print(f"{key}: median compile {value:.2f} s" + (f", run {ms:.4f} ms" if ms is not None else ""))
    path = write_results("gpu_cold_compile", {"profiled": args.profile, "median_compile_s": medians["compile_s"],
                                              "median_run_ms": medians["run_ms"], "rows": results})
    if out_dir:
        (out_dir / path.name).write_text(path.read_text())
    print("wrote", path)


if __name__ == "__main__":
    main()
