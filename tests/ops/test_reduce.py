"""Reductions, arg-extrema and the softmax family: converters against ONNX Runtime, and the IR form.

Axes are tested as attributes (old opsets), as constant inputs (which become `reduce_*` attributes)
and as graph inputs (which take `reduce_dynamic`).
"""

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ShapeError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape
from tests.util import check_vs_ort, make_model, node_check

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4)).astype(np.float32)
POS = np.abs(X) + 0.1  # for the log-based reductions

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def i64(*v):
    return np.array(v, np.int64)


def op_names(model, **kw):
    return [i.op.name for i in fusegraph.parse_onnx(model, **kw).main.instructions]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((-1, 0), 0), ((), 1), ((), 0)])
def test_reduce_axes_input(op, axes, keepdims):
    inits = {"axes": i64(*axes)} if axes else None
    node_check(op, {"x": POS}, {"keepdims": keepdims}, initializers=inits, opset=18)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute(op):
    node_check(op, {"x": POS}, {"axes": [0, 2], "keepdims": 0}, opset=11)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2", "ReduceLogSumExp", "ReduceMax"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_runtime_axes(op, keepdims):
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    feeds = {"x": POS, "axes": i64(-1, 0)}
    model = make_model([node], feeds, ["y"], opset=18)
    assert "reduce_dynamic" in op_names(model)
    check_vs_ort(model, feeds)


def test_reduce_noop_with_empty_axes():
    node_check("ReduceSum", {"x": X}, {"noop_with_empty_axes": 1}, opset=18)
    node_check("ReduceSumSquare", {"x": X}, {"noop_with_empty_axes": 1}, opset=18)


def test_reduce_integer_and_bool():
    xi = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    node_check("ReduceSum", {"x": xi}, initializers={"axes": i64(1)}, opset=18)
    node_check("ReduceMax", {"x": xi}, initializers={"axes": i64(0)}, opset=18)
    node_check("ReduceMin", {"x": rng.random((3, 4)) > 0.5}, initializers={"axes": i64(1)}, opset=20)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceLogSumExp"])
def test_reduce_empty_axis(op):
    # An empty reduction gives the reduction's identity (0, 1, -inf, +inf, -inf).
    feeds = {"x": np.zeros((2, 0, 3), np.float32)}
    model = make_model([helper.make_node(op, ["x", "axes"], ["y"])], feeds, ["y"], {"axes": i64(1)}, opset=18)
    check_vs_ort(model, feeds, map_input_dims={"x": [2, 0, 3]})


def test_dynamic_batch():
    dyn = {"x": [(1, 4), (1, 8), 4]}
    node_check("ReduceMean", {"x": X}, {"keepdims": 0}, initializers={"axes": i64(-1)}, opset=18,
               map_dyn_input_dims=dyn)
    node_check("Softmax", {"x": X}, {"axis": -1}, opset=13, map_dyn_input_dims=dyn)
    node_check("ArgMax", {"x": X}, {"axis": 2, "keepdims": 0}, opset=13, map_dyn_input_dims=dyn)


def test_reductions_keep_dims_in_the_ir():
    model = make_model([helper.make_node("ReduceMean", ["x", "a"], ["y"], keepdims=0)], {"x": X}, ["y"],
                       {"a": i64(-1)}, opset=18)
    ins = fusegraph.parse_onnx(model).main.instructions
    mean = next(i for i in ins if i.op.name == "reduce_mean")
    assert mean.op.axes == (2,) and mean.shape.lens == (2, 3, 1)
    assert ins[-1].inputs[0].shape.lens == (2, 3)


def test_reduce_shape_errors():
    with pytest.raises(ShapeError):
        make_op("reduce_sum", axes=(3,)).compute_shape([Shape.of(DType.float32, [2, 3])])
    with pytest.raises(ShapeError):
        make_op("reduce_dynamic").compute_shape([Shape.of(DType.float32, [2]), Shape.of(DType.float32, [1])])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": -1, "keepdims": 0}, {"axis": 1, "select_last_index": 1}])
def test_arg_reduce(op, attrs):
    ties = np.round(X * 2) / 2  # repeated values exercise select_last_index
    node_check(op, {"x": ties}, attrs, opset=13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (13, 1), (13, -1), (13, 0)])
def test_softmax_family(op, opset, axis):
    node_check(op, {"x": X * 3}, {"axis": axis}, opset=opset)


def test_softmax_fp16_and_large_values():
    node_check("Softmax", {"x": (X * 4).astype(np.float16)}, rtol=2e-3, atol=1e-3)
    node_check("LogSoftmax", {"x": np.array([[1000.0, 1001.0, 1002.0]], np.float32)})
