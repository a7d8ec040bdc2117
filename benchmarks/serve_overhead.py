"""The serving overhead per request: the servers' CPU time (all their processes, workers included) and
throughput for a fixed number of requests of a cheap model, fusegraph (worker processes and threads)
against the KServe peer, over gRPC or HTTP.

    python benchmarks/serve_overhead.py [--model PATH.onnx|resnet50] [--requests 2000] [--concurrency 4]
        [--rounds 2] [--protocol grpc] [--peer-path DIR] [--mlserver-python PATH] [--isolations process,thread]
        [--tree LABEL=DIR ...] [--label=-loaded]

Each round also runs the engine alone (`bare`, in this process) for its CPU per inference: a server's CPU
per request less that is the server's own cost. CPU time per request is what a loaded machine distorts least (throughput there is mostly waiting for a
core); each round measures every server once, in turn, all of them up at once (an idle one costs
nothing). `--tree old=/tmp/base` adds fusegraph from another source tree (a `git archive` of an older
commit) for before/after. The default model is tests/serve's MLP, whose engine time is ~0.1 ms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from benchmarks._common import write_results  # noqa: E402
from benchmarks.serve import ENTRIES, _repo, _save_config, _wait_ready  # noqa: E402

HERE = Path(__file__).resolve().parent
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its children (the worker processes)."""
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of process `pid`, and of its children together."""
    def seconds(p) -> float:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            return 0.0
        return (int(f[11]) + int(f[12])) / _TICK

    children = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(d) == pid]
    return seconds(pid), sum(seconds(p) for p in children)


def _parent(d: str) -> int | None:
    try:
        return int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _send(protocol: str, port: int, model: str, x: np.ndarray, input_name: str, n: int, threads: int,
          binary: bool = True) -> float:
    """`n` requests from `threads` clients; the wall time."""
    if protocol == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod
    left, lock = [n], threading.Lock()

    def worker() -> None:
        client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        inp = mod.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x, **({} if protocol == "grpc" else {"binary_data": binary}))
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            client.infer(model, [inp])

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def _bare(prog, x: np.ndarray, name: str, n: int) -> dict:
    """The engine alone: `program.run` at batch 1 in this process, `n` times; CPU per inference (all of
    this process's threads) and inferences/s. A server's CPU per request less this is its own cost."""
    prog.run({name: x})
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        prog.run({name: x})
    return {"cpu_us_per_request": 1e6 * (time.process_time() - c0) / n, "requests_per_s": n / (time.perf_counter() - t0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="an ONNX model with one batching FP32 input (default: the test MLP)")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    ap.add_argument("--peer-path", default="", help="folder KServe is installed in (empty: no KServe)")
    ap.add_argument("--mlserver-python", default="", help="the python of MLServer's venv (empty: no MLServer)")
    ap.add_argument("--isolations", default="process,thread", help="fusegraph's instance isolations to measure")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR", help="another fusegraph tree")
    ap.add_argument("--port-base", type=int, default=18700)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.model and args.model.endswith(".onnx"):
        model = onnx.load(args.model)
    elif args.model:
        from fusegraph.models import get_model

        model = get_model(args.model)
    else:
        from tests.serve.util import mlp_model

        model = mlp_model()
    name = model.graph.input[0].name
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]
    x = np.random.default_rng(0).standard_normal((1, *dims)).astype(np.float32)
    tmp = Path(tempfile.mkdtemp(prefix="serve_overhead_"))
    _repo(model, tmp / "repo")
    onnx.save(model, tmp / "model.onnx")
    trees = [("fusegraph", str(HERE.parent))] + [tuple(t.split("=", 1)) for t in args.tree]
    servers, procs = [], {}
    for k, (label, root) in enumerate(trees):
        for j, isolation in enumerate(args.isolations.split(",")):
            port = args.port_base + 20 * k + 10 * j
            servers.append((f"{label}-{isolation}", port, list(ENTRIES)))
            procs[servers[-1][0]] = subprocess.Popen(
                [sys.executable, "-m", "fusegraph", "serve", str(tmp / "repo"), "--http-port", str(port), "--grpc-port",
                 str(port + 1), "--metrics-port", str(port + 2), "--isolation", isolation],
                env=dict(os.environ, PYTHONPATH=root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        for label, port, _ in servers:
            _wait_ready(procs[label], port, label)
        first = servers[0][1]
        _save_config(first, first + 1, tmp)
        config = ["--config-json", str(tmp / "config.json"), "--config-pb", str(tmp / "config.pb")]
        if args.mlserver_python:
            port = args.port_base + 80
            procs["mlserver"] = subprocess.Popen(
                [args.mlserver_python, str(HERE / "serve_peer_mlserver.py"), str(tmp / "model.onnx"), "--http-port",
                 str(port), "--grpc-port", str(port + 1), "--metrics-port", str(port + 2), *config],
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _wait_ready(procs["mlserver"], port, "mlserver")
            servers.append(("mlserver", port, ["plain"]))
        if args.peer_path:
            port = args.port_base + 90
            procs["kserve"] = subprocess.Popen(
                [sys.executable, str(HERE / "serve_peer_kserve.py"), str(tmp / "model.onnx"), "--http-port", str(port),
                 "--grpc-port", str(port + 1), *config], env=dict(os.environ, PYTHONPATH=os.pathsep.join([args.peer_path, str(HERE.parent)])),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _wait_ready(procs["kserve"], port, "kserve")
            servers.append(("kserve", port, ["plain"]))
        import fusegraph

        prog = fusegraph.parse_onnx(model, map_input_dims={name: list(x.shape)}).compile("cpu")
        for rnd in range(args.rounds):
            rows.append({"server": "bare", "round": rnd, **_bare(prog, x, name, max(1, args.requests // 4))})
            print(rows[-1], flush=True)
            for label, port, entries in servers:
                target = port + 1 if args.protocol == "grpc" else port
                binary = label != "mlserver"  # its HTTP front end takes JSON tensors only
                for entry in entries:
                    _send(args.protocol, target, entry, x, name, min(50, args.requests), args.concurrency, binary)  # warm
                    c0 = _cpu_s(procs[label].pid)
                    wall = _send(args.protocol, target, entry, x, name, args.requests, args.concurrency, binary)
                    cpu = _cpu_s(procs[label].pid) - c0
                    rows.append({"server": f"{label}-{entry}", "round": rnd, "protocol": args.protocol,
                                 "concurrency": args.concurrency, "cpu_us_per_request": 1e6 * cpu / args.requests,
                                 "requests_per_s": args.requests / wall})
                    print(rows[-1], flush=True)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(60)
    print(write_results(f"serve-overhead{args.label}", {
        "model": args.model or "tests/serve mlp", "requests": args.requests, "trees": dict(trees),
        "loadavg": Path("/proc/loadavg").read_text().strip(), "rows": rows}))


if __name__ == "__main__":
    main()
