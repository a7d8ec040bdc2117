"""The cpu target's compiled NonMaxSuppression kernel against ONNX Runtime: every attribute and
optional input, batches and classes, flipped and empty boxes, and scores full of ties (ORT orders
equal scores by lower box index; a kernel ordering them otherwise selects other boxes)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import make_model, run_ort, target_or_skip

I64 = np.int64


def _model(center: int, n_inputs: int, boxes: np.ndarray, scores: np.ndarray, symbolic: bool = False):
    names = ["b", "s", "m", "iou", "st"][:n_inputs]
    node = helper.make_node("NonMaxSuppression", names, ["out"], center_point_box=center)
    inputs = {"b": boxes, "s": scores}
    extra = {"m": np.zeros(1, I64), "iou": np.zeros(1, np.float32), "st": np.zeros(1, np.float32)}
    model = make_model([node], {**inputs, **{k: v for k, v in extra.items() if k in names}}, ["out"], opset=13)
    if symbolic:  # boxes [B, N, 4], scores [B, C, N]: one model for every case
        for vi, dims in zip(model.graph.input, (("B", "N", 4), ("B", "C", "N"))):
            for d, v in zip(vi.type.tensor_type.shape.dim, dims):
                d.Clear()
                if isinstance(v, str):
                    d.dim_param = v
                else:
                    d.dim_value = v
    return model


def _compare(exe, model, feeds):
    got = exe.run(feeds)[0]
    want = run_ort(model, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _random_case(r: np.random.Generator, center: int):
    batches, classes, n = int(r.integers(1, 3)), int(r.integers(1, 4)), int(r.integers(1, 60))
    boxes = r.integers(0, 8, (batches, n, 4)).astype(np.float32)  # small integers: many equal IoUs, empty boxes
    scores = (r.integers(0, 4, (batches, classes, n)) / 4).astype(np.float32)  # quarters: many ties
    return boxes, scores


@pytest.mark.parametrize("center", [0, 1])
def test_random_ties_match_ort(center):
    cpu = target_or_skip("cpu")
    r = np.random.default_rng(center)
    for n_inputs in (5, 4, 3):
        boxes, scores = _random_case(r, center)
        model = _model(center, n_inputs, boxes, scores, symbolic=True)
        program = fusegraph.parse_onnx(model, map_dyn_input_dims={"b": [(1, 2), (1, 60), 4],
                                                                  "s": [(1, 2), (1, 3), (1, 60)]})
        exe = program.compile(cpu, fusegraph.CompileOptions(threads=1))
        for _ in range(40):
            boxes, scores = _random_case(r, center)
            feeds = {"b": boxes, "s": scores,
                     "m": np.array([r.integers(-1, 20)], I64), "iou": np.array([r.choice([0, 0.3, 0.5, 1])], np.float32),
                     "st": np.array([r.choice([-1, 0, 0.25, 0.5])], np.float32)}
            _compare(exe, model, {k: v for k, v in feeds.items() if k in {i.name for i in model.graph.input}})


@pytest.mark.parametrize("threads", [1, 2])
def test_detector_head_matches_ort(threads):
    """A YOLOv8 head's NMS (8400 boxes, 80 classes, the benchmark's case), one thread and several."""
    cpu = target_or_skip("cpu")
    r = np.random.default_rng(3)
    boxes = np.concatenate([r.random((1, 8400, 2)) * 640, r.random((1, 8400, 2)) * 58 + 2], -1).astype(np.float32)
    scores = (r.random((1, 80, 8400)) ** 40).astype(np.float32)
    model = _model(1, 5, boxes, scores)
    exe = fusegraph.parse_onnx(model).compile(cpu, fusegraph.CompileOptions(threads=threads))
    feeds = {"b": boxes, "s": scores, "m": np.array([100], I64), "iou": np.array([0.45], np.float32),
             "st": np.array([0.25], np.float32)}
    _compare(exe, model, feeds)


def test_the_kernel_is_compiled_and_mismatched_inputs_fail():
    """The step is the C kernel (not the reference), and boxes that disagree with the scores are an
    ExecutionError naming the op, not a read past the arrays."""
    cpu = target_or_skip("cpu")
    boxes, scores = np.zeros((1, 5, 4), np.float32), np.zeros((1, 2, 5), np.float32)
    model = _model(0, 5, boxes, scores)
    program = fusegraph.parse_onnx(model, map_dyn_input_dims={"b": [1, (1, 9), 4], "s": [1, 2, (1, 9)]})
    exe = cpu.compile(program, fusegraph.CompileOptions(optimize=False))
    assert "fg_nms_" in exe.built.library.source
    with pytest.raises(fusegraph.errors.ExecutionError, match="non_max_suppression"):
        exe.run({"b": np.zeros((1, 6, 4), np.float32), "s": scores, "m": np.array([3], I64),
                 "iou": np.zeros(1, np.float32), "st": np.zeros(1, np.float32)})


@pytest.mark.parametrize("threshold", [0.0, -0.0, 1e-40, 0.5, -1.0])
def test_special_scores_compare_as_ort_does(threshold):
    """The kernel compares scores with a threshold >= 0 as integers (codegen/nms.py): NaN, +-inf,
    -0.0 and denormal scores, a -0.0 and a denormal threshold must select what ORT selects."""
    cpu = target_or_skip("cpu")
    r = np.random.default_rng(9)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 1e-45, 0.5, 0.7], np.float32)
    scores = r.choice(special, (1, 2, 80)).astype(np.float32)
    boxes = (r.random((1, 80, 4)) * 10).astype(np.float32)
    model = _model(0, 5, boxes, scores)
    exe = fusegraph.parse_onnx(model).compile(cpu, fusegraph.CompileOptions(threads=1))
    feeds = {"b": boxes, "s": scores, "m": np.array([50], I64), "iou": np.array([0.5], np.float32),
             "st": np.array([threshold], np.float32)}
    got = exe.run(feeds)[0]
    want = run_ort(model, feeds)[0]
    # ORT orders NaN and the rest by its priority queue; the selected set above a threshold excludes NaN
    keep = ~np.isnan(scores[0, want[:, 1], want[:, 2]]) if len(want) else np.zeros(0, bool)
    assert not np.isnan(scores[0, got[:, 1], got[:, 2]]).any()
    np.testing.assert_array_equal(got, want[keep])
