"""Gather/scatter, one-hot, sequence and selection ops on the ref target, checked against ONNX Runtime."""

import itertools

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import FusegraphError, ParseError, ShapeError
from fusegraph.ir.shape import Dim
from tests.util import make_model, node_check

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)
D = rng.standard_normal((4, 5)).astype(np.float32)
I64 = np.int64


def shapes_of(op_type, inputs, attrs=None, initializers=None, n_outputs=1, opset=17, **parse):
    """The output shapes fusegraph infers for one node (no run)."""
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, list(inputs) + list(initializers or {}), outs, **(attrs or {}))
    program = fusegraph.parse_onnx(make_model([node], inputs, outs, initializers, opset), **parse)
    return [o.shape for o in program.main.outputs]


# -- gathers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis,idx", [(0, [[0, -1], [2, 1]]), (-2, [3, -4, 0]), (2, -1)])
def test_gather(axis, idx):
    node_check("Gather", {"x": X, "i": np.array(idx, I64)}, {"axis": axis})


def test_gather_constant_int32_indices():
    node_check("Gather", {"x": X}, {"axis": 1}, initializers={"i": np.array([[3, -1]], np.int32)})


def test_gather_elements_smaller_indices():
    node_check("GatherElements", {"x": X, "i": rng.integers(-3, 3, (2, 4, 3)).astype(I64)}, {"axis": 0})
    node_check("GatherElements", {"x": X, "i": rng.integers(-5, 5, (2, 3, 2)).astype(I64)}, {"axis": -1})


@pytest.mark.parametrize("batch_dims,idx", [(0, [[0, 1], [2, -1]]), (1, [[[1, 2]], [[0, 4]], [[3, 3]]]),
                                            (1, [[1], [0], [3]])])
def test_gather_nd(batch_dims, idx):
    node_check("GatherND", {"x": X, "i": np.array(idx, I64)}, {"batch_dims": batch_dims})


