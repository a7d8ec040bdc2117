"""The accuracy measures of verify --int8 on outputs built to have known answers."""

from __future__ import annotations

import numpy as np
import pytest

from fusegraph.errors import ArgumentError
from fusegraph.quantize.accuracy import compare, ctc_decode, guess_task


def test_classify_top1_and_top5():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((10, 100))
    q = f.copy()
    q[0, f[0].argmax()] -= 100  # sample 0: top-1 lost, and out of the top 5 too
    swap = np.argsort(-f[1])[:2]
    q[1, swap] = q[1, swap[::-1]]  # sample 1: the first two swapped, top-1 in the top 5
    (r,) = compare(["y"], [[q]], [[f]])
    assert r.task == "classify"
    assert r.metrics["top1_agreement"] == pytest.approx(0.8)
    assert r.metrics["top5_contains_top1"] == pytest.approx(0.9)
    assert r.rel_l2 > 0


def _yolo(boxes, scores, anchors=50):
    """[1, 4 + C, A]: the given (cx, cy, w, h) boxes with their class scores, other anchors empty."""
    c = len(scores[0])
    out = np.zeros((1, 4 + c, anchors))
    for k, (b, s) in enumerate(zip(boxes, scores, strict=True)):
        out[0, :4, k], out[0, 4:, k] = b, s
    return out


def test_detect_box_agreement_and_scores():
    f = _yolo([(50, 50, 20, 20), (150, 150, 30, 30), (150, 152, 30, 30)], [(0.9, 0.1), (0.1, 0.8), (0.1, 0.7)])
    q = _yolo([(52, 50, 20, 20), (150, 150, 30, 30)], [(0.85, 0.1), (0.9, 0.1)])  # 2nd box: wrong class
    (r,) = compare(["out"], [[q]], [[f]])
    assert r.task == "detect"
    assert r.metrics["reference_boxes"] == 2  # NMS merged the overlapping pair
    assert r.metrics["box_agreement"] == pytest.approx(0.5)
    assert r.metrics["max_score"] == pytest.approx(0.9)


def test_ctc_text_agreement():
    def probs(seq, t=8, v=5):
        p = np.full((1, t, v), 0.01)
        for k, c in enumerate(seq):
            p[0, k, c] = 1.0
        return p / p.sum(axis=2, keepdims=True)

    assert ctc_decode(probs([1, 1, 0, 1, 2, 2, 0, 3])) == [(1, 1, 2, 3)]
    f = [[probs([1, 2, 3])], [probs([4, 4, 0, 4])]]
    q = [[probs([1, 2, 3])], [probs([4, 4, 4])]]  # repeats merge: one 4 where the reference has two
    results = compare(["p"], q, f)
    assert results[0].task == "ctc" and guess_task(f[0][0]) == "ctc"
    assert results[0].metrics["text_agreement"] == pytest.approx(0.5)
    assert 0.5 < results[0].metrics["char_agreement"] < 1.0
    with pytest.raises(ArgumentError):
        compare(["p"], q, f, task="segment")


def test_map_region_iou_and_a_dead_map():
    f = np.zeros((1, 1, 20, 20))
    f[0, 0, 2:6, 2:12] = 0.9  # a text region of 40 pixels
    q = f.copy()
    q[0, 0, 2:6, 10:12] = 0.1  # 8 of them lost
    (r,) = compare(["maps"], [[q]], [[f]])
    assert r.task == "map" and guess_task(f) == "map"
    assert r.metrics["region_iou"] == pytest.approx(32 / 40)
    assert r.metrics["max_prob"] == pytest.approx(0.9)
    dead = np.full_like(f, 0.11)  # ORT's noise-calibrated PP-OCR det: the sigmoid's range ends there
    (d,) = compare(["maps"], [[dead]], [[f]])
    assert d.metrics["region_iou"] == 0 and d.metrics["max_prob"] == pytest.approx(0.11)
