"""NonMaxSuppression on the gpu target (targets/gpu/nms.py): the torch kernel against ONNX Runtime
on random ties, flipped and empty boxes and every optional input, on CPU tensors here and CUDA ones
on a GPU; through the target, the step runs on the device (no host fallback)."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ops.select import NonMaxSuppression
from tests.util import make_model, run_ort

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
I64 = np.int64


def _device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _small_sort_when_interpreted(monkeypatch):
    """Triton's interpreter takes a minute for the 2048-wide in-register sort of every row: off CUDA
    the sort is 64 wide (the same bitonic network, fewer stages; rows past it take torch's sort)."""
    if _device() == "cpu":
        from fusegraph.targets.gpu import nms_triton

        monkeypatch.setattr(nms_triton, "CANDIDATES", 64)


def _random_case(r: np.random.Generator):
    batches, classes, n = int(r.integers(1, 3)), int(r.integers(1, 4)), int(r.integers(0, 70))
    boxes = r.integers(0, 8, (batches, n, 4)).astype(np.float32)  # small integers: equal IoUs, empty boxes
    scores = (r.integers(0, 4, (batches, classes, n)) / 4).astype(np.float32)  # quarters: many ties
    limit = int(r.integers(-1, 25))
    iou = float(r.choice([0, 0.3, 0.5, 1]))
    score = None if r.random() < 0.3 else float(r.choice([-1, 0, 0.25, 0.5]))
    return boxes, scores, limit, np.float32(iou), None if score is None else np.float32(score)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("block", [512, 3])
def test_torch_kernel_matches_the_reference_on_ties(center, block, monkeypatch):
    """Against the reference (itself checked against ORT: tests/ops/test_indexing.py); block 3 makes
    most rows span several blocks and look back at boxes kept in earlier ones."""
    import torch

    from fusegraph.targets.gpu import nms

    monkeypatch.setattr(nms, "_BLOCK", block)
    r = np.random.default_rng(int(center) + block)
    op = NonMaxSuppression(center_point_box=center)
    for _ in range(60):
        boxes, scores, limit, iou, score = _random_case(r)
        args = [boxes, scores, np.array([limit], I64), np.array([iou], np.float32)]
        want = op.compute(args + ([np.array([score], np.float32)] if score is not None else []))
        dev = _device()
        got = nms.non_max_suppression(torch.from_numpy(boxes).to(dev), torch.from_numpy(scores).to(dev),
                                      limit, iou, score, center, kernel="torch")
        assert got.dtype == torch.int64
        np.testing.assert_array_equal(got.cpu().numpy(), want)


@pytest.mark.parametrize("kernel", ["torch", "auto"])
def test_torch_kernel_matches_ort_on_a_detector_head(kernel):
    """The benchmark's YOLOv8 head (8400 boxes, 80 classes, limit 100), a dense load: rows longer than
    a block, classes that fill their 100 boxes. "auto" is the Triton greedy pass on CUDA."""
    import torch

    from fusegraph.targets.gpu.nms import non_max_suppression

    r = np.random.default_rng(5)
    boxes = np.concatenate([r.random((1, 8400, 2)) * 640, r.random((1, 8400, 2)) * 58 + 2], -1).astype(np.float32)
    scores = (r.random((1, 80, 8400)) ** 8).astype(np.float32)
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou", "st"], ["out"], center_point_box=1)
    consts = {"m": np.array([100], I64), "iou": np.array([0.45], np.float32), "st": np.array([0.25], np.float32)}
    model = make_model([node], {"b": boxes, "s": scores}, ["out"], consts, opset=13)
    want = run_ort(model, {"b": boxes, "s": scores})[0]
    dev = _device()
    got = non_max_suppression(torch.from_numpy(boxes).to(dev), torch.from_numpy(scores).to(dev), 100,
                              np.float32(0.45), np.float32(0.25), True, kernel=kernel)
    np.testing.assert_array_equal(got.cpu().numpy(), want)


def test_the_target_runs_nms_on_the_device(gpu_target):
    """A one-node model: no host step, no HostFallbackWarning, ORT's selections."""
    r = np.random.default_rng(11)
    boxes, scores, *_ = _random_case(r)
    boxes, scores = r.random((1, 50, 4)).astype(np.float32) * 10, (r.integers(0, 5, (1, 3, 50)) / 4).astype(np.float32)
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou", "st"], ["out"])
    consts = {"m": np.array([7], I64), "iou": np.array([0.3], np.float32), "st": np.array([0.2], np.float32)}
    model = make_model([node], {"b": boxes, "s": scores}, ["out"], consts, opset=13)
    program = fusegraph.parse_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a host fallback would warn
        program.compile(gpu_target)
    assert program.executable.host_ops == []
    np.testing.assert_array_equal(program.run({"b": boxes, "s": scores})[0],
                                  run_ort(model, {"b": boxes, "s": scores})[0])


@pytest.mark.parametrize("threshold", [0.0, -0.0, 1e-40, -1.0])
def test_torch_kernel_on_special_scores(threshold):
    """NaN, +-inf, +-0.0 and denormal scores: -0.0 and +0.0 are equal scores (ordered by index, as
    ORT orders them), NaN never passes a threshold."""
    import torch

    from fusegraph.targets.gpu.nms import non_max_suppression

    r = np.random.default_rng(4)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 1e-45, 0.5, 0.7], np.float32)
    scores = r.choice(special, (1, 2, 80)).astype(np.float32)
    boxes = (r.random((1, 80, 4)) * 10).astype(np.float32)
    want = NonMaxSuppression().compute([boxes, scores, np.array([50], I64), np.array([0.5], np.float32),
                                        np.array([threshold], np.float32)])
    dev = _device()
    for kernel in ("torch", "auto"):  # (auto: Triton on CUDA)
        got = non_max_suppression(torch.from_numpy(boxes).to(dev), torch.from_numpy(scores).to(dev), 50,
                                  np.float32(0.5), np.float32(threshold), False, kernel=kernel)
        np.testing.assert_array_equal(got.cpu().numpy(), want)


