"""`fusegraph serve` under a threaded tritonclient load, over gRPC and HTTP, with and without dynamic
batching, next to the engine's own throughput (issue 18). A skeleton: the peers (KServe's Python
ModelServer and MLServer serving the same model with ONNX Runtime) and Triton's perf_analyzer sweep the
issue asks for are not in it yet.

    python benchmarks/serve.py [--model resnet50|PATH.onnx] [--concurrency 1,8,32,64] [--seconds 10]

The server runs in its own process (`fusegraph serve`, loopback, free ports) on a repository of two
entries of the model: `plain` (max_batch_size 8, no batcher) and `batched` (dynamic_batching, preferred
4 and 8). Each client thread sends batch-1 requests with its own tritonclient client for --seconds;
every answer's shape is checked. "bare" is `program.run` at batch 1 from the same number of threads in
this process: the ceiling the server's overhead is measured against.
Writes benchmarks/results/serve-<host>.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402

CONFIG = """max_batch_size: 8
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{batching}
"""


def _repo(model: onnx.ModelProto, root: Path) -> None:
    for name, batching in (("plain", ""), ("batched", "dynamic_batching { max_queue_delay_microseconds: 2000 "
                                                      "preferred_batch_size: [ 4, 8 ] }")):
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(CONFIG.format(batching=batching))


def _load(seconds: float, threads: int, one) -> dict:
    """Run `one()` from `threads` threads for `seconds`; throughput and latency percentiles."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    end = time.monotonic() + seconds

    def worker(k: int) -> None:
        call = one()
        while time.monotonic() < end:
            t0 = time.perf_counter()
            call()
            latencies[k].append(time.perf_counter() - t0)

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join(seconds + 120)
    wall = time.perf_counter() - t0
    lat = sorted(x for per in latencies for x in per)
    return {"inferences_per_s": len(lat) / wall, "p50_ms": 1e3 * statistics.median(lat),
            "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "requests": len(lat)}


def _client(protocol: str, port: int, model: str, x: np.ndarray, input_name: str, output_name: str):
    def make():
        if protocol == "grpc":
            import tritonclient.grpc as mod
        else:
            import tritonclient.http as mod
        client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        inp = mod.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x, **({} if protocol == "grpc" else {"binary_data": True}))

        def call():
            out = client.infer(model, [inp]).as_numpy(output_name)
            assert out is not None and out.shape[0] == 1, f"{model}: a wrong answer shape"
        return call
    return make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--port-base", type=int, default=18000, help="HTTP, gRPC, metrics on this port and the next two")
    args = ap.parse_args()
    model = onnx.load(args.model) if args.model.endswith(".onnx") else fusegraph.models.get_model(args.model)
    input_name, output_name = model.graph.input[0].name, model.graph.output[0].name
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]
    x = np.random.default_rng(0).standard_normal((1, *dims)).astype(np.float32)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    prog = fusegraph.parse_onnx(model, map_input_dims={input_name: [1, *dims]}).compile("cpu")
    for c in levels:
        rows.append({"server": "bare", "concurrency": c, **_load(args.seconds, c, lambda: lambda: prog.run({input_name: x}))})
        print(rows[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        _repo(model, Path(tmp))
        ports = [str(args.port_base + k) for k in range(3)]
        proc = subprocess.Popen([sys.executable, "-m", "fusegraph", "serve", tmp, "--http-port", ports[0],
                                 "--grpc-port", ports[1], "--metrics-port", ports[2]])
        try:
            import tritonclient.http as httpclient

            probe = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
            end = time.monotonic() + 600
            while not _ready(probe):
                if proc.poll() is not None or time.monotonic() > end:
                    raise SystemExit("the server did not come up")
                time.sleep(0.5)
            for protocol, port in (("grpc", ports[1]), ("http", ports[0])):
                for entry in ("plain", "batched"):
                    for c in levels:
                        r = _load(args.seconds, c, _client(protocol, int(port), entry, x, input_name, output_name))
                        rows.append({"server": f"fusegraph-{entry}", "protocol": protocol, "concurrency": c, **r})
                        print(rows[-1], flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    print(write_results("serve", {"model": args.model, "seconds": args.seconds, "rows": rows}))


def _ready(client) -> bool:
    try:
        return client.is_server_ready()
    except (ConnectionError, OSError):
        return False


if __name__ == "__main__":
    main()
