"""Shape values of dynamic tensors the frontend knows while parsing: a fixed dim of a dynamic tensor
is a constant, and a slice that keeps a dynamic dim whole is no slice of it (silero-vad's STFT and
decoder, with a dynamic batch, need both)."""

import numpy as np
from onnx import TensorProto, helper

import fusegraph
from fusegraph.ir import Dim
from tests.util import assert_close, make_model, run_ort

INT_MAX = np.iinfo(np.int64).max


def batch_free(model):
    """The model with its input's dim 0 declared unnamed-symbolic (ONNX Runtime then takes any batch)."""
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "?"
    return model


def whole_slice_model():
    """y = x[0:INT_MAX, 1:3] on x [batch, 4]: as exporters write x[:, 1:3]."""
    inits = {"s": np.array([0, 1], np.int64), "e": np.array([INT_MAX, 3], np.int64), "a": np.array([0, 1], np.int64)}
    return batch_free(make_model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
                                 {"x": np.zeros((2, 4), np.float32)}, ["y"], initializers=inits))


def test_a_slice_that_keeps_a_dynamic_dim_whole_slices_only_the_others():
    model = whole_slice_model()
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 8), 4]})
    assert "slice_dynamic" not in {i.op.name for i in p.main}
    assert str(p.get_output_shapes()[0]) == "float32[{1..8},2]"
    p.compile("ref")
    for b in (1, 5):
        x = {"x": np.arange(b * 4, dtype=np.float32).reshape(b, 4)}
        assert_close(p.run(x), run_ort(model, x))


def squeeze_if_model():
    """y = Squeeze(x, -1) if Shape(x)[-1] == 1 else x: the branches differ in rank, the condition reads a
    fixed dim of the dynamic x (silero-vad's decoder)."""
    n = helper.make_node
    then = helper.make_graph([n("Squeeze", ["x", "m1"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([n("Identity", ["x"], ["o"])], "else", [],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "m1"], ["last"], axis=0), n("Equal", ["last", "one"], ["c"]),
             n("Squeeze", ["c"], ["c0"]), n("If", ["c0"], ["y"], then_branch=then, else_branch=other)]
    inits = {"m1": np.array([-1], np.int64), "one": np.array([1], np.int64)}
    return batch_free(make_model(nodes, {"x": np.zeros((2, 3, 1), np.float32)}, ["y"], initializers=inits))


def test_a_condition_on_a_fixed_dim_of_a_dynamic_tensor_is_known_while_parsing():
    model = squeeze_if_model()
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 8), 3, 1]})
    assert "if" not in {i.op.name for i in p.main}  # the branch is chosen while parsing
    assert str(p.get_output_shapes()[0]) == "float32[{1..8},3]"
    p.compile("ref")
    for b in (1, 6):
        x = {"x": np.random.default_rng(b).standard_normal((b, 3, 1)).astype(np.float32)}
        assert_close(p.run(x), run_ort(model, x))
