"""Random ops: seeded ones repeat ONNX's reference bit for bit; unseeded ones draw fresh values every
run and survive constant propagation and CSE. ONNX Runtime's generator differs, so values are
checked against the reference and against the distributions."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import fusegraph
from fusegraph.passes import PassManager
from fusegraph.passes.eliminate_common_subexpression import eliminate_common_subexpression
from fusegraph.passes.propagate_constant import propagate_constant
from tests.util import make_model, run_fusegraph

X = np.random.default_rng(0).uniform(0, 1, (3, 5)).astype(np.float32)


def model_of(op_type, inputs, n_out=1, opset=22, **attrs):
    outs = [f"y{k}" for k in range(n_out)]
    return make_model([helper.make_node(op_type, list(inputs), outs, **attrs)], inputs, outs, opset=opset)


def compiled(model):
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("ref"))
    return p


@pytest.mark.parametrize("op_type,inputs,attrs", [
    ("RandomUniform", {}, {"shape": [2, 3], "low": -2.0, "high": 5.0, "seed": 3.0}),
    ("RandomUniform", {}, {"shape": [4], "dtype": TensorProto.DOUBLE, "seed": 1.0}),
    ("RandomNormal", {}, {"shape": [2, 3], "mean": 1.0, "scale": 3.0, "seed": 7.0}),
    ("RandomUniformLike", {"x": X}, {"seed": 0.0}),
    ("RandomNormalLike", {"x": X}, {"dtype": TensorProto.DOUBLE, "seed": 2.0}),
    ("Bernoulli", {"x": X}, {"seed": 0.0}),
    ("Bernoulli", {"x": X.astype(np.float64)}, {"seed": 5.0, "dtype": TensorProto.INT32}),
])
def test_seeded_ops_repeat_the_reference(op_type, inputs, attrs):
    model = model_of(op_type, inputs, **attrs)
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    program = compiled(model)
    for _ in range(2):  # a seeded op repeats its values run after run
        got = program.run(inputs)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_unseeded_ops_draw_fresh_values():
    program = compiled(model_of("RandomUniform", {}, shape=[1000], low=2.0, high=3.0))
    a, b = program.run({})[0], program.run({})[0]
    assert a.dtype == np.float32 and a.min() >= 2.0 and a.max() < 3.0 and not np.array_equal(a, b)
    assert abs(a.mean() - 2.5) < 0.05


def test_random_ops_are_neither_folded_nor_merged():
    # Two identical unseeded nodes with no inputs: constant propagation must not freeze them, nor
    # CSE make them one.
    nodes = [helper.make_node("RandomNormal", [], ["a"], shape=[500]),
             helper.make_node("RandomNormal", [], ["b"], shape=[500]),
             helper.make_node("Sub", ["a", "b"], ["y"])]
    program = fusegraph.parse_onnx(make_model(nodes, {}, ["y"], opset=17))
    PassManager(verify="full").run(program, [propagate_constant, eliminate_common_subexpression])
    program.compile(fusegraph.get_target("ref"))
    assert sum(i.op.name == "random_normal" for i in program.main.instructions) == 2
    d1, d2 = program.run({})[0], program.run({})[0]
    assert d1.std() > 1.0 and not np.array_equal(d1, d2)  # var(a - b) = 2


def test_like_ops_follow_dynamic_dims():
    model = model_of("RandomUniformLike", {"x": X})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    x = np.zeros((7, 5), np.float32)
    assert run_fusegraph(model, {"x": x}, map_dyn_input_dims={"x": [(1, 8), 5]})[0].shape == (7, 5)


def test_bernoulli_probabilities():
    p = np.repeat(np.array([[0.0, 0.2, 0.9, 1.0]], np.float32), 2000, axis=0)
    y = run_fusegraph(model_of("Bernoulli", {"p": p}), {"p": p})[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.mean(axis=0), [0.0, 0.2, 0.9, 1.0], atol=0.03)


def test_multinomial_samples_softmax_of_the_logits():
    logits = np.log(np.array([[0.1, 0.6, 0.3], [1.0, 1e-9, 1e-9]], np.float32))
    model = model_of("Multinomial", {"x": logits}, opset=7, sample_size=4000, seed=1.0)
    program = compiled(model)
    y = program.run({"x": logits})[0]
    assert y.dtype == np.int32 and y.shape == (2, 4000)
    np.testing.assert_allclose(np.bincount(y[0], minlength=3) / 4000, [0.1, 0.6, 0.3], atol=0.03)
    assert (y[1] == 0).all()
    np.testing.assert_array_equal(program.run({"x": logits})[0], y)  # seeded: repeats
    y64 = run_fusegraph(model_of("Multinomial", {"x": logits}, opset=7, dtype=TensorProto.INT64), {"x": logits})[0]
    assert y64.dtype == np.int64 and y64.shape == (2, 1)