@pytest.mark.parametrize("center", [False, True])
def test_triton_greedy_matches_the_reference_on_ties(center, gpu_target):
    """The greedy pass as one Triton kernel (nms_triton.py; the interpreter here, CUDA on a GPU)."""
    import torch

    from fusegraph.targets.gpu.nms import non_max_suppression

    r = np.random.default_rng(20 + int(center))
    op = NonMaxSuppression(center_point_box=center)
    dev = _device()
    for _ in range(12):
        boxes, scores, limit, iou, score = _random_case(r)
        args = [boxes, scores, np.array([limit], I64), np.array([iou], np.float32)]
        want = op.compute(args + ([np.array([score], np.float32)] if score is not None else []))
        got = non_max_suppression(torch.from_numpy(boxes).to(dev), torch.from_numpy(scores).to(dev),
                                  limit, iou, score, center, kernel="triton")
        np.testing.assert_array_equal(got.cpu().numpy(), want)


@pytest.mark.parametrize("cap", [None, 8])
def test_triton_candidates_sort_and_emit_match_the_reference(cap, gpu_target, monkeypatch):
    """The all-Triton path (gather + in-register sort + greedy + emit, one host read) on ties, special
    scores and every threshold sign; cap 8 sends rows with more candidates to torch's sort."""
    import torch

    from fusegraph.targets.gpu import nms_triton
    from fusegraph.targets.gpu.nms import non_max_suppression

    if cap is not None:
        monkeypatch.setattr(nms_triton, "CANDIDATES", cap)
    r = np.random.default_rng(30 + (cap or 0))
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, -0.5, 0.25, 0.5, 0.75], np.float32)
    dev = _device()
    for case in range(10):
        boxes, scores, limit, iou, score = _random_case(r)
        if case % 2:
            scores = r.choice(special, scores.shape).astype(np.float32)
        score = np.float32(r.choice([-1.0, -0.0, 0.0, 0.25]))
        center = bool(case % 3 == 0)
        want = NonMaxSuppression(center_point_box=center).compute(
            [boxes, scores, np.array([limit], I64), np.array([iou], np.float32), np.array([score], np.float32)])
        got = non_max_suppression(torch.from_numpy(boxes).to(dev), torch.from_numpy(scores).to(dev),
                                  limit, iou, score, center, kernel="triton")
        np.testing.assert_array_equal(got.cpu().numpy(), want)


@pytest.mark.gpu
def test_graphed_nms_matches_the_reference_across_shapes_and_crowds():
    """On CUDA the all-Triton path replays one CUDA graph per input shape (nms_graph.py): every call
    gives the reference's selection (new inputs copied in, a fresh output tensor each time), a new
    shape makes a new graph, and a crowded row (past the in-register sort) still takes torch's sort."""
    import torch

    from fusegraph.targets.gpu import nms_triton
    from fusegraph.targets.gpu.nms import non_max_suppression
    from fusegraph.targets.gpu.nms_graph import GraphCache

    r = np.random.default_rng(7)
    graphs, outs = GraphCache(), []
    for case in range(8):
        n = (300, 300, 500, 300, 2 * nms_triton.CANDIDATES + 5, 300, 500, 300)[case]
        boxes = np.concatenate([r.random((2, n, 2)) * 100, r.random((2, n, 2)) * 20 + 1], -1).astype(np.float32)
        power = 1 if n > nms_triton.CANDIDATES else 6  # the crowded case: every box of a row passes
        scores = (r.random((2, 3, n)) ** power).astype(np.float32)
        want = NonMaxSuppression(center_point_box=True).compute(
            [boxes, scores, np.array([40], I64), np.array([0.5], np.float32), np.array([0.0], np.float32)])
        got = non_max_suppression(torch.from_numpy(boxes).cuda(), torch.from_numpy(scores).cuda(), 40, 0.5, 0.0,
                                  True, graphs=graphs)
        outs.append(got)
        np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=f"case {case} ({n} boxes)")
    assert len(graphs._graphs) == 3  # one graph per distinct shape (300, 500 and the crowd's)
    assert outs[0].data_ptr() != outs[1].data_ptr()  # outputs are not views of the graph's buffer
