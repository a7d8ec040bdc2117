"""`fusegraph serve` under Triton's perf_analyzer, over gRPC and HTTP, with and without dynamic batching,
next to a peer server serving the same ONNX model with ONNX Runtime, and the engine's own throughput.

    python benchmarks/serve.py --perf-analyzer PATH [--model resnet50|PATH.onnx]
        [--concurrency 1,2,4,8,16,32,64] [--interval-ms 5000] [--peer kserve,mlserver --peer-path DIR
        --mlserver-python PATH] [--rounds N] [--label=-loaded] [--out FILE]
    python benchmarks/serve.py --device gpu ...      # ResNet-50 fp16 on a GPU: see serve_gpu.py

perf_analyzer: the binary in the tritonclient==2.48.0 wheel (PyPI's perf-analyzer 2.60 needs glibc 2.38):
    pip download --no-deps tritonclient==2.48.0 -d /tmp/tc248 && python -m zipfile -e /tmp/tc248/*.whl /tmp/tc248
    chmod +x /tmp/tc248/tritonclient-2.48.0.data/data/bin/perf_analyzer   # zipfile drops the mode
    PATH: /tmp/tc248/tritonclient-2.48.0.data/data/bin/perf_analyzer
It links libb64.so.0d (apt-get install libb64-0d) and libcudart.so.12 (pip install --no-deps --target
/tmp/cudart nvidia-cuda-runtime-cu12; pass --ld-library-path /tmp/cudart/nvidia/cuda_runtime/lib).

The peers (benchmark-only dependencies, each in a place of its own), both serving the model with ONNX
Runtime at its defaults:
- KServe 0.21's Python ModelServer: `pip install --target DIR kserve==0.21.0`, `--peer-path DIR`; it runs
  `benchmarks/serve_peer_kserve.py` from DIR.
- MLServer 1.7 with a custom ONNX Runtime runtime (`mlserver-onnx` is not on PyPI):
  `python -m venv V && V/bin/pip install mlserver==1.7.1 uvloop==0.21.0 onnxruntime`,
  `--mlserver-python V/bin/python`; it runs `benchmarks/serve_peer_mlserver.py`. Its REST front end has
  no binary tensor extension, so its HTTP rows send JSON (the threaded tritonclient load: perf_analyzer
  sends HTTP tensors binary only).
perf_analyzer reads each model's config: the peers are given the config fusegraph completes for `plain`
(neither has a ModelConfig endpoint of its own; their scripts add it). Where perf_analyzer fails, the
row is measured with a threaded tritonclient load instead, and says which tool measured it.

Each server runs in its own process on loopback; the fusegraph repository holds the model three times
(`ENTRIES`): `plain` (one instance on every core, no batcher, as the peers run), `pair` (two instances of
half the cores, a lone request on all of them: `solo_threads`) and `batched` (the pair, batching what
queues up, no delay). Requests are batch 1. "bare" is `program.run` at batch 1 from as many threads, in
this process: the ceiling of a server here. Writes benchmarks/results/serve-<host>.json. The machine
must be quiet for figures worth committing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
CORES = len(os.sched_getaffinity(0))
# plain: one instance on every core, as the peers run; pair: two instances of half the cores each, and a
# request that comes alone on every core (solo_threads); batched: the pair, batching what queues up
# while both instances run (no delay: on a CPU a batch of 8 saves only ~7 % per image over batch 1, so
# waiting for one costs more than it gains)
_PAIR = f"""instance_group [ {{ kind: KIND_CPU count: 2 }} ]
parameters {{ key: "solo_threads" value {{ string_value: "{CORES}" }} }}"""
ENTRIES = {
    "plain": "instance_group [ { kind: KIND_CPU count: 1 } ]",
    "pair": _PAIR,
    "batched": _PAIR + "\ndynamic_batching { max_queue_delay_microseconds: 0 }",
}


def _repo(model: onnx.ModelProto, root: Path) -> None:
    for name, config in ENTRIES.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(f"max_batch_size: 8\n{config}\n")


def perf_analyzer(binary: str, env: dict, model: str, protocol: str, port: int, concurrency: int,
                  interval_ms: int) -> dict:
    """One perf_analyzer measurement: throughput and latency percentiles (its CSV), or the error."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        cmd = [binary, "-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol, "--concurrency-range",
               f"{concurrency}:{concurrency}", "--measurement-interval", str(interval_ms),
               "--stability-percentage", "1000", "--max-trials", "3", "-f", out.name]
        # on a shared machine no three windows agree within 50%: take three, and compare rounds instead
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60 + 12 * interval_ms / 1e3)
        rows = list(csv.DictReader(open(out.name))) if done.returncode == 0 else []
    if not rows:
        return {"error": (done.stdout + done.stderr).strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    r = rows[0]
    return {"tool": "perf_analyzer", "inferences_per_s": float(r["Inferences/Second"]),
            **{f"p{q}_ms": int(r[f"p{q} latency"]) / 1e3 for q in (50, 90, 99)}}


def threaded_load(seconds: float, threads: int, one) -> dict:
    """Run `one()()` from `threads` threads for `seconds`: throughput and latency percentiles."""
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
    return {"inferences_per_s": len(lat) / wall,
            "p50_ms": 1e3 * statistics.median(lat), "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def _client(protocol: str, port: int, model: str, x: np.ndarray, input_name: str, binary: bool = True):
    def make():
        if protocol == "grpc":
            import tritonclient.grpc as mod
        else:
            import tritonclient.http as mod
        client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        inp = mod.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x, **({} if protocol == "grpc" else {"binary_data": binary}))
        return lambda: client.infer(model, [inp])
    return make


def _wait_ready(proc: subprocess.Popen, port: int, what: str) -> None:
    import tritonclient.http as httpclient

    probe = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    end = time.monotonic() + 900
    while True:
        try:
            if probe.is_server_ready():
                return
        except (ConnectionError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"{what} did not come up")
        time.sleep(0.5)


def _save_config(http_port: int, grpc_port: int, tmp: Path) -> None:
    """The `plain` entry's config as fusegraph completes it, for the peer to answer perf_analyzer with:
    Triton's JSON (HTTP) and a serialized ModelConfigResponse (gRPC)."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    (tmp / "config.json").write_text(json.dumps(
        httpclient.InferenceServerClient(f"127.0.0.1:{http_port}").get_model_config("plain")))
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    (tmp / "config.pb").write_bytes(client.get_model_config("plain").SerializeToString())
    client.close()


@dataclass(frozen=True)
class _Server:
    label: str
    cmd: list[str]
    env: dict
    http_port: int
    grpc_port: int
    entries: list[str]
    http_binary: bool = True  # False: its HTTP front end takes JSON tensors only (MLServer)


def _peer_env(pythonpath: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": os.pathsep.join(pythonpath)} if pythonpath else env


def _servers(args, model_path: Path, root: Path, tmp: Path):
    """Each server measured: fusegraph, then the peers asked for (each on ports of its own)."""
    base = args.port_base
    for k, isolation in enumerate(args.isolations.split(",")):  # the first is the peers' config's source
        port = base + 30 * k
        yield _Server("fusegraph" if isolation == "process" else f"fusegraph_{isolation}",
                      [sys.executable, "-m", "fusegraph", "serve", str(root), "--http-port", str(port), "--grpc-port",
                       str(port + 1), "--metrics-port", str(port + 2), "--isolation", isolation],
                      dict(os.environ), port, port + 1, list(ENTRIES))
    config = ["--config-json", str(tmp / "config.json"), "--config-pb", str(tmp / "config.pb")]
    peers = set(filter(None, args.peer.split(",")))
    if "kserve" in peers:
        yield _Server("kserve", [sys.executable, str(HERE / "serve_peer_kserve.py"), str(model_path), "--http-port",
                                 str(base + 10), "--grpc-port", str(base + 11), *config],
                      _peer_env([args.peer_path, str(HERE.parent)]), base + 10, base + 11, ["plain"])
    if "mlserver" in peers:
        yield _Server("mlserver", [args.mlserver_python, str(HERE / "serve_peer_mlserver.py"), str(model_path),
                                   "--http-port", str(base + 20), "--grpc-port", str(base + 21), "--metrics-port",
                                   str(base + 22), *config],
                      _peer_env([]), base + 20, base + 21, ["plain"], http_binary=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--concurrency", help="levels (default 1,2,4,8,16,32,64; with --device gpu, 32)")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: ResNet-50 fp16 on a KIND_GPU instance, batched against unbatched (serve_gpu.py)")
    ap.add_argument("--client-procs", type=int, default=8, help="--device gpu: load processes")
    ap.add_argument("--instance-kind", default="KIND_GPU", choices=("KIND_GPU", "KIND_CPU"),
                    help="--device gpu: KIND_CPU runs the same benchmark on the CPU (a smoke test without a GPU)")
    ap.add_argument("--client", help=argparse.SUPPRESS)  # serve_gpu.py's load processes
    ap.add_argument("--out", type=Path, help="write the JSON here (default benchmarks/results/serve<label>-<host>.json)")
    ap.add_argument("--perf-analyzer", default="perf_analyzer", metavar="PATH")
    ap.add_argument("--ld-library-path", default="", help="where perf_analyzer finds libcudart.so.12")
    ap.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer's measurement window")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--peer", default="", help="peers, comma-separated: kserve, mlserver (none by default)")
    ap.add_argument("--peer-path", default="", help="folder KServe is installed in (pip install --target)")
    ap.add_argument("--mlserver-python", default="", help="the python of MLServer's own venv")
    ap.add_argument("--tool", choices=("perf_analyzer", "threads"), default="perf_analyzer",
                    help="threads: every server under the threaded tritonclient load (like for like with a peer "
                         "perf_analyzer cannot drive)")
    ap.add_argument("--port-base", type=int, default=18000)
    ap.add_argument("--isolations", default="process",
                    help="fusegraph's instance isolations, each a server of its own (process,thread: both)")
    ap.add_argument("--rounds", type=int, default=1, help="times each server is measured, alternating")
    ap.add_argument("--label", default="", help="suffix of the results file (-loaded on a shared machine)")
    args = ap.parse_args()
    if args.device == "gpu":
        from benchmarks import serve_gpu

        if args.client:
            return serve_gpu.client_main(*json.loads(args.client))
        args.concurrency = args.concurrency or "32"
        return _write(args, {"device": "gpu", **serve_gpu.run(args)})
    args.concurrency = args.concurrency or "1,2,4,8,16,32,64"
    from fusegraph.models import get_model  # a subpackage `import fusegraph` leaves out

    model = onnx.load(args.model) if args.model.endswith(".onnx") else get_model(args.model)
    input_name = model.graph.input[0].name
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]
    x = np.random.default_rng(0).standard_normal((1, *dims)).astype(np.float32)
    levels = [int(c) for c in args.concurrency.split(",")]
    seconds = args.interval_ms / 1e3
    pa_env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [args.ld_library_path,
                                                                            os.environ.get("LD_LIBRARY_PATH")])))
    prog = fusegraph.parse_onnx(model, map_input_dims={input_name: [1, *dims]}).compile("cpu")
    rows = [{"server": "bare", "concurrency": c, "tool": "threads",
             **threaded_load(seconds, c, lambda: lambda: prog.run({input_name: x}))} for c in levels]
    for r in rows:
        print(r, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        _repo(model, Path(tmp) / "repo")
        onnx.save(model, Path(tmp) / "model.onnx")
        servers = list(_servers(args, Path(tmp) / "model.onnx", Path(tmp) / "repo", Path(tmp)))
        # rounds alternate the servers, each in a fresh process: on a loaded machine compare within a round
        for rnd, srv in ((r, s) for r in range(args.rounds) for s in servers):
            proc = subprocess.Popen(srv.cmd, env=srv.env)
            try:
                _wait_ready(proc, srv.http_port, srv.label)
                if srv.label.startswith("fusegraph") and not (Path(tmp) / "config.pb").exists():
                    _save_config(srv.http_port, srv.grpc_port, Path(tmp))
                for protocol in args.protocols.split(","):
                    port = srv.grpc_port if protocol == "grpc" else srv.http_port
                    binary = protocol == "grpc" or srv.http_binary
                    for entry in srv.entries:
                        for c in levels:
                            # perf_analyzer sends HTTP tensors binary only
                            r = perf_analyzer(args.perf_analyzer, pa_env, entry, protocol, port, c, args.interval_ms) \
                                if args.tool == "perf_analyzer" and binary else {}
                            if "inferences_per_s" not in r:  # --tool threads, or perf_analyzer failed (no ModelConfig)
                                r = {"tool": "tritonclient-threads", **({"perf_analyzer_error": r["error"]} if r else {}),
                                     **threaded_load(seconds, c, _client(protocol, port, entry, x, input_name, binary))}
                            rows.append({"server": f"{srv.label}-{entry}", "protocol": protocol, "concurrency": c,
                                         "round": rnd, **({} if binary else {"http_tensors": "json"}), **r})
                            print(rows[-1], flush=True)
            finally:
                proc.terminate()
                proc.wait(60)
    _write(args, {"model": args.model, "interval_ms": args.interval_ms, "tool": args.tool, "rows": rows})


def _write(args, payload: dict) -> None:
    payload = {**payload, "loadavg": _loadavg()}
    if args.out is None:
        print(write_results(f"serve{args.label}", payload))
        return
    from benchmarks._common import machine

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "serve", "machine": machine(),
                                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **payload}, indent=2) + "\n")
    print(args.out)


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return ""


if __name__ == "__main__":
    main()
