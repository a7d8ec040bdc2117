"""condition_inputs: which inputs decide an `if` on their own; specialize(..., values): the program
for one value of them, its `if` replaced by the branch taken (numerics against ONNX Runtime)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.passes.specialize_shapes import specialize
from fusegraph.passes.specialize_values import condition_inputs
from tests.util import make_model, run_ort

n, F = helper.make_node, TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _branches():
    then = helper.make_graph([n("Mul", ["x", "x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2, 3])])
    other = helper.make_graph([n("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2, 3])])
    return then, other


def rate_model(cond_nodes, extra_inputs=None):
    """y = x*x if <condition> else -x, z = relu(y) + cast(m): m is an integer input read as data."""
    then, other = _branches()
    nodes = [*cond_nodes, n("If", ["c"], ["y"], then_branch=then, else_branch=other),
             n("Cast", ["m"], ["mf"], to=F), n("Relu", ["y"], ["r"]), n("Add", ["r", "mf"], ["z"])]
    inputs = {"x": RNG.standard_normal((2, 3)).astype(np.float32), "sr": np.array(16000, np.int64),
              "m": np.array(2, np.int32), **(extra_inputs or {})}
    return make_model(nodes, inputs, ["z", "y"], initializers={"k16": np.array(16000, np.int64)}), inputs


def test_an_integer_input_that_decides_an_if_is_named():
    model, _ = rate_model([n("Equal", ["sr", "k16"], ["c"])])
    assert condition_inputs(fusegraph.parse_onnx(model)) == ["sr"]  # m is read as data only


@pytest.mark.parametrize("cond_nodes,extra", [
    # the condition reads data too: knowing sr does not decide it
    ([n("ReduceSum", ["x"], ["s"], keepdims=0), n("Cast", ["sr"], ["srf"], to=F), n("Less", ["s", "srf"], ["c"])], {}),
    # a float input decides it: no key of exact values worth taking
    ([n("Greater", ["f", "zero"], ["c"])], {"f": np.array(1.5, np.float32)}),
    # a bool flag: the condition itself, left to the target's control flow
    ([n("Identity", ["flag"], ["c"])], {"flag": np.array(True)}),
])
def test_inputs_that_do_not_decide_an_if_alone_are_not_named(cond_nodes, extra):
    model, _ = rate_model(cond_nodes, extra)
    model.graph.initializer.append(helper.make_tensor("zero", F, [], [0.0]))
    assert condition_inputs(fusegraph.parse_onnx(model)) == []


def test_a_condition_on_an_input_and_a_shape_names_the_input():
    cond = [n("Shape", ["x"], ["s"]), n("ReduceSum", ["s"], ["total"], keepdims=0), n("Add", ["total", "sr"], ["t"]),
            n("Greater", ["t", "k16"], ["c"])]
    model, _ = rate_model(cond)
    assert condition_inputs(fusegraph.parse_onnx(model)) == ["sr"]


@pytest.mark.parametrize("sr", [16000, 8000])
def test_the_program_for_a_value_has_no_if_and_computes_what_onnx_runtime_does(sr):
    model, feeds = rate_model([n("Equal", ["sr", "k16"], ["c"])])
    feeds = dict(feeds, sr=np.array(sr, np.int64))
    p = fusegraph.parse_onnx(model)
    s = specialize(p, {k: v.shape for k, v in feeds.items()}, {"sr": sr})
    s.verify()
    assert set(s.modules) == {"main"} and "if" not in {i.op.name for i in s.main.instructions}
    assert s.get_parameter_names() == p.get_parameter_names()  # sr stays an input, read by nothing
    assert not s.main.get_parameter("sr").users
    s.compile("ref")
    for a, e in zip(s.run(feeds), run_ort(model, feeds), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6)
    assert "if" in {i.op.name for i in p.main.instructions}  # the program given is untouched
