"""fusegraph's NonMaxSuppression against ONNX Runtime's: the generic host evaluation (the op's numpy
reference, what every target ran before), the cpu target's compiled C kernel, and on a machine with
CUDA the gpu target's device kernel.

    python benchmarks/nms_vs_ort.py [--reps 15] [--runs 5] [--threads 1] [--sides reference,cpu,gpu]

A YOLOv8 head's NMS: 8400 boxes (centre format, up to 60 px on a 640 image), 80 classes, at most 100
boxes per class, IoU 0.45, score threshold 0.25. Rows differ in how many (class, box) pairs pass the
threshold: "detector" (scores ~ u^2000: ~500 pairs, a few a class, as a trained detector on a busy
image), "sparse" (u^200: 0.7% of pairs, ~60 a class), "medium" (u^40: 3.4%) and "dense" (u^8: 16%),
where every class fills its 100 boxes. Every side gets the same arrays, in alternating rounds of
`--runs` runs each (a side's caches and the GPU's clocks are those of a detector running it), after
warm-up;
their selections are checked equal to ORT's first. The cpu side is a compiled one-node program run
with `--threads` threads (ORT runs on one); the gpu side takes and returns device tensors (the boxes
and scores a detector's backbone left there) and is timed to the end of its work. Medians in ms.
Writes benchmarks/results/nms_vs_ort-<host>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import write_results  # noqa: E402
from fusegraph.ops.select import NonMaxSuppression  # noqa: E402

LOADS = {"detector": 2000, "sparse": 200, "medium": 40, "dense": 8}  # scores are uniform ** this


def nms_model(boxes: np.ndarray, scores: np.ndarray, consts: dict[str, np.ndarray]):
    from onnx import helper, numpy_helper

    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"],
                            center_point_box=1)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in (("boxes", boxes), ("scores", scores))]
    graph = helper.make_graph([node], "nms", inputs, [helper.make_empty_tensor_value_info("selected")],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def ort_session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def cpu_side(model, feeds, threads: int):
    import fusegraph

    exe = fusegraph.get_target("cpu").compile(fusegraph.parse_onnx(model), fusegraph.CompileOptions(threads=threads))
    return lambda: exe.run(feeds)[0]


def gpu_side(model, feeds):
    import torch

    import fusegraph
    from fusegraph.targets.gpu import GpuTarget

    exe = GpuTarget().compile(fusegraph.parse_onnx(model))
    device = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}

    def run():
        out = exe.run_device(device)[0]
        torch.cuda.synchronize()
        return out

    return run, lambda: run().cpu().numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--runs", type=int, default=5, help="runs of one side in a row, per round")
    ap.add_argument("--threads", type=int, default=1, help="the cpu target's threads (ORT runs on one)")
    ap.add_argument("--sides", default="reference,cpu,gpu", help="which of fusegraph's sides to time "
                    "(gpu only where CUDA is)")
    a = ap.parse_args()
    wanted = set(a.sides.split(","))
    if "gpu" in wanted:
        import importlib.util

        if importlib.util.find_spec("torch") is None or not __import__("torch").cuda.is_available():
            wanted.discard("gpu")
    rng = np.random.default_rng(0)
    consts = {"max_out": np.array([100], np.int64), "iou": np.array([0.45], np.float32),
              "score_min": np.array([0.25], np.float32)}
    order = [s for s in ("reference", "cpu", "gpu") if s in wanted] + ["onnxruntime"]
    rows = []
    for load, power in LOADS.items():
        boxes = np.concatenate([rng.random((1, 8400, 2)) * 640, rng.random((1, 8400, 2)) * 58 + 2], -1)
        boxes = boxes.astype(np.float32)
        scores = (rng.random((1, 80, 8400)) ** power).astype(np.float32)
        model = nms_model(boxes, scores, consts)
        feeds = {"boxes": boxes, "scores": scores}
        session = ort_session(model)
        theirs = session.run(None, feeds)[0]
        op, args = NonMaxSuppression(center_point_box=True), [boxes, scores, *consts.values()]
        sides, checks = {}, {}
        if "reference" in wanted:
            sides["reference"] = checks["reference"] = partial(op.compute, args)
        if "cpu" in wanted:
            from fusegraph.errors import FusegraphError

            try:
                sides["cpu"] = checks["cpu"] = cpu_side(model, feeds, a.threads)
            except FusegraphError as e:  # e.g. the H200 machine, without oneDNN
                print(f"cpu side left out: {e}")
                wanted.discard("cpu")
                order.remove("cpu")
        if "gpu" in wanted:
            sides["gpu"], checks["gpu"] = gpu_side(model, feeds)
        sides["onnxruntime"] = partial(session.run, None, feeds)
        for side, check in checks.items():
            if not np.array_equal(check(), theirs):
                raise SystemExit(f"{load}: the {side} selections differ from ONNX Runtime's")
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(a.reps + 2):
            for side, run in sides.items():
                for _ in range(a.runs):
                    t0 = time.perf_counter()
                    run()
                    times[side].append(time.perf_counter() - t0)
        ms = {side: statistics.median(t[2 * a.runs:]) * 1e3 for side, t in times.items()}  # two warm-up rounds
        row = {"load": load, "pairs_above_threshold": int((scores > 0.25).sum()), "selected": len(theirs),
               "ms": ms, "speedup_vs_ort": {s: ms["onnxruntime"] / ms[s] for s in sides if s != "onnxruntime"}}
        if "reference" in ms and "gpu" in ms:
            row["gpu_speedup_vs_reference"] = ms["reference"] / ms["gpu"]
        if len(rows) == 0:  # (after the first row's sides are known: one may have been left out)
            print(f"{'load':<8} {'pairs':>7} {'selected':>9} " + " ".join(f"{s + ' ms':>14}" for s in order)
                  + " " + " ".join(f"{'ORT/' + s:>14}" for s in order[:-1]))
        rows.append(row)
        print(f"{load:<8} {row['pairs_above_threshold']:>7} {len(theirs):>9} "
              + " ".join(f"{ms[s]:>14.3f}" for s in order) + " "
              + " ".join(f"{row['speedup_vs_ort'][s]:>14.2f}" for s in order[:-1]))
    print("wrote", write_results("nms_vs_ort", {"reps": a.reps, "runs_per_round": a.runs, "threads": a.threads,
                                                "rows": rows}))


if __name__ == "__main__":
    main()
