"""Grouped-query attention (patterns_attention._grouped_kv): repeat_kv's export (k and v unsqueezed,
expanded over a group axis and reshaped to q's heads) is no copy; SDPA takes k and v with their own
heads (enable_gqa). Results against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

B, H, HKV, S, D = 2, 4, 2, 8, 16


def _repeat_kv(name: str) -> list:
    """[B, HKV, S, D] -> [B, H, S, D] as transformers' repeat_kv exports."""
    return [helper.make_node("Unsqueeze", [name, "axis2"], [f"{name}_u"]),
            helper.make_node("Expand", [f"{name}_u", "grouped"], [f"{name}_e"]),
            helper.make_node("Reshape", [f"{name}_e", "heads"], [f"{name}_r"])]


@pytest.mark.parametrize("masked", [False, True])
def test_grouped_kv_reach_sdpa_without_copies(gpu_target, masked):
    rng = np.random.default_rng(4)
    nodes = [*_repeat_kv("k"), *_repeat_kv("v"),
             helper.make_node("Transpose", ["k_r"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"])]
    scores = "ss"
    if masked:  # a causal additive mask
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        scores = "sm"
    nodes += [helper.make_node("Softmax", [scores], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v_r"], ["y"])]
    inits = {"axis2": np.array([2], np.int64), "grouped": np.array([B, HKV, H // HKV, S, D], np.int64),
             "heads": np.array([B, H, S, D], np.int64), "scale": np.array(D ** -0.5, np.float32),
             "mask": np.triu(np.full((S, S), -1e9, np.float32), 1)}
    x = {"q": rng.standard_normal((B, H, S, D)).astype(np.float32),
         "k": rng.standard_normal((B, HKV, S, D)).astype(np.float32),
         "v": rng.standard_normal((B, HKV, S, D)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits, opset=13)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    plan = p.executable.plan
    (attention,) = [s for s in plan.steps if s.kind == "attention"]
    assert attention.data["gqa"] and [i.shape.lens[1] for i in attention.inputs[1:3]] == [HKV, HKV]
    assert not [s for s in plan.steps if s.kind == "contiguous"]
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)
