"""The gpu target's scatters against the ref target when indices repeat: reduction 'none' keeps the
last update, as the reference does (ONNX leaves it undefined; torch.onnx exports index_add that way),
however the device orders its writes. They run on the GPU when there is one, else on the CPU through
Triton's interpreter (see conftest.py), where writes happen in order anyway: on CUDA these fail when
the scatter leaves duplicates to the device's order."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model

rng = np.random.default_rng(3)


def _ref_and_target(target, model, feeds):
    results = []
    for t in (fusegraph.get_target("ref"), target):
        p = fusegraph.parse_onnx(model)
        p.compile(t)
        results.append(p.run(feeds))
    return results


def test_scatter_elements_with_repeated_indices_keeps_the_last_update(gpu_target):
    # 4096 updates into 8 rows of 6 (indices cover 5 of the 6 columns), every row written ~500 times
    idx = rng.integers(-8, 8, (4096, 5)).astype(np.int64)
    feeds = {"data": rng.standard_normal((8, 6)).astype(np.float32),
             "upd": rng.standard_normal((4096, 5)).astype(np.float32)}
    init = {"idx": idx}
    model = make_model([helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=0)],
                       feeds, ["y"], init)
    expected, actual = _ref_and_target(gpu_target, model, feeds)
    assert_close(actual, expected, rtol=0, atol=0)


def test_scatter_nd_with_repeated_indices_keeps_the_last_update(gpu_target):
    idx = rng.integers(0, 3, (2048, 2)).astype(np.int64)  # 2048 slices into 9 of a (3, 3, 4) tensor
    feeds = {"data": rng.standard_normal((3, 3, 4)).astype(np.float32),
             "upd": rng.standard_normal((2048, 4)).astype(np.float32)}
    model = make_model([helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"])], feeds, ["y"], {"idx": idx})
    expected, actual = _ref_and_target(gpu_target, model, feeds)
    assert_close(actual, expected, rtol=0, atol=0)
