"""int4 weight-only products on the cpu (issue 17): one com.microsoft.MatMulNBits, each engine in its own process.

    python benchmarks/int4_matmul.py [--shapes 4096x4096,4096x11008] [--rows 1,8,64] [--block 32]
                                     [--runs 30] [--warmup 5] [--rounds 1] [--threads N] [--tag T] [--no-write]

A K x N weight (an LLM projection: 4096 x 4096, 4096 x 11008) quantized to 4 bits in blocks of
`--block` along K with packed uint8 zero points (what ORT's MatMul4BitsQuantizer writes by default),
multiplied by M = `--rows` rows. Engines:
  fusegraph-int4  the MatMulNBits model on the cpu target: the codes stay packed and the kernel
                  dequantizes them inside the product (targets/cpu/kernels/nbits.py);
  fusegraph-fp32  what fusegraph ran before: the weight dequantized at compile into a float32
                  MatMul initializer (the same W, oneDNN's float32 GEMM);
  ort-int4        ONNX Runtime's MatMulNBits (CPU EP), accuracy_level 0 (float32 compute, the
                  same arithmetic as ours); ort-int4-acc4: accuracy_level 4 (a quantized to int8
                  per block: faster and less exact, shown for reference).
Every (engine, shape, M) runs alone in a fresh process: median / p90 latency, the process's CPU time
per run (`cpu_ms`) and peak RSS (compile included); with `--rounds R` the least disturbed round
(lowest median) counts. Outputs come back and are compared with fusegraph-fp32 (max relative error).
Ratios: fusegraph-int4 / other (< 1: fusegraph int4 faster). Writes benchmarks/results/int4_matmul[-TAG]-<host>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import ort_session, run_child, write_results  # noqa: E402
from benchmarks.quantization import _best_round, _peak_rss_mb  # noqa: E402

ENGINES = ("fusegraph-int4", "fusegraph-fp32", "ort-int4", "ort-int4-acc4")


def models(k: int, n: int, block: int, folder: Path) -> dict[str, Path]:
    """The MatMulNBits models (accuracy_level 0 and 4) and the float32 MatMul of the same W."""
    from onnx import helper, save

    from fusegraph.ops.nbits import MatmulNBits, dequantize
    from tests.onnx.contrib_util import contrib_model
    from tests.util import make_model

    rng = np.random.default_rng(17)
    op = MatmulNBits(k=k, n=n, bits=4, block_size=block)
    init = {"b": rng.integers(0, 256, (n, op.blocks, block // 2)).astype(np.uint8),
            "scales": rng.uniform(0.002, 0.02, n * op.blocks).astype(np.float32),
            "zp": rng.integers(0, 256, n * -(-op.blocks // 2)).astype(np.uint8)}
    a = {"a": np.zeros((1, k), np.float32)}
    paths = {}
    for level in (0, 4):
        model = contrib_model("MatMulNBits", a, {"K": k, "N": n, "bits": 4, "block_size": block,
                                                 "accuracy_level": level}, initializers=init)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "M"
        paths[level] = folder / f"nbits_{k}x{n}_acc{level}.onnx"
        save(model, paths[level])
    w_t = np.ascontiguousarray(dequantize(op, init["b"], init["scales"], init["zp"]).T)
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], a, ["y"], initializers={"w": w_t})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "M"
    paths["fp32"] = folder / f"fp32_{k}x{n}.onnx"
    save(model, paths["fp32"])
    return {"fusegraph-int4": paths[0], "fusegraph-fp32": paths["fp32"], "ort-int4": paths[0],
            "ort-int4-acc4": paths[4]}


def child(a: argparse.Namespace) -> int:
    x = {"a": np.random.default_rng(a.rows).standard_normal((a.rows, a.k)).astype(np.float32)}
    t0 = time.perf_counter()
    if a.engine.startswith("fusegraph"):
        import fusegraph

        p = fusegraph.parse_onnx(a.model_file, map_input_dims={"a": [a.rows, a.k]})
        p.compile(fusegraph.get_target("cpu"), fusegraph.CompileOptions(threads=a.threads))

        def run():
            return p.run(x)
    else:
        sess = ort_session(a.model_file, a.threads)

        def run():
            return sess.run(None, x)
    compile_s = time.perf_counter() - t0
    from fusegraph.driver.timing import measure, summary

    np.save(a.out_npy, np.asarray(run()[0]))
    times = measure({"run": run}, a.runs, a.warmup)["run"]
    cpu = []  # CPU seconds per run: not counting the time this process spent descheduled
    for _ in range(a.runs):
        c0 = time.process_time()
        run()
        cpu.append(time.process_time() - c0)
    print(json.dumps({**summary(times, a.rows), "cpu_ms": float(np.median(cpu)) * 1e3, "compile_s": compile_s,
                      "peak_rss_mb": _peak_rss_mb()}))
    return 0


def run_engine(engine: str, model: Path, k: int, rows: int, a: argparse.Namespace, out: Path) -> dict:
    return run_child(__file__, ["--child", engine, "--model-file", str(model), "--k", str(k), "--rows", str(rows),
                                "--runs", str(a.runs), "--warmup", str(a.warmup), "--threads", str(a.threads),
                                "--out-npy", str(out)])


def main() -> int:
    from fusegraph.driver.common import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x4096,4096x11008", help="K x N of the weight")
    ap.add_argument("--rows", default="1,8,64")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="processes per engine, in turns; the best round is kept")
    ap.add_argument("--threads", type=int, default=usable_cores())
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--tag", default="", help="results file int4_matmul-TAG-<host>.json (e.g. t1 for --threads 1)")
    ap.add_argument("--child", default=None)
    ap.add_argument("--model-file", default=None)
    ap.add_argument("--k", type=int, default=0)
    ap.add_argument("--out-npy", default=None)
    a = ap.parse_args()
    if a.child:
        a.engine = a.child
        a.rows = int(a.rows)
        return child(a)
    engines = a.engines.split(",")
    rows_list = [int(r) for r in a.rows.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="fg_int4_") as tmp:
        for shape in a.shapes.split(","):
            k, n = (int(v) for v in shape.split("x"))
            files = models(k, n, a.block, Path(tmp))
            for rows in rows_list:
                rounds: dict[str, list[dict]] = {e: [] for e in engines}
                outs: dict[str, np.ndarray] = {}
                for _ in range(a.rounds):
                    for e in engines:
                        out = Path(tmp) / f"{e}.npy"
                        rounds[e].append(run_engine(e, files[e], k, rows, a, out))
                        if out.exists():
                            outs[e] = np.load(out)
                row = {"k": k, "n": n, "rows": rows, "block": a.block,
                       **{e: _best_round(rounds[e]) for e in engines}}
                ours = row.get("fusegraph-int4", {}).get("median_ms")
                for e in engines:
                    if e != "fusegraph-int4" and ours and "median_ms" in row[e]:
                        row[f"int4_over_{e}"] = ours / row[e]["median_ms"]
                if "fusegraph-fp32" in outs:
                    ref = outs["fusegraph-fp32"].astype(np.float64)
                    for e, y in outs.items():
                        row.setdefault("max_rel_err_vs_fp32", {})[e] = float(
                            np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
                results.append(row)
                print(json.dumps({key: (v["median_ms"] if isinstance(v, dict) and "median_ms" in v else v)
                                  for key, v in row.items() if key != "max_rel_err_vs_fp32"}), flush=True)
    if not a.no_write:
        path = write_results("int4_matmul" + (f"-{a.tag}" if a.tag else ""), {"threads": a.threads, "runs": a.runs, "rounds": a.rounds,
                                             "load_before": os.getloadavg(), "results": results})
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