# -- scatters -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    # reductions get duplicate indices: each duplicate must be applied
    idx = np.array([[1, 0, 3], [2, 4, 1]] if reduction == "none" else [[1, 0, 3], [3, 3, -4]], I64)
    upd = rng.standard_normal((2, 3)).astype(np.float32)
    node_check("ScatterElements", {"x": D, "i": idx, "u": upd}, {"axis": 1, "reduction": reduction}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    idx = np.array([[1], [3], [0]] if reduction == "none" else [[1], [3], [-3]], I64)
    upd = rng.standard_normal((3, 5)).astype(np.float32)
    node_check("ScatterND", {"x": D, "i": idx, "u": upd}, {"reduction": reduction}, opset=18)


def test_scatter_nd_elements_and_old_scatter():
    node_check("ScatterND", {"x": D, "i": np.array([[1, 2], [-1, 0]], I64), "u": np.array([5, 6], np.float32)})
    node_check("Scatter", {"x": D, "i": np.array([[1, 0], [2, 3]], I64), "u": np.ones((2, 2), np.float32)},
               {"axis": 0}, opset=9)


# -- one-hot, sequences -------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_one_hot(axis):
    # -4 wraps to 0; 5 is out of range: an all-off row
    node_check("OneHot", {"i": np.array([[1, -1, 5], [0, 2, -4]], I64)}, {"axis": axis},
               initializers={"d": np.array(4, I64), "v": np.array([0.5, 2], np.float32)}, opset=11)


def test_one_hot_runtime_depth():
    node_check("OneHot", {"i": np.array([1, 2, 3], I64), "d": np.array(4, I64)},
               initializers={"v": np.array([0, 1], np.float32)}, opset=11)
    (shape,) = shapes_of("OneHot", {"i": np.array([1, 2], I64), "d": np.array(4, I64)},
                         initializers={"v": np.array([0, 1], np.float32)}, opset=11)
    assert shape.dims == (Dim.fixed(2), Dim(0, None))


def test_reverse_sequence():
    node_check("ReverseSequence", {"x": X, "l": np.array([3, 1, 0, 2], I64)}, {"batch_axis": 1, "time_axis": 0})
    node_check("ReverseSequence", {"x": X[:, :, 0], "l": np.array([4, 1, 3], I64)}, {"batch_axis": 0, "time_axis": 1})


# -- data-dependent extents ---------------------------------------------------------------------------
def test_nonzero():
    b = rng.random((3, 4, 5)) > 0.6
    node_check("NonZero", {"x": b})
    node_check("NonZero", {"x": np.round(X)})
    (shape,) = shapes_of("NonZero", {"x": b})
    assert shape.dims == (Dim.fixed(3), Dim(0, 60))


@pytest.mark.parametrize("axis,cond", [(1, [True, False, True, True]), (-1, [False, True]), (None, None)])
def test_compress(axis, cond):
    cond = np.array(cond) if cond is not None else rng.random(60) > 0.5
    node_check("Compress", {"x": X, "c": cond}, {} if axis is None else {"axis": axis})


@pytest.mark.parametrize("sorted_,axis", itertools.product([0, 1], [None, 0, -1]))
def test_unique(sorted_, axis):
    u = rng.integers(0, 4, (4, 6)).astype(np.float32)
    u[2], u[:, 4] = u[0], u[:, 1]  # repeated rows and columns
    node_check("Unique", {"x": u}, {"sorted": sorted_} | ({} if axis is None else {"axis": axis}), n_outputs=4)


def test_unique_dynamic_shapes():
    y, first, inverse, counts = shapes_of("Unique", {"x": D}, {"axis": 1}, n_outputs=4)
    assert y.dims == (Dim.fixed(4), Dim(0, 5)) and first.dims == counts.dims == (Dim(0, 5),)
    assert inverse.dims == (Dim.fixed(5),)


# -- ordering -----------------------------------------------------------------------------------------
T = np.round(rng.standard_normal((3, 7)) * 2).astype(np.float32)  # rounded: many ties


@pytest.mark.parametrize("largest,axis", itertools.product([0, 1], [0, -1]))
def test_top_k_ties_by_lower_index(largest, axis):
    node_check("TopK", {"x": T}, {"largest": largest, "axis": axis}, initializers={"k": np.array([3], I64)},
               n_outputs=2, opset=11)


def test_top_k_dtypes_and_opsets():
    node_check("TopK", {"x": T.astype(np.int32)}, initializers={"k": np.array([7], I64)}, n_outputs=2, opset=11)
    node_check("TopK", {"x": (T + 5).astype(np.uint8)}, {"largest": 0}, initializers={"k": np.array([4], I64)},
               n_outputs=2, opset=11)
    node_check("TopK", {"x": T}, {"k": 2, "axis": 0}, n_outputs=2, opset=1)


def test_top_k_runtime_k():
    node_check("TopK", {"x": T, "k": np.array([2], I64)}, n_outputs=2, opset=11)
    values, indices = shapes_of("TopK", {"x": T, "k": np.array([2], I64)}, n_outputs=2, opset=11)
    assert values.dims == indices.dims == (Dim.fixed(3), Dim(0, 7))


@pytest.mark.parametrize("exclusive,reverse", itertools.product([0, 1], [0, 1]))
def test_cumsum(exclusive, reverse):
    attrs = {"exclusive": exclusive, "reverse": reverse}
    node_check("CumSum", {"x": X}, attrs, initializers={"a": np.array(-2, np.int32)})
    node_check("CumSum", {"x": X.astype(np.int32), "a": np.array(2, I64)}, attrs)  # axis known at run time


BOXES = np.concatenate([rng.random((2, 6, 2)), rng.random((2, 6, 2)) + 0.3], -1).astype(np.float32)
SCORES = rng.random((2, 3, 6)).astype(np.float32)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression(center_point_box):
    node_check("NonMaxSuppression", {"b": BOXES, "s": SCORES}, {"center_point_box": center_point_box},
               initializers={"m": np.array([3], I64), "iou": np.array([0.3], np.float32),
                             "st": np.array([0.2], np.float32)})


def test_non_max_suppression_optional_inputs():
    node_check("NonMaxSuppression", {"b": BOXES, "s": SCORES},
               initializers={"m": np.array([10], I64), "iou": np.array([0.1], np.float32)})
    node_check("NonMaxSuppression", {"b": BOXES, "s": SCORES})  # no max: nothing selected
    (shape,) = shapes_of("NonMaxSuppression", {"b": BOXES, "s": SCORES})
    assert shape.dims == (Dim(0, 36), Dim.fixed(3))


@pytest.mark.parametrize("center_point_box, sort_at_once, block", [
    (0, 4096, 64), (1, 4096, 64), (1, 0, 1), (0, 0, 5), (0, 4096, 1 << 30)])
def test_non_max_suppression_many_classes_and_overlaps(center_point_box, sort_at_once, block, monkeypatch):
    """A detector's case: clusters of overlapping boxes, flipped and empty boxes, tied scores,
    classes with no box above the threshold, a per-class limit some classes reach. Each way of
    computing it: one sort of all candidates or class by class (sort_at_once 0, as when there are
    many); candidates looked at one by one (block 1), in blocks, or all at once."""
    from fusegraph.ops import select

    monkeypatch.setattr(select, "_SORT_AT_ONCE", sort_at_once)
    monkeypatch.setattr(select, "_BLOCK", block)
    r = np.random.default_rng(7)
    centres = np.repeat(r.random((2, 30, 2)) * 100, 8, axis=1) + r.normal(0, 2, (2, 240, 2))
    sizes = r.random((2, 240, 2)) * 20 + 1
    sizes[:, ::37] = 0  # empty boxes
    if center_point_box:
        boxes = np.concatenate([centres, sizes], -1)
    else:  # corners, every third box with its corners swapped
        boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], -1)
        boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]
    scores = (r.random((2, 12, 240)) ** 3).round(2)  # rounded: many ties
    scores[:, 5] *= 0.1  # a class with nothing above the threshold
    for limit, score_thr in ((20, 0.1), (1000, 0.0), (3, 0.5)):
        node_check("NonMaxSuppression", {"b": boxes.astype(np.float32), "s": scores.astype(np.float32)},
                   {"center_point_box": center_point_box},
                   initializers={"m": np.array([limit], I64), "iou": np.array([0.4], np.float32),
                                 "st": np.array([score_thr], np.float32)})


