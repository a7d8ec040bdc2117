"""`fusegraph serve` on a GPU: ResNet-50 in float16 on one KIND_GPU instance, with dynamic batching
against without, over gRPC at concurrency 32 (the issue's bar: batched >= 2x unbatched).

    python benchmarks/serve.py --device gpu [--concurrency 32] [--interval-ms 20000] [--out FILE]

The load is `--client-procs` processes of threads, each thread a stock tritonclient gRPC client sending
batch-1 requests back to back (one Python process cannot send ResNet-50 requests as fast as an H200
answers them); they start together and print their latencies as JSON. Before measuring, one request of
each batch bucket compiles that bucket's program, so no compile falls in the measured window.
Besides torch and triton it needs grpcio, tritonclient, python-rapidjson and prometheus-client (the
H200 machine lacks them: docs/serving.md says how to carry them there, in .whl/serve/py). There, the
gpu test and this, the JSON under $OUT:

    export PYTHONPATH=.:.whl/serve/py
    python -m pytest -q -m gpu tests/serve/test_gpu_resnet.py --junitxml=$OUT/serve-gpu-test.xml
    python benchmarks/serve.py --device gpu --interval-ms 10000 --out $OUT/serve-gpu-h200.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.serve_overhead import cpu_split
from fusegraph.serve.config import batch_buckets

HERE = Path(__file__).resolve().parent
MAX_BATCH = 16
# plain's max_batch_size 1: its requests are batch 1, and every bucket up to the maximum is compiled at load
CONFIG = """max_batch_size: {max_batch}
instance_group [ {{ kind: {kind} count: 1{gpus} }} ]
parameters {{ key: "precision" value {{ string_value: "fp16" }} }}
{batching}
"""
_BATCHING = f"dynamic_batching {{ max_queue_delay_microseconds: 500 preferred_batch_size: [ {MAX_BATCH} ] }}"
# ceiling: batched, on a model that only averages its input: the same requests, next to no device work,
# so its throughput is what the front end and the hop to the worker can carry
ENTRIES = {"plain": (1, ""), "batched": (MAX_BATCH, _BATCHING), "ceiling": (MAX_BATCH, _BATCHING)}
MODEL, INPUT, SHAPE = "resnet50", "input", [3, 224, 224]


def _mean_model():
    """y = mean(input over H, W): ResNet-50's input, and almost no work."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("ReduceMean", [INPUT, "axes"], ["y"], keepdims=0)], "mean",
                          [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", *SHAPE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", SHAPE[0]])],
                          [helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _repo(root: Path, kind: str) -> None:
    import onnx

    from fusegraph.models import get_model

    resnet = get_model(MODEL)
    for name, (max_batch, batching) in ENTRIES.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(_mean_model() if name == "ceiling" else resnet, root / name / "1" / "model.onnx")
        gpus = " gpus: [ 0 ]" if kind == "KIND_GPU" else ""
        (root / name / "config.pbtxt").write_text(CONFIG.format(max_batch=max_batch, batching=batching, kind=kind,
                                                                gpus=gpus))


def _request(grpcclient, batch: int, name: str | None = None, shape: list[int] | None = None):
    name, shape = name or INPUT, shape or SHAPE
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    inp = grpcclient.InferInput(name, [batch, *shape], "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def client_main(port: int, model: str, name: str, shape: list[int], threads: int) -> None:
    """One load process: `threads` clients sending batch-1 `name` of `shape` to `model`. It prints `ready`
    once connected, reads `[start_at, seconds]` (start_at: time.time()) from stdin, runs from then for
    that long, and prints the latencies as JSON."""
    import tritonclient.grpc as grpcclient

    latencies: list[list[float]] = [[] for _ in range(threads)]
    clients = [grpcclient.InferenceServerClient(f"127.0.0.1:{port}") for _ in range(threads)]
    inputs = _request(grpcclient, 1, name, shape)
    print("ready", flush=True)
    start_at, seconds = json.loads(sys.stdin.readline())

    def worker(k: int) -> None:
        client = clients[k]
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            t0 = time.perf_counter()
            client.infer(model, inputs)
            latencies[k].append(time.perf_counter() - t0)
        client.close()

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(json.dumps({"latencies": [x for per in latencies for x in per]}))


def _load(port: int, model: str, concurrency: int, procs: int, seconds: float) -> dict:
    per = [concurrency // procs + (k < concurrency % procs) for k in range(procs)]
    runs = [subprocess.Popen([sys.executable, str(HERE / "serve.py"), "--device", "gpu", "--client",
                              json.dumps([port, model, INPUT, SHAPE, n])], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for n in per if n]
    for r in runs:  # each has imported tritonclient and connected: start them together
        if r.stdout.readline().strip() != "ready":
            raise SystemExit("a load process failed to start (its error is above)")
    start = json.dumps([time.time() + 0.5, seconds]) + "\n"
    for r in runs:
        r.stdin.write(start)
        r.stdin.close()
    lat = sorted(x for r in runs for x in json.loads(r.stdout.read())["latencies"])
    for r in runs:
        r.wait(60)
    if not lat:
        raise SystemExit(f"no request to {model!r} was answered (the load processes' errors are above)")
    return {"inferences_per_s": len(lat) / seconds, "requests": len(lat),
            "p50_ms": 1e3 * lat[len(lat) // 2], "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def _wait_ready(proc: subprocess.Popen, port: int, timeout_s: float = 600) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    end = time.monotonic() + timeout_s
    while True:
        try:
            if client.is_server_ready():
                return
        except InferenceServerException:
            pass
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit("fusegraph serve did not come up on the GPU")
        time.sleep(0.5)


def _warm_up(port: int) -> dict:
    """One request of each bucket of each entry (the programs are compiled at load; this runs each once,
    so that first-run costs, CUDA graph capture and autotuning, fall outside the measurement)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    took = {}
    for name, (max_batch, _) in ENTRIES.items():
        t0 = time.perf_counter()
        for b in batch_buckets(max_batch, [max_batch]):
            client.infer(name, _request(grpcclient, b), client_timeout=600)
        took[name] = time.perf_counter() - t0
    client.close()
    return took


def run(args) -> dict:
    """The GPU rows: unbatched and batched at each concurrency, and their ratio."""
    levels = [int(c) for c in args.concurrency.split(",")]
    base = args.port_base
    with tempfile.TemporaryDirectory() as tmp:
        _repo(Path(tmp) / "repo", args.instance_kind)
        proc = subprocess.Popen([sys.executable, "-m", "fusegraph", "serve", str(Path(tmp) / "repo"),
                                 "--http-port", str(base), "--grpc-port", str(base + 1),
                                 "--metrics-port", str(base + 2)])
        try:
            _wait_ready(proc, base + 1)
            warm = _warm_up(base + 1)
            print({"warm_up_s": warm}, flush=True)
            rows = []
            for c in levels:
                for entry in ENTRIES:
                    cpu0 = cpu_split(proc.pid)
                    row = _load(base + 1, entry, c, min(args.client_procs, c), args.interval_ms / 1e3)
                    # the server's own CPU (the front ends, the scheduler) and its workers', per request
                    cpu = [(b - a) * 1e6 / row["requests"] for a, b in zip(cpu0, cpu_split(proc.pid), strict=True)]
                    rows.append({"server": f"fusegraph-{entry}", "device": "gpu" if args.instance_kind == "KIND_GPU"
                                 else "cpu", "precision": "fp16", "protocol": "grpc", "concurrency": c,
                                 "client_procs": min(args.client_procs, c), **row,
                                 "server_cpu_us_per_request": cpu[0], "worker_cpu_us_per_request": cpu[1]})
                    print(rows[-1], flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    ratios = {str(c): next(r["inferences_per_s"] for r in rows if r["concurrency"] == c and r["server"].endswith("batched"))
              / next(r["inferences_per_s"] for r in rows if r["concurrency"] == c and r["server"].endswith("plain"))
              for c in levels}
    return {"model": MODEL, "max_batch_size": MAX_BATCH, "interval_ms": args.interval_ms,
            "warm_up_s": warm, "batched_over_plain": ratios, "rows": rows}
