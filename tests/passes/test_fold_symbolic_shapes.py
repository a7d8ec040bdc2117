"""fold_symbolic_shapes: shape arithmetic on named dynamic dims folds at compile time."""

import numpy as np
import pytest
from onnx import helper

import fusegraph
import fusegraph.errors
from fusegraph.errors import InputError
from fusegraph.ir import Dim
from fusegraph.passes import eliminate_dead_code
from fusegraph.passes.fold_symbolic_shapes import fold_symbolic_shapes
from tests.util import assert_close, make_model, run_ort

RNG = np.random.default_rng(0)
I64 = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "ax": np.array([0], np.int64),
       "two": np.array(2, np.int64), "four": np.array([4], np.int64)}


def chain_model():
    """y = Reshape(x, [Shape(x)[0], Shape(x)[1] * 2, 4]) on x [batch, seq, 8]; z = x[:, 0:Shape(x)[1]]."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "zero"], ["b"], axis=0), n("Gather", ["s", "one"], ["t"], axis=0),
             n("Unsqueeze", ["b", "ax"], ["bu"]), n("Mul", ["t", "two"], ["t2"]), n("Unsqueeze", ["t2", "ax"], ["tu"]),
             n("Concat", ["bu", "tu", "four"], ["shp"], axis=0), n("Reshape", ["x", "shp"], ["y"]),
             n("Unsqueeze", ["t", "ax"], ["end"]), n("Slice", ["x", "ax", "end", "ax1"], ["z"])]
    inits = {**I64, "ax1": np.array([1], np.int64)}
    model = make_model(nodes, {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)}, ["y", "z"], initializers=inits)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    return model


def parse(model=None, **dyn):
    return fusegraph.parse_onnx(model or chain_model(), map_dyn_input_dims=dyn or {"x": [Dim(1, 4), Dim(2, 64), 8]})


def test_the_chain_folds_to_a_reshape_with_known_dims():
    p = parse()
    names = [i.op.name for i in p.main]
    assert "shape_of" in names and "slice_dynamic" in names  # run-time shape arithmetic as parsed
    assert fold_symbolic_shapes(p.main)
    eliminate_dead_code(p.main)
    p.verify()
    assert not {i.op.name for i in p.main} & {"shape_of", "slice_dynamic", "concat", "gather"}
    (y, z) = p.get_output_shapes()
    assert str(y) == "float32[{1..4@batch},{4..128@2*seq},4]"
    assert str(z) == "float32[{1..4@batch},{2..64@seq},8]"  # x[:, 0:seq] is x
    assert not fold_symbolic_shapes(p.main)  # a fixpoint


@pytest.mark.parametrize("shape", [(1, 2, 8), (3, 17, 8), (4, 64, 8)])
def test_the_folded_program_matches_onnx_runtime(shape):
    p = parse()
    fold_symbolic_shapes(p.main)
    eliminate_dead_code(p.main)
    x = {"x": RNG.standard_normal(shape).astype(np.float32)}
    assert_close(p.compile("ref").run(x), run_ort(chain_model(), x), rtol=0, atol=0)


def test_without_names_nothing_folds():
    model = chain_model()
    for d in model.graph.input[0].type.tensor_type.shape.dim:
        d.dim_param = ""
    p = parse(model)
    before = [str(i.op) for i in p.main]
    fold_symbolic_shapes(p.main)
    eliminate_dead_code(p.main)
    assert "reshape_dynamic[dims=(), allowzero=False]" in {str(i.op) for i in p.main}
    assert any("slice_dynamic" in s for s in before) and any(i.op.name == "slice_dynamic" for i in p.main)


def cross_model():
    """h = Relu(x) [batch, seq, 8]; y = Reshape(h, [Shape(ids)[0], Shape(ids)[1], 2, 4]): the target is
    another input's dims, tied to x's by the names the model gives them (as exported BERTs do)."""
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["h"]), n("Shape", ["ids"], ["s"]), n("Gather", ["s", "zero"], ["b"], axis=0),
             n("Gather", ["s", "one"], ["t"], axis=0), n("Unsqueeze", ["b", "ax"], ["bu"]),
             n("Unsqueeze", ["t", "ax"], ["tu"]), n("Concat", ["bu", "tu", "two1", "four"], ["shp"], axis=0),
             n("Reshape", ["h", "shp"], ["y"]), n("ReduceSum", ["y", "ax3"], ["r"], keepdims=0),
             n("MatMul", ["r", "w"], ["out"])]
    inits = {**I64, "two1": np.array([2], np.int64), "ax3": np.array([3], np.int64),
             "w": RNG.standard_normal((2, 5)).astype(np.float32)}
    model = make_model(nodes, {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32), "ids": np.zeros((2, 3), np.int64)},
                       ["out"], initializers=inits)
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    return model


def test_a_reshape_to_another_inputs_dims_is_known_while_parsing():
    dyn = {"x": [Dim(1, 4), Dim(2, 64), 8], "ids": [Dim(1, 4), Dim(2, 64)]}
    model = cross_model()
    p = parse(model, **dyn)
    assert str(p.get_output_shapes()[0]) == "float32[{1..4@batch},{2..64@seq},5]"
    for shape in [(1, 2), (3, 9), (4, 64)]:
        x = {"x": RNG.standard_normal((*shape, 8)).astype(np.float32), "ids": np.zeros(shape, np.int64)}
        assert_close(p.compile("ref").run(x), run_ort(model, x), rtol=1e-5, atol=1e-5)
    # without the names the reshape's dims are known only at run time, and the MatMul after it
    # cannot be typed: the parse fails (as it does for exported BERTs whose dims are not named)
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[1].dim_param = ""
    with pytest.raises(fusegraph.errors.ShapeError, match="MatMul"):
        parse(model, **dyn)


def test_dims_one_name_ties_must_agree_in_a_run():
    dyn = {"x": [Dim(1, 4), Dim(2, 64), 8], "ids": [Dim(1, 4), Dim(2, 64)]}
    p = parse(cross_model(), **dyn).compile("ref")
    x = {"x": np.zeros((2, 5, 8), np.float32), "ids": np.zeros((2, 6), np.int64)}
    with pytest.raises(InputError, match="'ids': dim 1 is 6, but input 'x' dim 1 is 5"):
        p.run(x)


def test_a_name_given_two_ranges_becomes_two_symbols():
    n = helper.make_node
    model = make_model([n("Relu", ["x"], ["y"]), n("Neg", ["ids"], ["z"])],
                       {"x": np.zeros((2, 3), np.float32), "ids": np.zeros((2, 3), np.int64)}, ["y", "z"])
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[1].dim_param = "seq"
    specs = parse(model, x=[2, Dim(2, 64)], ids=[2, Dim(2, 32)]).get_parameter_shapes()
    assert str(specs["x"].dims[1].sym) == "seq" and str(specs["ids"].dims[1].sym) == "seq_"
