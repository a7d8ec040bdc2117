"""fusegraph's NonMaxSuppression (the host evaluation every target uses) against ONNX Runtime's.

    python benchmarks/nms_vs_ort.py [--reps 15]

A YOLOv8 head's NMS: 8400 boxes (centre format, up to 60 px on a 640 image), 80 classes, at most 100
boxes per class, IoU 0.45, score threshold 0.25. Rows differ in how many (class, box) pairs pass the
threshold: "detector" (scores ~ u^2000: ~500 pairs, a few a class, as a trained detector on a busy
image), "sparse" (u^200: 0.7% of pairs, ~60 a class), "medium" (u^40: 3.4%) and "dense" (u^8: 16%),
where every class fills its 100 boxes. Both sides get the same arrays, alternating, after warm-up;
their selections are checked equal first. Medians in ms.
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


def ort_session(boxes: np.ndarray, scores: np.ndarray, consts: dict[str, np.ndarray]):
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"],
                            center_point_box=1)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in (("boxes", boxes), ("scores", scores))]
    graph = helper.make_graph([node], "nms", inputs, [helper.make_empty_tensor_value_info("selected")],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    consts = {"max_out": np.array([100], np.int64), "iou": np.array([0.45], np.float32),
              "score_min": np.array([0.25], np.float32)}
    rows = []
    print(f"{'load':<8} {'pairs':>7} {'selected':>9} {'fusegraph ms':>13} {'ORT ms':>8} {'ratio':>6}")
    for load, power in LOADS.items():
        boxes = np.concatenate([rng.random((1, 8400, 2)) * 640, rng.random((1, 8400, 2)) * 58 + 2], -1)
        boxes = boxes.astype(np.float32)
        scores = (rng.random((1, 80, 8400)) ** power).astype(np.float32)
        op = NonMaxSuppression(center_point_box=True)
        args = [boxes, scores, *consts.values()]
        session = ort_session(boxes, scores, consts)
        feeds = {"boxes": boxes, "scores": scores}
        ours, theirs = op.compute(args), session.run(None, feeds)[0]
        if not np.array_equal(ours, theirs):
            raise SystemExit(f"{load}: the selections differ from ONNX Runtime's")
        sides = {"fusegraph": partial(op.compute, args), "onnxruntime": partial(session.run, None, feeds)}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(a.reps):
            for side, run in sides.items():
                t0 = time.perf_counter()
                run()
                times[side].append(time.perf_counter() - t0)
        ms = {side: statistics.median(t) * 1e3 for side, t in times.items()}
        row = {"load": load, "pairs_above_threshold": int((scores > 0.25).sum()), "selected": len(ours),
               "ms": ms, "ratio": ms["fusegraph"] / ms["onnxruntime"]}
        rows.append(row)
        print(f"{load:<8} {row['pairs_above_threshold']:>7} {len(ours):>9} {ms['fusegraph']:>13.2f} "
              f"{ms['onnxruntime']:>8.2f} {row['ratio']:>6.2f}")
    print("wrote", write_results("nms_vs_ort", {"reps": a.reps, "rows": rows}))


if __name__ == "__main__":
    main()
