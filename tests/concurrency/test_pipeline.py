"""fusegraph.Pipeline: stages chained per request and overlapped across requests, a failing stage
failing its request only; the real PP-OCR det -> crop -> rec chain gives what its stages give one
by one."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper as h

import fusegraph
from fusegraph.errors import ArgumentError, InputError
from tests.helpers.real_models import REAL_MODELS
from tests.util import make_model, target_or_skip


def _scale(k: float) -> fusegraph.Program:
    x = np.zeros((2, 3), np.float32)
    model = make_model([h.make_node("Mul", ["x", "k"], ["y"])], {"x": x}, ["y"], {"k": np.float32([k])})
    p = fusegraph.parse_onnx(model)
    p.compile("ref")
    return p


def test_programs_and_host_steps_chain():
    pipe = fusegraph.Pipeline([_scale(2.0), lambda outs: outs[0] + 1, _scale(3.0)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(pipe.run({"x": x})[0], (x * 2 + 1) * 3)
    with pipe:
        got = list(pipe.map({"x": x + k} for k in range(5)))
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g[0], ((x + k) * 2 + 1) * 3)


def test_stage_i_of_request_n_plus_1_runs_while_stage_i_plus_1_of_request_n_runs():
    second_started = threading.Event()

    def first(r):
        if r == 1:
            second_started.set()
        return r

    def second(r):
        if r == 0:  # holds request 0 until the first stage has taken request 1
            assert second_started.wait(10), "the first stage did not take the next request meanwhile"
        return r * 10

    with fusegraph.Pipeline([first, second]) as pipe:
        assert [f.result(timeout=30) for f in [pipe.submit(r) for r in range(3)]] == [0, 10, 20]


def test_a_failing_stage_fails_its_request_only_and_is_named():
    def crop(v):
        if v["x"][0, 0] < 0:
            raise ValueError("no text found")
        return v

    pipe = fusegraph.Pipeline([crop, fusegraph.Stage(_scale(2.0), name="rec")])
    good, bad, wrong = ({"x": np.ones((2, 3), np.float32)}, {"x": -np.ones((2, 3), np.float32)},
                        {"x": np.ones((4, 3), np.float32)})
    with pipe:
        futures = [pipe.submit(r) for r in (good, bad, wrong, good)]
        with pytest.raises(fusegraph.StageError, match=r"stage 0 \(crop\).*no text found") as e:
            futures[1].result()
        assert e.value.stage == 0 and isinstance(e.value.__cause__, ValueError)
        with pytest.raises(fusegraph.StageError, match=r"stage 1 \(rec\)") as e:
            futures[2].result()
        assert isinstance(e.value.__cause__, InputError)
        for f in (futures[0], futures[3]):
            np.testing.assert_array_equal(f.result()[0], np.full((2, 3), 2, np.float32))


def test_a_host_step_may_take_the_request():
    pipe = fusegraph.Pipeline([_scale(2.0), fusegraph.Stage(lambda outs, req: outs[0] - req["x"], request=True)])
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(pipe.run({"x": x}), x)


def test_bad_stages_are_refused():
    p = fusegraph.parse_onnx(make_model([h.make_node("Relu", ["x"], ["y"])], {"x": np.zeros(2, np.float32)}, ["y"]))
    for stages in (lambda: [], lambda: [p], lambda: [42], lambda: [fusegraph.Stage(_scale(1.0), request=True)]):
        with pytest.raises(ArgumentError):
            fusegraph.Pipeline(stages())


# -- the real chain: PP-OCRv4 text detection -> crop of the text box -> recognition ------------------
DET_SIZE, REC_H, REC_W = 320, 48, 320


def _ocr_programs(target: str):
    progs = []
    for name in ("ppocr_det", "ppocr_rec"):
        rm = REAL_MODELS[name]
        if rm.path() is None:
            pytest.skip(f"{rm.pip_name} is not installed")
        p = fusegraph.parse_onnx(str(rm.path()), map_input_dims=rm.input_dims)
        p.compile(target_or_skip(target))
        progs.append(p)
    return progs


def crop_text(det_outs, request):
    """The box of the detector's text pixels (the whole image when it finds none), cut out of the
    request's image and resized (nearest) to the recognizer's 48 x 320."""
    prob, image = det_outs[0][0, 0], request["x"][0]
    ys, xs = np.nonzero(prob > 0.3)
    y0, y1, x0, x1 = (ys.min(), ys.max() + 1, xs.min(), xs.max() + 1) if ys.size else (0, DET_SIZE, 0, DET_SIZE)
    rows = y0 + (np.arange(REC_H) * (y1 - y0)) // REC_H
    cols = x0 + (np.arange(REC_W) * (x1 - x0)) // REC_W
    return {"x": np.ascontiguousarray(image[:, rows][:, :, cols])[None]}


def _text_image(k: int) -> dict:
    # a dark page with a bright band of stripes (text-like) at a row that moves with k
    img = np.full((1, 3, DET_SIZE, DET_SIZE), -0.8, np.float32)
    top = 40 + 30 * k
    img[:, :, top:top + 24, 30:290] = np.where(np.arange(260) % 12 < 6, 0.9, -0.6).astype(np.float32)
    return {"x": img + np.random.default_rng(k).normal(0, 0.05, img.shape).astype(np.float32)}


@pytest.mark.slow
def test_ppocr_det_crop_rec_equals_its_stages_one_by_one():
    det, rec = _ocr_programs("cpu")
    requests = [_text_image(k) for k in range(4)]
    want = [rec.run(crop_text(det.run(r), r)) for r in requests]
    with fusegraph.Pipeline([fusegraph.Stage(det, name="det"), fusegraph.Stage(crop_text, name="crop", request=True),
                             fusegraph.Stage(rec, name="rec")]) as pipe:
        got = list(pipe.map(requests))
        bad = pipe.submit({"x": np.zeros((1, 3, 64, 64), np.float32)}).result
        with pytest.raises(fusegraph.StageError, match=r"stage 0 \(det\)"):
            bad()
    for g, w in zip(got, want):
        assert len(g) == len(w) == 1 and g[0].shape == w[0].shape
        np.testing.assert_array_equal(g[0], w[0])