# -- errors -------------------------------------------------------------------------------------------
def test_errors_name_the_node():
    with pytest.raises(ParseError, match=r"node 'out0' \(Gather\).*axis 3"):
        shapes_of("Gather", {"x": X, "i": np.array([0], I64)}, {"axis": 3})
    with pytest.raises(ShapeError, match="top_k"):
        shapes_of("TopK", {"x": T}, initializers={"k": np.array([8], I64)}, n_outputs=2, opset=11)


def test_out_of_range_index_fails_at_run_time():
    with pytest.raises(FusegraphError, match="gather"):
        node_check("Gather", {"x": X, "i": np.array([3], I64)})


def test_ir_text_round_trip():
    """Optional attributes (axis=None), tuple outputs and dynamic extents print and parse back."""
    x, cond = rng.random((3, 4)).astype(np.float32), np.array([True, False, True])
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"]), helper.make_node("Unique", ["v"], ["u"]),
             helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Compress", ["x", "c"], ["cx"]),
             helper.make_node("CumSum", ["x", "a"], ["cs"], exclusive=1),
             helper.make_node("OneHot", ["i", "d", "ov"], ["oh"])]
    inits = {"k": np.array([2], I64), "a": np.array(1, I64), "d": np.array(5, I64),
             "ov": np.array([0, 1], np.float32)}
    p = fusegraph.parse_onnx(make_model(nodes, {"x": x, "c": cond}, ["u", "nz", "cx", "cs", "oh"], inits, 13))
    text = p.to_text()
    assert "unique[axis=None, sorted=True]" in text and "nonzero(%0) : int64[2,{0..12}]" in text
    back = fusegraph.Program.from_text(text)
    assert back.to_text() == text
    ref = fusegraph.get_target("ref")
    for a, b in zip(back.compile(ref).run({"x": x, "c": cond}), p.compile(ref).run({"x": x, "c": cond})):
        np.testing.assert_array_equal(a, b)
