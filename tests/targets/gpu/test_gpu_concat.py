"""Concats written in place by the gpu plan: a value split into consecutive slices that a concat
joins again (YOLO's C2f) lives in the concat's buffer itself, and inputs with other readers are
written into their slice too; results against ONNX Runtime (GPU, or Triton's interpreter)."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(2)


def test_split_then_concat_shares_the_buffer(gpu_target):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Sigmoid", ["c1"], ["a"]),
             helper.make_node("Split", ["a", "sizes"], ["a0", "a1"], axis=1),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["b"]),
             helper.make_node("Add", ["b", "a1"], ["r"]),
             helper.make_node("Concat", ["a0", "a1", "b", "r"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"])]
    inits = {"w1": rng.standard_normal((8, 3, 1, 1)).astype(np.float32),
             "w2": rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3,
             "w3": rng.standard_normal((5, 16, 1, 1)).astype(np.float32) * 0.3,
             "sizes": np.array([4, 4], np.int64)}
    x = {"x": rng.standard_normal((2, 3, 6, 6)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits, opset=13)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    plan = p.executable.plan
    concat = next(s for s in plan.steps if s.kind == "concat")
    assert concat.data["aliased"] == {0, 1, 2, 3}  # nothing left for the concat to copy
    assert sorted(start for _, _, start in plan.slices.values()) == [0, 8, 12]  # a, b (two readers), r
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)


def test_dense_block_concats_share_one_buffer(gpu_target):
    # DenseNet: each layer reads the concat of all earlier features; every concat is the front of the
    # block's last one, and each feature is written into it once, by its producer (the pool, the
    # convolutions): no concat copies anything
    nodes = [helper.make_node("MaxPool", ["x"], ["f0"], kernel_shape=[2, 2], strides=[2, 2])]
    inits, feats = {}, ["f0"]
    for k in range(1, 4):
        cat = f"cat{k}"
        nodes.append(helper.make_node("Concat", list(feats), [cat], axis=1))
        nodes += [helper.make_node("Relu", [cat], [f"r{k}"]),
                  helper.make_node("Conv", [f"r{k}", f"w{k}"], [f"f{k}"], pads=[1, 1, 1, 1])]
        inits[f"w{k}"] = rng.standard_normal((2, 3 + 2 * (k - 1), 3, 3)).astype(np.float32) * 0.3
        feats.append(f"f{k}")
    nodes += [helper.make_node("Concat", list(feats), ["cat4"], axis=1),
              helper.make_node("GlobalAveragePool", ["cat4"], ["y"])]
    x = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits, opset=13)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    plan = p.executable.plan
    concats = [s for s in plan.steps if s.kind == "concat"]
    assert len(concats) == 3  # cat1 (one input) is gone; cat2 and cat3 are cat4's front
    assert [len(s.inputs) - len(s.data["aliased"]) for s in concats] == [0, 0, 0]
    last = concats[-1].ins.uid
    assert all(c == last for c, _, _ in plan.slices.values())
    convs = [s.ins.uid for s in plan.steps if s.kind == "convolution"]
    assert sorted(plan.slices) == sorted([concats[0].inputs[0].uid] + convs + [s.ins.uid for s in concats[:-1]])
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)
