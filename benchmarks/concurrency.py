"""Throughput and p50/p99 latency against the number of concurrent requests (issue 21).

    python benchmarks/concurrency.py --target cpu [--models resnet50,bert_base] [--concurrency 1,2,4,8,16]
                                     [--requests 32] [--busy] [--threads N] [--engines fusegraph,ort]
    python benchmarks/concurrency.py --target gpu [--fp16] [--models resnet50,bert] [--concurrency 1,2,4,8,16]

Closed loop: `c` client threads each send their next request when the last one comes back, until
`--requests` (at least 4 per client) have been served after one warm-up request per client.
Throughput = requests / wall time; latency per request (its p50 and p99).

cpu: fusegraph (one compiled program, `run` from the c threads) and ONNX Runtime (one session at
its defaults, `run` from the c threads), each engine in a process of its own (neither engine's
workers hold a core through the other's runs). `--busy`: another process spins on one core for the
whole measurement, as on a shared machine. `--threads`: fusegraph's CompileOptions.threads.

gpu (one NVIDIA GPU, one process, as benchmarks/gpu_vs_torch.py): fusegraph with one execution
context and one CUDA stream per client (`executable.context()`), against torch.compile (default
mode: its CUDA-graph mode keeps graphs per thread and is not meant for several streams) with one
stream per client; same weights (gpu_vs_torch.build), fp16 with --fp16, device inputs and outputs.

Writes benchmarks/results/concurrency-<target>[-busy]-<host>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402

SPIN = "while True: pass"  # the busy process: one core's worth of work


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def closed_loop(clients: list[Callable[[], Any]], requests: int) -> dict[str, float]:
    """Each client (a callable serving one request) on a thread of its own, back to back, until
    `requests` are served in all; the first request of each is a warm-up, not counted."""
    c = len(clients)
    per = max(4, -(-requests // c))
    lat: list[list[float]] = [[] for _ in clients]
    errors: list[BaseException] = []
    start = threading.Barrier(c + 1)

    def client(k: int) -> None:
        fn = clients[k]
        try:
            fn()  # warm-up: this client's buffers, streams, graphs
        except BaseException as e:  # reported after the run: a benchmark must not hang on one client
            errors.append(e)
        start.wait()
        for _ in range(per if not errors else 0):
            t0 = time.perf_counter()
            fn()
            lat[k].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(c)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    flat = [x for per_client in lat for x in per_client]
    return {"concurrency": c, "requests": len(flat), "throughput_per_s": round(len(flat) / wall, 2),
            "p50_ms": round(statistics.median(flat) * 1e3, 2), "p99_ms": round(percentile(flat, 99) * 1e3, 2)}


# -- cpu: one engine per process ---------------------------------------------------------------------
def cpu_worker(engine: str, model: str, levels: list[int], requests: int, threads: int | None) -> list[dict]:
    from fusegraph.models import get_model, sample_inputs

    proto = get_model(model)
    feeds = sample_inputs(model, batch=1, seed=0)
    if engine == "ort":
        import onnxruntime as ort

        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        run = lambda: session.run(None, feeds)  # noqa: E731
    else:
        import fusegraph

        program = fusegraph.parse_onnx(proto, map_input_dims={k: list(v.shape) for k, v in feeds.items()})
        program.compile("cpu", fusegraph.CompileOptions(threads=threads))
        run = lambda: program.run(feeds)  # noqa: E731
    return [closed_loop([run] * c, requests) for c in levels]


def run_cpu(args) -> dict:
    busy = subprocess.Popen([sys.executable, "-c", SPIN]) if args.busy else None
    rows = []
    try:
        for model in args.models:
            for engine in args.engines:
                cmd = [sys.executable, __file__, "--worker", engine, "--models", model, "--concurrency",
                       ",".join(map(str, args.concurrency)), "--requests", str(args.requests)]
                if args.threads:
                    cmd += ["--threads", str(args.threads)]
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                if done.returncode:
                    raise SystemExit(f"{engine} on {model} failed:\n{done.stderr[-3000:]}")
                for point in json.loads(done.stdout.strip().splitlines()[-1]):
                    rows.append({"model": model, "engine": engine, **point})
                    print(json.dumps(rows[-1]), flush=True)
            # written after each model: a run cut short keeps what it measured
            write_results(args.name, {"target": "cpu", "busy": args.busy, "threads": args.threads,
                                      "rows": with_speedups(rows)})
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return {"target": "cpu", "busy": args.busy, "threads": args.threads, "rows": with_speedups(rows)}


# -- gpu: fusegraph contexts and torch.compile, one stream per client ----------------------------------
def run_gpu(args) -> dict:
    import torch

    rows = []
    for model in args.models:
        rows += gpu_rows(model, args)
        torch.cuda.empty_cache()
    return {"target": "gpu", "fp16": args.fp16, "rows": rows}


def gpu_rows(model: str, args) -> list[dict]:
    import torch

    import fusegraph
    from benchmarks.gpu_vs_torch import build, export_onnx

    dev = torch.device("cuda")
    timed, export, inputs, names, convnet = build(model, 1)
    program = fusegraph.parse_onnx(export_onnx(export, inputs, names))
    program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=args.fp16))
    feeds = {n: x.to(dev) for n, x in zip(names, inputs)}
    fmt = torch.channels_last if convnet else torch.contiguous_format
    dtype = torch.float16 if args.fp16 else torch.float32
    module = timed.to(dev).to(dtype).to(memory_format=fmt)
    targs = tuple(x.to(dev).to(dtype).contiguous(memory_format=fmt) if x.is_floating_point() else x.to(dev)
                  for x in inputs)
    compiled = torch.compile(module)
    with torch.no_grad():
        compiled(*targs)  # compiled once here, not by the first clients at once
    contexts = [program.context() for _ in range(max(args.concurrency))]  # made before any client runs

    def fusegraph_client(k: int) -> Callable[[], Any]:
        ctx, stream = contexts[k], torch.cuda.Stream(dev)
        return lambda: ctx.run_async(feeds, stream=stream).result()

    def torch_client(k: int) -> Callable[[], Any]:
        stream = torch.cuda.Stream(dev)

        def serve():
            with torch.no_grad(), torch.cuda.stream(stream):
                compiled(*targs)
            stream.synchronize()
        return serve

    rows = []
    for engine, client in (("fusegraph", fusegraph_client), ("torch.compile", torch_client)):
        for c in args.concurrency:
            point = closed_loop([client(k) for k in range(c)], args.requests)
            rows.append({"model": model, "engine": engine, "dtype": str(dtype).split(".")[-1], **point})
            print(json.dumps(rows[-1]), flush=True)
    return with_speedups(rows)


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's throughput over its model and engine's at one request at a time."""
    single = {(r["model"], r["engine"]): r["throughput_per_s"] for r in rows if r["concurrency"] == 1}
    for r in rows:
        base = single.get((r["model"], r["engine"]))
        if base:
            r["speedup_vs_1"] = round(r["throughput_per_s"] / base, 2)
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'model':10} {'engine':14} {'c':>3} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9}"]
    lines += [f"{r['model']:10} {r['engine']:14} {r['concurrency']:3d} {r['throughput_per_s']:9.1f} "
              f"{r['p50_ms']:9.2f} {r['p99_ms']:9.2f}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--models", default=None, help="cpu: resnet50,bert_base; gpu: resnet50,bert")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--requests", type=int, default=64, help="requests per concurrency level")
    ap.add_argument("--busy", action="store_true", help="cpu: another process spins one core meanwhile")
    ap.add_argument("--threads", type=int, default=None, help="cpu: fusegraph's CompileOptions.threads")
    ap.add_argument("--engines", default="fusegraph,ort", help="cpu: which engines to measure")
    ap.add_argument("--fp16", action="store_true", help="gpu: float16 compute on both sides")
    ap.add_argument("--tag", default="", help="added to the result file's name")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # one cpu engine, in a child process
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    default_models = "resnet50,bert_base" if args.target == "cpu" or args.worker else "resnet50,bert"
    args.models = (args.models or default_models).split(",")
    args.engines = args.engines.split(",")
    if args.worker:
        print(json.dumps(cpu_worker(args.worker, args.models[0], args.concurrency, args.requests, args.threads)))
        return
    args.name = "-".join(x for x in ("concurrency", args.target, "busy" if args.busy else "", args.tag) if x)
    result = run_cpu(args) if args.target == "cpu" else run_gpu(args)
    print(table(result["rows"]))
    print("wrote", write_results(args.name, result))


if __name__ == "__main__":
    main()
