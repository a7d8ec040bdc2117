"""gather_elements_as_gather (cpu pass): GatherElements whose indices vary only along its axis
becomes Gather of one index vector; other GatherElements stay; values and errors match ref."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import FusegraphError
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(5)
n = helper.make_node


def _ops(exe) -> list[str]:
    return [s.name for s in exe.executable.main.steps]


def _compile(model):
    return fusegraph.parse_onnx(model).compile("cpu", fusegraph.CompileOptions(threads=1))


def test_top_k_boxes_and_labels_become_gathers():
    boxes = rng.standard_normal((1, 50, 4)).astype(np.float32)
    labels = rng.integers(0, 9, (1, 50)).astype(np.int64)
    idx = np.array([[3, -1, 0, 49, 7]], np.int64)
    nodes = [n("Unsqueeze", ["idx", "two"], ["i3"]), n("Expand", ["i3", "shape"], ["ie"]),
             n("GatherElements", ["boxes", "ie"], ["b"], axis=1),
             n("GatherElements", ["labels", "idx"], ["l"], axis=1)]
    feeds = {"boxes": boxes, "labels": labels, "idx": idx}
    model = make_model(nodes, feeds, ["b", "l"], {"two": np.array([2], np.int64), "shape": np.array([1, 5, 4], np.int64)})
    exe = _compile(model)
    assert "gather_elements" not in _ops(exe) and _ops(exe).count("gather") == 2
    for _ in range(2):  # step by step, then as a native program
        for g, e in zip(exe.run(feeds), run_fusegraph(model, feeds, "ref")):
            np.testing.assert_array_equal(g, e)
    with pytest.raises(FusegraphError):  # out of range: an error still
        exe.run({**feeds, "idx": np.array([[3, 50, 0, 1, 2]], np.int64)})


def test_indices_varying_along_another_axis_stay_gather_elements():
    data = rng.standard_normal((3, 6)).astype(np.float32)
    idx = rng.integers(0, 6, (3, 4)).astype(np.int64)
    model = make_model([n("GatherElements", ["data", "idx"], ["y"], axis=1)], {"data": data, "idx": idx}, ["y"])
    exe = _compile(model)
    assert "gather_elements" in _ops(exe)
    np.testing.assert_array_equal(exe.run({"data": data, "idx": idx})[0],
                                  run_fusegraph(model, {"data": data, "idx": idx}, "ref")[0])


def test_indices_covering_part_of_another_axis_stay_gather_elements():
    data = rng.standard_normal((4, 6)).astype(np.float32)
    idx = np.array([[1, 5, 0]], np.int64)  # [1, 3] against data's 4 rows: only row 0 is read
    model = make_model([n("GatherElements", ["data", "idx"], ["y"], axis=1)], {"data": data, "idx": idx}, ["y"])
    exe = _compile(model)
    assert "gather_elements" in _ops(exe)
    np.testing.assert_array_equal(exe.run({"data": data, "idx": idx})[0], data[:1, [1, 5, 0]])
