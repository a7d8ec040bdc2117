"""Shapes, ranks and branches that depend on input values: the ValueDependentError that says so,
parse_onnx's map_input_values that resolves it, and the onnx backend's per-value programs, against
ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.backend import FusegraphBackend
from fusegraph.errors import InputError, ParseError, ValueDependentError
from tests.util import assert_close, make_model, run_ort

X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


def _squeeze_model():
    # y = Squeeze(Reshape(x, s)): which dims are 1, so the rank of y, depends on the values of s
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Squeeze", ["r"], ["y"])]
    return make_model(nodes, {"x": X, "s": np.array([2, 3], np.int64)}, ["y"], opset=13)


def _if_model():
    # then: a scalar (the sum of x); else: x itself: the rank of y depends on c
    g = [helper.make_graph([helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0)], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)]),
         helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])]
    node = helper.make_node("If", ["c"], ["y"], then_branch=g[0], else_branch=g[1])
    return make_model([node], {"c": np.array(True), "x": X}, ["y"], opset=13)


@pytest.mark.parametrize("model,name", [(_squeeze_model, "s"), (_if_model, "c")])
def test_value_dependent_rank_is_a_typed_error(model, name):
    with pytest.raises(ValueDependentError, match="known only at run time"):
        fusegraph.parse_onnx(model())


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("s", [(1, 6), (6, 1), (2, 3), (1, 1, 6, 1)])
def test_backend_compiles_per_shape_value(target, s):
    model = _squeeze_model()
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_value = len(s)
    feeds = {"x": X, "s": np.array(s, np.int64)}
    rep = type("B", (FusegraphBackend,), {"target": target}).prepare(model)
    assert_close(list(rep.run(feeds)), run_ort(model, feeds))


@pytest.mark.parametrize("c", [True, False])
def test_map_input_values_resolves_a_runtime_branch(c):
    model = _if_model()
    program = fusegraph.parse_onnx(model, map_input_values={"c": np.array(c)})
    assert program.get_parameter_names() == ["x"]  # c is a constant now
    got = program.compile(fusegraph.get_target("ref")).run({"x": X})
    assert_close(got, run_ort(model, {"c": np.array(c), "x": X}))
    rep = type("B", (FusegraphBackend,), {"target": "ref"}).prepare(model)
    assert_close(list(rep.run([np.array(c), X])), run_ort(model, {"c": np.array(c), "x": X}))


def test_map_input_values_are_checked():
    with pytest.raises(InputError, match=r"map_input_values\['s'\] is int32"):
        fusegraph.parse_onnx(_squeeze_model(), map_input_values={"s": np.array([6, 1], np.int32)})
    with pytest.raises(InputError, match=r"has shape \[3\]"):
        fusegraph.parse_onnx(_squeeze_model(), map_input_values={"s": np.array([6, 1, 1], np.int64)})
    with pytest.raises(ParseError, match="unknown input"):
        fusegraph.parse_onnx(_squeeze_model(), map_input_values={"t": np.array([6, 1], np.int64)})
