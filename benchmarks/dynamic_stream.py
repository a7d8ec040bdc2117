"""Request streams through one dynamic program on cpu, against ONNX Runtime (issue 16, parts b and c).

    python benchmarks/dynamic_shapes.py --part b [--models bert_base,yolov8n] [--requests 200] [--seed 0]
                                                 [--bucket 32] [--cache 16]

A stream of `--requests` requests, one at a time, batch 1: BERT-base (fusegraph.models) with seeded
random sequence lengths in [8, 384], YOLOv8n (nudenet's real export, whose anchors follow the input
size) with seeded random square resolutions, multiples of 32 in [320, 640]. Each engine runs the
stream alone in its own process, cold: fusegraph compiles ONE dynamic program (ranges as above)
before the stream and specializes per distinct shape during it (those compiles count in the stream's
time); ONNX Runtime (its defaults) is fully dynamic. Reported per engine: total seconds, p50 / p99
request latency (all requests, and the requests that did not compile), and part (c): the dynamic
compile's seconds, every specialization's seconds and the process' peak RSS.

Bucketing: every distinct input shape costs fusegraph one static compile (seconds for BERT-base on
cpu, see `specializations`), and random lengths in [8, 384] give up to 377 of them, more than the
executable cache holds. fusegraph's BERT requests are padded to the next multiple of `--bucket`
with attention_mask 0 (exact: the mask bias makes the padded keys' softmax weights 0, and the real
positions' outputs are sliced back), which leaves 12 shapes for bucket 32; ORT gets the requests
unpadded. The first requests' outputs of both engines are compared.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = list(range(320, 641, 32))
SEQ = (8, 384)
CHECKED = 4  # requests whose outputs the two engines compare


def stream(model: str, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The requests, as the client sends them (unpadded)."""
    from fusegraph.models import sample_inputs

    rng = np.random.default_rng(seed)
    if model == "bert_base":
        return [sample_inputs("bert_base", batch=1, seed=seed + k, seq=int(s))
                for k, s in enumerate(rng.integers(SEQ[0], SEQ[1] + 1, n))]
    return [{"images": rng.random((1, 3, int(s), int(s)), dtype=np.float32)} for s in rng.choice(SIZES, n)]


def model_bytes(model: str) -> bytes:
    if model == "bert_base":
        from fusegraph.models import get_model

        return get_model("bert_base").SerializeToString()
    from tests.helpers.real_models import REAL_MODELS

    path = REAL_MODELS["yolov8n_nudenet"].path()
    if path is None:
        raise SystemExit("yolov8n needs nudenet (pip install --no-deps nudenet==3.4.2)")
    return path.read_bytes()


