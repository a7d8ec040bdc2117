"""Sparse against dense products on the cpu target (issue 24): y = x @ W with W constant; with
`--device gpu`, 2:4 float16 products and BERT-base end to end on an NVIDIA GPU (benchmarks/sparse_gpu.py).

    python benchmarks/sparse.py [--reps 20] [--rows 2048x2048x2048,128x768x768,...] [--densities 0.5,0.3,0.1]
                                [--threads 1 --cpu-time] [--tag=-NAME]
    python benchmarks/sparse.py --device gpu [--products 2048x2048x2048,...] [--batches 32] [--out-dir DIR]

Each row M x K x N is compiled as one ONNX MatMul on the cpu target twice: once with the sparse
kernel refused (oneDNN's packed dense product, what the target ran before) and once with it forced
(targets/cpu/kernels/sparse.py); the weights are make_sparse(density) for the random rows and
prune_2_4 of a dense matrix at density 0.5. Both programs run in this process, alternating, after
warm-up; medians are reported with the ratio sparse / dense (< 1: sparse wins) and whether the
target's own compile-time timing picked the sparse kernel. Results agree with numpy (checked).
Writes benchmarks/results/sparse-<host>.json (sparse-gpu-<host>.json with --device gpu; a copy under
--out-dir).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from onnx import helper  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from fusegraph.targets.cpu.kernels import sparse  # noqa: E402
from tests.util import make_model  # noqa: E402

ROWS = "2048x2048x2048,128x768x768,128x768x3072,128x3072x768,1x768x3072"
DENSITIES = "0.5:2:4,0.3,0.1"


def compiled(w: np.ndarray, m: int, pick: bool | None, threads: int | None = None):
    x = {"x": np.random.default_rng(1).standard_normal((m, w.shape[0])).astype(np.float32)}
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], x, ["y"], initializers={"w": w})
    real = sparse.choose
    if pick is not None:
        sparse.choose = lambda dense, kernel, lens: (pick, 0.0, 0.0)
    try:
        p = fusegraph.parse_onnx(model).compile(fusegraph.get_target("cpu"), fusegraph.CompileOptions(threads=threads))
    finally:
        sparse.choose = real
    return p, x


def picked_by_target(w: np.ndarray, m: int, threads: int | None) -> bool:
    seen = []
    real = sparse.choose

    def spy(*args):
        seen.append(real(*args)[0])
        return seen[-1], 0.0, 0.0

    sparse.choose = spy
    try:
        compiled(w, m, None, threads)
    finally:
        sparse.choose = real
    return bool(seen and seen[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--densities", default=DENSITIES, help="comma list; 0.5:2:4 is a 2:4-pruned matrix")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--products", default=None, help="gpu: M x K x N rows (default: sparse_gpu.PRODUCTS; '' for none)")
    ap.add_argument("--batches", default="32", help="gpu: BERT-base batches of 128 tokens ('' for none)")
    ap.add_argument("--threads", type=int, default=None, help="cpu: threads of both programs (default: all)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="cpu: time by the calling thread's CPU time (with --threads 1: robust to a loaded machine)")
    ap.add_argument("--tag", default="", help="cpu: suffix of the results file (sparse-<host><tag>.json)")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    if a.cpu_time and a.threads != 1:
        raise SystemExit("--cpu-time measures the calling thread: it needs --threads 1")
    clock = time.thread_time if a.cpu_time else time.perf_counter
    if a.device == "gpu":
        from benchmarks import sparse_gpu

        path = write_results("sparse-gpu", sparse_gpu.main_gpu(sparse_gpu.PRODUCTS if a.products is None else a.products, a.batches))
        print("wrote", path)
        if a.out_dir:
            shutil.copy(path, Path(a.out_dir) / path.name)
        return
    results, load = [], os.getloadavg()
    for row in a.rows.split(","):
        m, k, n = (int(v) for v in row.split("x"))
        for spec in a.densities.split(","):
            density, _, structure = spec.partition(":")
            w = (fusegraph.prune_2_4(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32))
                 if structure else fusegraph.make_sparse((k, n), float(density)))
            dense_p, x = compiled(w, m, False, a.threads)
            sparse_p, _ = compiled(w, m, True, a.threads)
            want = x["x"].astype(np.float64) @ w
            for p in (dense_p, sparse_p):
                got = p.run(x)[0]
                err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
                if err > 1e-4:
                    raise SystemExit(f"{row} density {spec}: result off by {err:.2e}")
            times: dict[str, list[float]] = {"dense": [], "sparse": []}
            for _ in range(3):
                dense_p.run(x), sparse_p.run(x)
            for _ in range(a.reps):
                for name, p in (("dense", dense_p), ("sparse", sparse_p)):
                    t0 = clock()
                    p.run(x)
                    times[name].append(clock() - t0)
            ms = {k_: statistics.median(v) * 1e3 for k_, v in times.items()}
            r = {"m": m, "k": k, "n": n, "density": float(density), "structure": structure or "random",
                 "dense_ms": round(ms["dense"], 4), "sparse_ms": round(ms["sparse"], 4),
                 "ratio_sparse_vs_dense": round(ms["sparse"] / ms["dense"], 3),
                 "target_picks_sparse": picked_by_target(w, m, a.threads)}
            results.append(r)
            print(f"{row:>16} density {spec:>7}: dense {ms['dense']:9.3f} ms  sparse {ms['sparse']:9.3f} ms  "
                  f"ratio {r['ratio_sparse_vs_dense']:.3f}  picked {r['target_picks_sparse']}", flush=True)
    print("wrote", write_results(f"sparse{a.tag}", {"rows": results, "reps": a.reps, "threads": a.threads,
                                                    "clock": "thread_time" if a.cpu_time else "perf_counter",
                                                    "load_before": load, "load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
