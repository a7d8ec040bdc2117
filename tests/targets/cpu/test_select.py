"""top_k on the cpu target (kernels/select.py): the generated selection against the ref target's
stable sort (ties by the lower index, NaN the largest), and as a call of a native program."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.native_program import KERNEL, Region
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(8)


def _model(shape, k, axis, largest):
    x = np.zeros(shape, np.float32)
    nodes = [helper.make_node("Neg", ["x"], ["s"]),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], axis=axis, largest=int(largest)),
             helper.make_node("Abs", ["v"], ["out"])]
    return make_model(nodes, {"x": x}, ["out", "i"], {"k": np.array([k], np.int64)}, opset=11)


def _inputs(shape):
    x = np.round(rng.standard_normal(shape) * 2).astype(np.float32)  # few distinct values: many ties
    flat = x.reshape(-1)
    flat[::7], flat[3::11], flat[5::13] = np.nan, np.inf, -np.inf
    return {"x": x}


@pytest.mark.parametrize("shape,k,axis", [((1, 960), 20, 1), ((3, 17, 4), 5, 1), ((2, 9), 9, 1), ((4, 6), 1, 0)])
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_matches_the_stable_sort_of_the_ref_target(shape, k, axis, largest):
    model = _model(shape, k, axis, largest)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    rows, _ = p.executable.main.thread_plan()
    assert all(isinstance(r[0], Region) for r in rows) and "fg_top_k_" in p.executable.built.library.source
    assert any(KERNEL in {c.kind for c in r[0].table} for r in rows)
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    for _ in range(3):
        feeds = _inputs(shape)
        for got, want in zip(p.run(feeds), ref.run(feeds), strict=True):
            np.testing.assert_array_equal(got, want)
