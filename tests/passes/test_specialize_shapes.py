"""specialize: a program with dynamic input dims copied to static shapes, run-time shape values folded."""

import numpy as np
from onnx import helper

import fusegraph
from fusegraph.ir import Dim
from fusegraph.passes.specialize_shapes import specialize
from tests.util import make_model, run_ort

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def reshape_model():
    """y = Reshape(x, Shape(x)[0] x -1) @ w: a reshape whose dims are computed from a dynamic shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
             helper.make_node("Concat", ["b1", "minus1"], ["dims"], axis=0),
             helper.make_node("Reshape", ["x", "dims"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "zero1": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
             "w": randn(12, 5)}
    model = make_model(nodes, {"x": randn(2, 3, 4)}, ["y"], initializers=inits)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def test_specialize_leaves_no_dynamic_shape_and_no_runtime_shape_op():
    p = fusegraph.parse_onnx(reshape_model(), map_dyn_input_dims={"x": [Dim(1, 16), 3, 4]})
    assert any(i.op.name == "reshape_dynamic" for i in p.main.instructions)
    s = specialize(p, {"x": (5, 3, 4)})
    s.verify()
    assert not any(i.shape.is_dynamic for i in s.main.instructions)
    names = {i.op.name for i in s.main.instructions}
    assert not names & {"shape_of", "reshape_dynamic", "broadcast_like", "broadcast_for_dot"}
    assert s.get_output_shapes()[0].lens == (5, 5)
    # the generic program is untouched: still dynamic, still runs any batch
    assert p.get_parameter_shapes()["x"].dims[0] == Dim(1, 16)


def test_specialized_program_computes_what_onnx_runtime_does():
    model = reshape_model()
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 16), 3, 4]})
    for batch in (1, 7):
        x = {"x": randn(batch, 3, 4)}
        s = specialize(p, {"x": x["x"].shape}).compile("ref")
        np.testing.assert_allclose(s.run(x)[0], run_ort(model, x)[0], rtol=1e-5, atol=1e-5)


def test_matmul_by_a_weight_becomes_one_flat_product():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, {"x": randn(2, 3, 8)}, ["y"], initializers={"w": randn(8, 4)})
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 4), Dim(1, 9), 8]})
    s = specialize(p, {"x": (3, 5, 8)})
    (dot,) = [i for i in s.main.instructions if i.op.name == "dot"]
    assert [x.shape.lens for x in dot.inputs] == [(15, 8), (8, 4)]  # as the static parse writes it


def test_a_folded_shape_value_takes_only_its_own_nodes():
    """x is read after Shape(x) too (by Neg): folding Shape(x) while the copy has not reached that
    reader must not count x's producer (Relu) as absorbed into the literal."""
    nodes = [helper.make_node("Relu", ["x0"], ["x"], name="relu"), helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Neg", ["x"], ["n"], name="neg")]
    model = make_model(nodes, {"x0": randn(2, 3)}, ["s", "n"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x0": [Dim(1, 8), 3]})
    s = specialize(p, {"x0": (4, 3)})
    shape, neg = s.main.outputs
    assert shape.is_literal and list(shape.literal) == [4, 3]
    assert [n.name for n in shape.origin] == ["shape"]
    relu = neg.inputs[0]
    assert relu.op.name == "relu" and [n.name for n in relu.origin] == ["relu"]


def anchor_grid_model():
    """A detector head's anchor grid from its feature map's size: Range(0, W) over Shape(x), a
    ConstantOfShape and an Expand to the map's dims, added to x (YOLOv8's export writes these)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "three"], ["w"], axis=0),
             helper.make_node("Cast", ["w"], ["wf"], to=1),
             helper.make_node("Range", ["start", "wf", "step"], ["xs"]),
             helper.make_node("ConstantOfShape", ["s"], ["ones"], value=helper.make_tensor("v", 1, [1], [1.0])),
             helper.make_node("Expand", ["xs", "s"], ["grid"]),
             helper.make_node("Mul", ["grid", "ones"], ["g"]), helper.make_node("Add", ["x", "g"], ["y"])]
    inits = {"three": np.array(3, np.int64), "start": np.array(0.5, np.float32), "step": np.array(1.0, np.float32)}
    model = make_model(nodes, {"x": randn(1, 2, 3, 4)}, ["y"], initializers=inits)
    for k in (2, 3):
        model.graph.input[0].type.tensor_type.shape.dim[k].dim_param = f"d{k}"
    return model


def test_range_constant_of_shape_and_expand_of_known_values_become_static():
    model = anchor_grid_model()
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [1, 2, Dim(1, 64), Dim(1, 64)]})
    assert {"range", "constant_of_shape", "expand_dynamic"} <= {i.op.name for i in p.main.instructions}
    for lens in ((1, 2, 3, 4), (1, 2, 7, 5)):
        s = specialize(p, {"x": lens})
        s.verify()
        assert not any(i.shape.is_dynamic for i in s.main.instructions)
        assert not {i.op.name for i in s.main.instructions} & {"range", "constant_of_shape", "expand_dynamic"}
        x = {"x": randn(*lens)}
        np.testing.assert_allclose(s.compile("ref").run(x)[0], run_ort(model, x)[0], rtol=1e-6, atol=1e-6)
