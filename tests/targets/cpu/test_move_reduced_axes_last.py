"""passes/move_reduced_axes_last.py: a fused_reduce over leading axes (YOLOv8's DFL softmax Q/DQ'd as
quantize_static writes it) runs as the generated kernel over the trailing axes of its transposed
inputs, with the reference's values; a lone softmax (numpy's kernel) and trailing reductions stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import eliminate_dead_code, generic_pipeline, run_pipeline
from fusegraph.targets.cpu.passes import move_reduced_axes_last
from tests.util import make_model, target_or_skip

LENS = (1, 4, 16, 300)  # YOLOv8's [1, 4, 16, anchors], transposed to [1, 16, 4, anchors]


def _dfl(qdq: bool):
    x = np.random.default_rng(0).standard_normal(LENS).astype(np.float32) * 3
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3])]
    inits = {}
    src = "t"
    if qdq:
        inits = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8),
                 "so": np.array(1 / 255, np.float32), "zo": np.array(0, np.uint8)}
        nodes += [helper.make_node("QuantizeLinear", ["t", "s", "z"], ["tq"]),
                  helper.make_node("DequantizeLinear", ["tq", "s", "z"], ["td"])]
        src = "td"
    nodes.append(helper.make_node("Softmax", [src], ["y" if not qdq else "p"], axis=1))
    if qdq:
        nodes.append(helper.make_node("QuantizeLinear", ["p", "so", "zo"], ["y"]))
    return make_model(nodes, {"x": x}, ["y"], inits, opset=13), {"x": x}


def _reductions(p) -> list[tuple[str, tuple[int, ...], int]]:
    """(op, reduced axes, rank) of each softmax / fused_reduce of the main module."""
    out = []
    for i in p.main:
        if i.op.name == "softmax":
            out.append(("softmax", (i.op.axis,), i.shape.ndim))
        elif i.op.name == "fused_reduce":
            out.append(("fused_reduce", i.op.axes, i.shape.ndim))
    return out


def test_leading_axis_reduction_runs_over_the_last():
    model, feeds = _dfl(True)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    assert _reductions(p) == [("fused_reduce", (3,), 4)]
    got = p.run(feeds)[0]
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    want = ref.run(feeds)[0]
    assert got.shape == want.shape == (1, 16, 4, 300) and got.dtype == want.dtype
    # the generated exp vs numpy's: a probability may land one step of 1/255 away
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    assert np.mean(got == want) > 0.99


def test_rewrite_keeps_values_on_ref():
    """The permuted fused_reduce on ref is the original bit for bit (the same numpy on other indices)."""
    model, feeds = _dfl(True)
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, generic_pipeline()[:-1] + [move_reduced_axes_last, eliminate_dead_code])
    assert _reductions(p) == [("fused_reduce", (3,), 4)]
    p.compile(fusegraph.get_target("ref"))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(feeds)[0], ref.run(feeds)[0])


@pytest.mark.parametrize("axis, qdq", [(-1, True), (1, False)])
def test_others_are_left_alone(axis, qdq):
    """A trailing reduction (the kernels take it) and a lone softmax over a leading axis (numpy's)."""
    model, _ = _dfl(qdq)
    model.graph.node[-2 if qdq else -1].attribute[0].i = axis
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, generic_pipeline()[:-1])
    before = p.to_text()
    run_pipeline(p, [move_reduced_axes_last])
    assert p.to_text() == before


@pytest.mark.parametrize("op, axes", [("ReduceMean", [1, 2]), ("ReduceMax", [0, 2]), ("ReduceSum", [1])])
def test_a_lone_reduction_over_leading_axes_is_moved_last(op, axes):
    """An NHWC global average pool (mean over H and W of [N, H, W, C]): transposed so the generated
    kernel reduces trailing axes; values as the reference's (a float sum in another order: close)."""
    x = np.random.default_rng(1).standard_normal((2, 6, 5, 8)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan  # max keeps it, as numpy's
    model = make_model([helper.make_node(op, ["x", "a"], ["y"], keepdims=1)], {"x": x}, ["y"],
                       {"a": np.array(axes, np.int64)}, opset=18)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    moved = [i for i in p.main if i.op.name.startswith("reduce_")]
    assert len(moved) == 1 and moved[0].op.axes == tuple(range(4 - len(axes), 4))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    for _ in range(2):
        np.testing.assert_allclose(p.run({"x": x})[0], ref.run({"x": x})[0], rtol=1e-6, atol=1e-6)