def pad(feeds: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """BERT inputs padded to the next multiple of `step` with zeros (attention_mask 0: masked keys)."""
    seq = feeds["input_ids"].shape[1]
    extra = -seq % step
    return {k: np.pad(v, ((0, 0), (0, extra))) for k, v in feeds.items()}


def _fusegraph(model: str, requests: list, bucket: int, cache: int):
    import fusegraph
    from fusegraph.ir import Dim

    if model == "bert_base":
        seq = Dim(SEQ[0], -(-SEQ[1] // bucket) * bucket if bucket > 1 else SEQ[1])
        dyn = {k: [1, seq] for k in ("input_ids", "attention_mask", "token_type_ids")}
    else:
        dyn = {"images": [1, 3, Dim(SIZES[0], SIZES[-1]), Dim(SIZES[0], SIZES[-1])]}
    t0 = time.perf_counter()
    program = fusegraph.parse_onnx(model_bytes(model), map_dyn_input_dims=dyn)
    program.compile("cpu", fusegraph.CompileOptions(dynamic_cache_size=cache))
    compile_s = time.perf_counter() - t0
    exe = program.executable

    def run(feeds):
        if model != "bert_base" or bucket <= 1:
            return exe.run(feeds)
        seq = feeds["input_ids"].shape[1]
        outs = exe.run(pad(feeds, bucket))
        return [outs[0][:, :seq], outs[1]]  # last_hidden_state back to the real length; the pooler reads [CLS]

    def compiles() -> int:
        return len(exe.specializations)

    return run, compiles, compile_s, lambda: [s.seconds for s in exe.specializations]


def _ort(model: str, requests: list, bucket: int, cache: int):
    import onnxruntime as ort

    t0 = time.perf_counter()
    sess = ort.InferenceSession(model_bytes(model), providers=["CPUExecutionProvider"])
    compile_s = time.perf_counter() - t0
    return (lambda feeds: sess.run(None, feeds)), (lambda: 0), compile_s, list


ENGINES = {"fusegraph": _fusegraph, "ort": _ort}


def worker(engine: str, model: str, n: int, seed: int, bucket: int, cache: int, save: str) -> dict:
    """One engine's stream, in this process; the first outputs saved to `save` (.npz)."""
    requests = stream(model, n, seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run, compiles, compile_s, specializations = ENGINES[engine](model, requests, bucket, cache)
    rss_compiled = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    latencies, compiled, kept = [], [], {}
    start = time.perf_counter()
    for k, feeds in enumerate(requests):
        before = compiles()
        t0 = time.perf_counter()
        outs = run(feeds)
        latencies.append(time.perf_counter() - t0)
        compiled.append(compiles() > before)
        if k < CHECKED:
            kept.update({f"{k}_{j}": np.asarray(o) for j, o in enumerate(outs)})
    total = time.perf_counter() - start
    np.savez(save, **kept)
    warm = [t for t, c in zip(latencies, compiled) if not c] or latencies
    spec = specializations()
    return {"engine": engine, "model": model, "requests": n, "total_s": total,
            "p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99),
            "warm_p50_ms": _pct(warm, 50), "warm_p99_ms": _pct(warm, 99), "mean_ms": statistics.mean(latencies) * 1e3,
            "compile_s": compile_s, "specializations": len(spec), "specialization_s": spec,
            "mean_specialization_s": statistics.mean(spec) if spec else 0.0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_after_compile_mb": rss_compiled / 1024, "rss_before_compile_mb": rss_before / 1024,
            "distinct_request_shapes": len({tuple(v.shape for v in r.values()) for r in requests})}


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3


def measure(model: str, n: int, seed: int, bucket: int, cache: int) -> dict:
    """Both engines on the same stream, each in a fresh process; their first outputs compared."""
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ENGINES:
            save = str(Path(tmp) / f"{engine}.npz")
            cmd = [sys.executable, __file__, "--worker", engine, model, str(n), str(seed), str(bucket), str(cache), save]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{engine} on {model} failed:\n{done.stderr[-3000:]}")
            rows[engine] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model} {engine}: total {rows[engine]['total_s']:.1f} s, p50 {rows[engine]['p50_ms']:.1f} ms, "
                  f"p99 {rows[engine]['p99_ms']:.1f} ms, {rows[engine]['specializations']} compiles", flush=True)
        got, want = np.load(str(Path(tmp) / "fusegraph.npz")), np.load(str(Path(tmp) / "ort.npz"))
        worst = max(float(np.max(np.abs(got[k] - want[k])) / (np.max(np.abs(want[k])) + 1e-12)) for k in want)
    if worst > 1e-3:
        raise SystemExit(f"{model}: fusegraph and ORT outputs differ (max relative error {worst:.2e})")
    fg, ort = rows["fusegraph"], rows["ort"]
    return {"model": model, "requests": n, "seed": seed, "bucket": bucket if model == "bert_base" else None,
            "cache": cache, "fusegraph": fg, "ort": ort, "max_rel_err_vs_ort": worst,
            "total_ratio": fg["total_s"] / ort["total_s"], "p50_ratio": fg["p50_ms"] / ort["p50_ms"],
            "p99_ratio": fg["p99_ms"] / ort["p99_ms"],
            # what the stream would have cost without bucketing: one compile per distinct shape
            "unbucketed_compile_estimate_s": fg["distinct_request_shapes"] * fg["mean_specialization_s"]}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--worker":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    _, _, eng, mdl, cnt, sd, bk, cc, out = sys.argv
    print(json.dumps(worker(eng, mdl, int(cnt), int(sd), int(bk), int(cc), out)))
