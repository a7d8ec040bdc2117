"""ArgMax/ArgMin and TopK as generated C on the cpu target (codegen/select.py), against the ref target:
ties, NaN, select_last_index, inner axes, strided inputs (a slice of a softmax), integer dtypes, and
that they join the native program around them (a detector's score head: softmax, max, argmax, top-k)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(11)
n = helper.make_node


def _check(model, feeds, rtol: float = 0.0):
    exe = fusegraph.parse_onnx(model).compile("cpu", fusegraph.CompileOptions(threads=1))
    expected = run_fusegraph(model, feeds, "ref")
    for _ in range(2):  # the first run by Python steps, then as a native program
        got = [np.asarray(v) for v in exe.run(feeds)]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            if rtol and g.dtype.kind == "f":  # values a softmax computed (its exp, not the selection's)
                np.testing.assert_allclose(g, e, rtol=rtol)
            else:
                np.testing.assert_array_equal(g, e)
    return exe


def _ties_and_nans(shape, dtype, nans: bool):
    x = rng.integers(0, 4, shape).astype(dtype)  # few values: many ties
    if nans:
        x.reshape(-1)[rng.choice(x.size, x.size // 7, replace=False)] = np.nan
    return x


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype, nans", [(np.float32, False), (np.float32, True), (np.float64, True), (np.int64, False)])
def test_arg_reduce_matches_ref(op, axis, last, dtype, nans):
    x = _ties_and_nans((3, 5, 4), dtype, nans)
    model = make_model([n(op, ["x"], ["y"], axis=axis, keepdims=1, select_last_index=last)], {"x": x}, ["y"])
    _check(model, {"x": x})


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis, k", [(2, 3), (1, 5), (0, 1), (2, 9)])
@pytest.mark.parametrize("dtype, nans", [(np.float32, False), (np.float32, True), (np.float64, True), (np.int32, False)])
def test_top_k_matches_ref(largest, axis, k, dtype, nans):
    x = _ties_and_nans((2, 6, 9), dtype, nans)
    k = min(k, x.shape[axis])
    kk = np.array([k], np.int64)
    model = make_model([n("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, sorted=1)],
                       {"x": x}, ["v", "i"], {"k": kk})
    _check(model, {"x": x})


def test_a_detector_score_head_is_one_native_program():
    """softmax over classes, a slice of it (a strided view: no copy), its max and argmax, the top 20
    scores and their boxes: every step a C call, the selections read the slice in place."""
    logits = rng.standard_normal((1, 960, 5)).astype(np.float32)
    logits[0, ::97, 1:3] = 2.0  # equal scores in some rows: the argmax takes the first
    nodes = [n("Softmax", ["x"], ["p"], axis=2),
             n("Slice", ["p", "s", "e", "a"], ["fg"]),
             n("ReduceMax", ["fg"], ["best"], axes=[2], keepdims=0),
             n("ArgMax", ["fg"], ["label"], axis=2, keepdims=0),
             n("TopK", ["best", "k"], ["score", "idx"], axis=1),
             n("GatherElements", ["label", "idx"], ["labels"], axis=1)]
    consts = {"s": np.array([1], np.int64), "e": np.array([5], np.int64), "a": np.array([2], np.int64),
              "k": np.array([20], np.int64)}
    model = make_model(nodes, {"x": logits}, ["score", "idx", "labels"], consts)
    exe = _check(model, {"x": logits}, rtol=1e-6)
    steps = exe.executable.main.steps
    names = {s.name for s in steps}
    assert {"argmax", "top_k"} <= names
    selections = [s.fn for s in steps if s.name in ("argmax", "top_k")]
    assert all(getattr(f, "native", None) is not None for f in selections)


def test_a_run_time_k_stays_the_reference():
    x = rng.standard_normal((4, 10)).astype(np.float32)
    model = make_model([n("TopK", ["x", "k"], ["v", "i"], axis=1)], {"x": x, "k": np.array([3], np.int64)}, ["v", "i"])
    exe = fusegraph.parse_onnx(model).compile("cpu")
    feeds = {"x": x, "k": np.array([3], np.int64)}
    got, expected = exe.run(feeds), run_fusegraph(model, feeds, "ref")
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
