"""silero-vad per-call latency on the gpu target against ONNX Runtime on the CPU (issue 23).

    python benchmarks/silero_vad_gpu.py [--runs 300] [--ort-threads 2] [--rates 16000,8000]

A stream of chunks as a VAD runs them, the state carried from call to call: [1, 512] samples at
16 kHz, [1, 256] at 8 kHz. Sides, each the median ms of one call:
  gpu          the default compile: specialized on `sr` (one static program, one CUDA graph), numpy in/out
  gpu_device   the same with the audio and state as device tensors (state stays on the device)
  gpu_general  dynamic_cache_size=0: no specialization (the `if` on the host, its branch segmented)
  ort          ONNX Runtime, CPUExecutionProvider, --ort-threads intra-op threads
Without CUDA the gpu sides run on Triton's interpreter (a check that the script works, not a timing).
Writes benchmarks/results/silero_vad_gpu-<host>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ort_session, write_results  # noqa: E402

CHUNK = {16000: 512, 8000: 256}


def _target():
    import torch

    if torch.cuda.is_available():
        from fusegraph.targets.gpu import GpuTarget

        return GpuTarget(), "cuda"
    from fusegraph.targets.gpu.interpreter import interpreted_target

    return interpreted_target(), "cpu"


def _stream(step, state, runs: int, warmup: int, sync=lambda: None) -> float:
    """Median ms of `step(state) -> state` over `runs` calls after `warmup`."""
    for _ in range(warmup):
        state = step(state)
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        state = step(state)
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def measure(path: Path, sr: int, runs: int, warmup: int, ort_threads: int) -> dict:
    import torch

    import fusegraph
    from fusegraph.targets import CompileOptions
    from fusegraph.targets.gpu.dynamic import HostFallbackWarning

    n = CHUNK[sr]
    rng = np.random.default_rng(0)
    audio = (rng.standard_normal((1, n)) * 0.1).astype(np.float32)
    state0 = np.zeros((2, 1, 128), np.float32)
    rate = np.array(sr, np.int64)
    target, device = _target()
    row: dict = {"sr": sr, "chunk": n, "device": device}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def compiled(**options):
        p = fusegraph.parse_onnx(str(path), map_input_dims={"input": [1, n], "state": [2, 1, 128], "sr": []})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HostFallbackWarning)
            return p.compile(target, CompileOptions(**options))

    p = compiled()
    row["gpu"] = _stream(lambda s: p.run({"input": audio, "state": s, "sr": rate})[1], state0, runs, warmup)
    exe = p.executable
    static = exe.executable_for({"input": (1, n), "state": (2, 1, 128), "sr": ()}, {"sr": sr})
    row["program"] = type(static).__name__
    row["host_ops"] = list(static.host_ops)
    row["graph_captured"] = getattr(static, "graph", None) is not None
    x = torch.from_numpy(audio).to(device)
    row["gpu_device"] = _stream(lambda s: p.run({"input": x, "state": s, "sr": rate})[1],
                                torch.from_numpy(state0).to(device), runs, warmup, sync)
    general = compiled(dynamic_cache_size=0)
    row["general_program"] = type(general.executable).__name__
    row["gpu_general"] = _stream(lambda s: general.run({"input": audio, "state": s, "sr": rate})[1], state0, runs, warmup)
    sess = ort_session(path, ort_threads)
    row["ort"] = _stream(lambda s: sess.run(None, {"input": audio, "state": s, "sr": rate})[1], state0, runs, warmup)
    want = sess.run(None, {"input": audio, "state": state0, "sr": rate})
    got = p.run({"input": audio, "state": state0, "sr": rate})
    row["max_abs_diff"] = float(max(np.max(np.abs(np.asarray(a) - b)) for a, b in zip(got, want)))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--ort-threads", type=int, default=2)
    ap.add_argument("--rates", default="16000,8000")
    args = ap.parse_args()
    from tests.helpers.real_models import REAL_MODELS

    rm = REAL_MODELS["silero_vad"]
    path = rm.path()
    if path is None:
        sys.exit(f"silero_vad: pip install --no-deps {rm.pip_name}")
    rows = []
    for sr in (int(r) for r in args.rates.split(",")):
        row = measure(path, sr, args.runs, args.warmup, args.ort_threads)
        rows.append(row)
        print(f"sr={sr:>5} [{row['device']}] {row['program']} host_ops={row['host_ops']} graph={row['graph_captured']}: "
              f"gpu {row['gpu']:.3f} ms, gpu_device {row['gpu_device']:.3f} ms, general ({row['general_program']}) "
              f"{row['gpu_general']:.3f} ms, ort({args.ort_threads} threads) {row['ort']:.3f} ms; "
              f"max |diff| {row['max_abs_diff']:.2e}", flush=True)
    out = write_results("silero_vad_gpu", {"runs": args.runs, "ort_threads": args.ort_threads, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
