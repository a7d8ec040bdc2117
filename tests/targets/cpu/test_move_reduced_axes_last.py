"""passes/move_reduced_axes_last.py: a softmax or fused_reduce over leading axes (YOLOv8's DFL softmax,
plain and Q/DQ'd as quantize_static writes it) runs as the generated kernel over the trailing axes of
its transposed inputs, with the reference's values; what cannot be permuted stays as it was."""

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


@pytest.mark.parametrize("qdq", [False, True])
def test_leading_axis_reduction_runs_over_the_last(qdq):
    model, feeds = _dfl(qdq)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    (kind, axes, nd), = _reductions(p)
    assert kind == ("fused_reduce" if qdq else "softmax") and axes == (nd - 1,)
    got = p.run(feeds)[0]
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    want = ref.run(feeds)[0]
    assert got.shape == want.shape == (1, 16, 4, 300) and got.dtype == want.dtype
    if qdq:  # the generated exp vs numpy's: a probability may land one step of 1/255 away
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        assert np.mean(got == want) > 0.99
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fused", [False, True])
def test_rewrite_keeps_values_on_ref(fused):
    """The permuted program on ref is the original bit for bit (the same numpy on other indices):
    a plain softmax, and the fused_reduce body the generic passes make of the Q/DQ'd one."""
    model, feeds = _dfl(True)
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, (generic_pipeline()[:-1] if fused else []) + [move_reduced_axes_last, eliminate_dead_code])
    kind = "fused_reduce" if fused else "softmax"
    assert _reductions(p) == [(kind, (3,), 4)]
    p.compile(fusegraph.get_target("ref"))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(feeds)[0], ref.run(feeds)[0])


def test_trailing_reduction_is_left_alone():
    x = np.zeros((2, 3, 8), np.float32)
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": x}, ["y"], opset=13)
    p = fusegraph.parse_onnx(model)
    before = p.to_text()
    run_pipeline(p, [move_reduced_axes_last])
    assert p.to_text() == before
