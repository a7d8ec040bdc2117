"""Shared benchmark plumbing: machine description and writing results as JSON."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    info = {"hostname": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.processor()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if shutil.which("nvidia-smi"):  # the GPUs, for results measured on one
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=30)
            info["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return info


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{socket.gethostname()}.json"
    payload = {"benchmark": name, "machine": machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def last_line(text: str, default: str = "?") -> str:
    """The last non-blank line of a child's output (its error, where it failed), else `default`."""
    return (text.strip().splitlines() or [default])[-1]


def run_child(script: str | Path, args: list[str]) -> dict[str, Any]:
    """Run `python script *args` in a fresh process (the repository on its path) and return the JSON
    object its last line of output holds, or {"error": its last line of stderr}: how the benchmarks
    run each engine alone in its own process."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(Path(script).resolve()), *args], env=env, capture_output=True,
                          text=True, cwd=root)
    if done.returncode != 0:
        return {"error": last_line(done.stderr)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ort_session(model_file: str | Path, threads: int) -> Any:
    """An ONNX Runtime CPU session at its defaults but for `threads` intra-op threads (one inter-op)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(model_file), so, providers=["CPUExecutionProvider"])


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def write_compile_log(executable: Any, path: str | Path) -> None:
    """Every span of the executable's compile_log, in ms from its start, as JSON at `path` (which
    kernel compiles, choices and first calls kept the compile waiting); nothing without a log."""
    log = getattr(executable, "compile_log", ())
    if log:
        start = min(t0 for _, _, t0, _ in log)
        Path(path).write_text(json.dumps([[name, lane, round((t0 - start) / 1e6, 2), round((t1 - start) / 1e6, 2)]
                                          for name, lane, t0, t1 in log], indent=0))


def phase_summary(executable: Any) -> dict:
    """The executable's compile_log in seconds: each main-thread phase; the GEMM timings ("tune",
    [problems, summed s]) and the warm-up's slow steps ("step", [steps, summed s]); the kernel compiles
    of the compile threads ([compiles, summed s, s from the first's start to the last's end]); their
    compile workers' spans, waits for a thread and launcher builds ([how many, summed s, the longest
    s]), and the kernel whose worker finished last. Empty for an executable without one (an older
    fusegraph)."""
    log = getattr(executable, "compile_log", ())
    out: dict = {}
    compiles = [(t0, t1) for name, lane, t0, t1 in log if lane != "compile" and name.startswith("compile ")]
    for name, lane, t0, t1 in log:
        if lane != "compile":
            continue
        seconds = (t1 - t0) / 1e9
        if name.startswith(("tune ", "step ")):  # GEMM timings; the warm-up's slow steps
            group = name.split(" ", 1)[0]
            count, total = out.get(group, [0, 0.0])
            out[group] = [count + 1, round(total + seconds, 3)]
        else:
            out[name] = round(seconds, 3)
    if compiles:
        out["kernel compiles"] = [len(compiles), round(sum(t1 - t0 for t0, t1 in compiles) / 1e9, 2),
                                  round((max(t1 for _, t1 in compiles) - min(t0 for t0, _ in compiles)) / 1e9, 2)]
    for kind, key in (("worker ", "worker compiles"), ("queued ", "queued"), ("launcher", "launchers")):
        took = [(t1 - t0) / 1e9 for name, lane, t0, t1 in log if lane != "compile" and name.startswith(kind)]
        if took:  # [how many, summed s, the longest s]
            out[key] = [len(took), round(sum(took), 2), round(max(took), 2)]
    workers = [(t1, t0, name) for name, lane, t0, t1 in log if name.startswith("worker ")]
    if workers:  # the kernel whose worker finished last: [its name, s from the log's start to its start, to its end]
        start = min(t0 for _, _, t0, _ in log)
        t1, t0, name = max(workers)
        out["last worker"] = [name.split(" ", 1)[1], round((t0 - start) / 1e9, 2), round((t1 - start) / 1e9, 2)]
    return out


def add_depthwise_form_args(parser: Any) -> None:
    """The tiled depthwise form's knobs (fusegraph.targets.gpu.triton_depthwise), for the tools that
    time or compile it: --tile, --block-c, --warps, --unrolled."""
    parser.add_argument("--tile", type=int, default=None, help="output elements a tile at most (triton_depthwise.TILE)")
    parser.add_argument("--block-c", type=int, default=None, help="channels a tile at most (MAX_BLOCK_C)")
    parser.add_argument("--warps", type=int, default=None, help="warps a program (WARPS)")
    parser.add_argument("--unrolled", action="store_true",
                        help="every tap unrolled (windows past ROLLED_ROWS_TAPS taps otherwise loop over their rows)")


def set_depthwise_form(args: Any) -> dict:
    """triton_depthwise's knobs set from `add_depthwise_form_args`' arguments; the form, as recorded."""
    from fusegraph.targets.gpu import triton_depthwise as td

    td.TILE = args.tile or td.TILE
    td.MAX_BLOCK_C = args.block_c or td.MAX_BLOCK_C
    td.WARPS = args.warps or td.WARPS
    if args.unrolled:
        td.ROLLED_ROWS_TAPS = sys.maxsize
    return {"tile": td.TILE, "max_block_c": td.MAX_BLOCK_C, "warps": td.WARPS, "unrolled": args.unrolled}
