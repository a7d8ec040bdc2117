"""Nodes are checked against the ONNX schema of their opset at parse: typed errors naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ModelLoadError, ParseError
from tests.util import check_vs_ort, make_model, run_ort

X = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}


def one(op_type, inputs=("x",), opset=17, inits=None, **attrs):
    return make_model([helper.make_node(op_type, list(inputs), ["y"], name="n0", **attrs)], X, ["y"], inits,
                      opset=opset)


@pytest.mark.parametrize("model, message", [
    (one("Add", ["x", "c"], inits={"c": np.ones((2, 3), np.int64)}),
     r"node 'n0' \(Add-14\): inputs 0 \('x'\) and 1 \('c'\) must have one type .*float.*int64"),
    (one("Concat", ["x", "x"]), r"node 'n0' \(Concat-13\): missing required attribute 'axis'"),
    (one("Relu", ["x", "x"]), r"node 'n0' \(Relu-14\): 2 inputs, it takes at most 1"),
    (one("Relu", foo=3), r"node 'n0' \(Relu-14\): unknown attribute 'foo'"),
    (one("Softmax", axis=1.5), r"attribute 'axis' must be INT, it is FLOAT"),
    (one("Neg", [""]), r"input 0 \('X'\) is required, but its name is empty"),
    (one("Not"), r"input 0 \('x'\) is tensor\(float\)"),
], ids=["mixed-types", "concat-axis", "extra-input", "unknown-attr", "attr-type", "blank-input", "type-not-allowed"])
def test_schema_violations_name_the_node(model, message):
    with pytest.raises(ParseError, match=message):
        fusegraph.parse_onnx(model)


def test_a_retired_attribute_says_which_opset_removed_it():
    # ignored, axes=[1] would make ReduceSum-13 reduce every axis: a wrong shape, silently
    with pytest.raises(ParseError, match=r"unknown attribute 'axes': opset 13 removed it from ReduceSum "
                                         r"\(ReduceSum-11 was the last version with it\) \(it is an input now\)"):
        fusegraph.parse_onnx(one("ReduceSum", opset=13, axes=[1]))
    check_vs_ort(one("ReduceSum", opset=11, axes=[1]), X)  # where it belongs, it still works


def test_two_nodes_writing_one_tensor():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(ParseError, match=r"node 'b' \(Neg\): output 'y' is already the output of node 'a'"):
        fusegraph.parse_onnx(make_model(nodes, X, ["y"]))
    with pytest.raises(ParseError, match="already a graph input"):
        fusegraph.parse_onnx(make_model([helper.make_node("Relu", ["x"], ["x"])], X, ["x"]))


def test_identity_with_an_empty_output_name():
    with pytest.raises(ParseError, match=r"node 'Identity' \(Identity-16\): output 0 .* name is empty"):
        fusegraph.parse_onnx(make_model([helper.make_node("Identity", ["x"], [""])], X, ["x"]))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.opset_import[0].__setattr__("version", 999), "opset 999 of domain 'ai.onnx' is not one fusegraph knows"),
    (lambda m: m.opset_import[0].__setattr__("version", 1), r"\(Relu-1\): opset 1 gives Relu-1, older than"),
    (lambda m: m.ClearField("opset_import"), "imports no default-domain .* but its nodes use that domain"),
    (lambda m: m.__setattr__("ir_version", 99), "IR version 99 is newer"),
    (lambda m: m.graph.input.append(m.graph.input[0]), r"graph inputs \['x'\] are declared twice"),
])
def test_model_level_refusals(edit, message):
    m = one("Relu")
    edit(m)
    with pytest.raises(ParseError, match=message):
        fusegraph.parse_onnx(m)


def test_an_op_unchanged_since_an_old_opset_is_parsed_there():
    b = {"x": np.array([True, False])}
    check_vs_ort(make_model([helper.make_node("Not", ["x"], ["y"])], b, ["y"], opset=1), b)


def test_ops_without_an_onnx_schema_are_left_to_their_converters():
    # LayerNormalization before opset 17 is ONNX Runtime's (default domain), contrib ops have no schema
    x = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    inits = {"s": np.ones(4, np.float32), "b": np.zeros(4, np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    check_vs_ort(make_model([node], x, ["y"], inits, opset=13), x)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.dims.__setitem__(slice(None), [-3]), r"initializer 'c': tensor 'c' has dims \[-3\]"),
    (lambda t: t.__setattr__("data_type", 99), "has data type 99, which ONNX does not define"),
    (lambda t: t.__setattr__("raw_data", t.raw_data[:5]), "cannot be read"),
])
def test_bad_initializers(edit, message):
    m = one("Add", ["x", "c"], inits={"c": np.ones((3,), np.float32)})
    edit(m.graph.initializer[0])
    with pytest.raises(ModelLoadError, match=message):
        fusegraph.parse_onnx(m)


def test_a_sparse_initializer_with_an_index_outside_its_dims():
    m = one("Add", ["x", "s"])
    vals = onnx.numpy_helper.from_array(np.ones(2, np.float32), "s")
    idx = onnx.numpy_helper.from_array(np.array([0, 99], np.int64), "i")
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(vals, idx, [2, 3]))
    with pytest.raises(ParseError, match=r"sparse tensor 's': an index is outside its dims \[2, 3\]"):
        fusegraph.parse_onnx(m)


def test_bias_and_clip_bounds_of_the_wrong_rank():
    xin = {"x": np.ones((1, 2, 3, 3), np.float32)}
    w = np.ones((4, 2, 1, 1), np.float32)
    conv = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])], xin, ["y"],
                      {"w": w, "b": np.zeros((4, 1), np.float32)})
    with pytest.raises(ParseError, match=r"bias float32\[4,1\] must be 1-D of the output's channel count"):
        fusegraph.parse_onnx(conv)
    clip = one("Clip", ["x", "lo"], inits={"lo": np.zeros((1, 1), np.float32)})
    with pytest.raises(ParseError, match="min must be a scalar"):
        fusegraph.parse_onnx(clip)
    check_vs_ort(one("Clip", ["x", "lo"], inits={"lo": np.full((1,), 2, np.float32)}), X)


@pytest.mark.parametrize("node, inits, message", [
    # numpy broadcasts a [4, 1, 1] C to [4, 2, 4]: ONNX Runtime refuses it (found by tests/fuzz)
    (helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=1), {"b": np.ones((4, 3), np.float32),
     "c": np.ones((4, 1, 1), np.float32)}, r"Gemm's C float32\[4,1,1\] is not unidirectionally broadcastable"),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[1, -2]), {}, r"perm \[1, -2\] is not a permutation"),
    (helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]), {"s": np.ones((3, 1), np.float32),
     "b": np.zeros(3, np.float32)}, r"scale float32\[3,1\] must be 1-D of the input's channel count"),
], ids=["gemm-c-rank-3", "transpose-negative-perm", "instance-norm-scale-rank-2"])
def test_what_onnx_runtime_refuses_is_refused(node, inits, message):
    model = make_model([node], X, ["y"], inits)
    with pytest.raises(Exception):  # noqa: B017  (whatever it raises: ORT refuses the model too)
        run_ort(model, X)
    with pytest.raises(ParseError, match=message):
        fusegraph.parse_onnx(model)


@pytest.mark.parametrize("k", [np.array([1], np.int64), np.array(-1, np.int64)])
def test_trilu_k_of_shape_one_as_onnx_runtime_accepts(k):
    check_vs_ort(one("Trilu", ["x", "k"], inits={"k": k}), X)


def test_scalar_inputs_of_more_dims_are_refused():
    # ORT: "delta in Range operator should be scalar like tensor"
    inits = {"s": np.array(0, np.int64), "l": np.array(5, np.int64), "d": np.ones((1, 1), np.int64)}
    node = helper.make_node("Range", ["s", "l", "d"], ["y"])
    with pytest.raises(ParseError, match=r"delta must be a scalar \(or of shape \[1\]\), it is int64\[1,1\]"):
        fusegraph.parse_onnx(make_model([node], X, ["y"], inits))
    inits["d"] = np.array(2, np.int64)
    check_vs_ort(make_model([node], X, ["y"], inits), X)


def _bn(outputs, param_shape=(2,), opset=15, **attrs):
    x = {"x": np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)}
    inits = {n: np.ones(param_shape, np.float32) for n in ("s", "b", "m", "v")}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs), **attrs)
    return make_model([node], x, [o for o in outputs if o], inits, opset=opset), x


@pytest.mark.parametrize("outputs, opset", [(["y", "mean"], 15), (["y", "mean"], 11)])
def test_batch_norm_output_counts(outputs, opset):
    with pytest.raises(ParseError, match=f"2 outputs: BatchNormalization at opset {opset}"):
        fusegraph.parse_onnx(_bn(outputs, opset=opset)[0])
    check_vs_ort(*_bn(["y"], opset=opset))


def test_batch_norm_parameters_must_be_one_per_channel():
    with pytest.raises(ParseError, match=r"scale float32\[2,1,1\] must be 1-D of the input's channel count"):
        fusegraph.parse_onnx(_bn(["y"], param_shape=(2, 1, 1))[0])
