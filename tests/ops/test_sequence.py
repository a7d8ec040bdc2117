"""Sequence and optional ops on the ref target against ONNX Runtime; sequence shapes, their text
form, and sequence inputs."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import InputError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.shape import Dim, OptionalShape, SequenceShape, Shape, join_shapes, shape_covers
from fusegraph.ir.text import parse_shape
from tests.util import check_vs_ort, make_model, run_fusegraph

F = TensorProto.FLOAT
rng = np.random.default_rng(0)
A = rng.standard_normal((2, 3)).astype(np.float32)
B = rng.standard_normal((2, 3)).astype(np.float32)
C = rng.standard_normal((2, 1)).astype(np.float32)


def _int(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [], [value]))


def _check(nodes, inputs, outputs, opset=17):
    return check_vs_ort(make_model(nodes, inputs, outputs, opset=opset), inputs)


def test_construct_at_length_insert_erase():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             _int("neg", -1), _int("one", 1),
             helper.make_node("SequenceAt", ["s", "neg"], ["last"]),
             helper.make_node("SequenceInsert", ["s", "a", "one"], ["s2"]),
             helper.make_node("SequenceErase", ["s2"], ["s3"]),
             helper.make_node("SequenceLength", ["s3"], ["n"]),
             helper.make_node("SequenceAt", ["s3", "one"], ["second"])]
    _check(nodes, {"a": A, "b": B, "c": C}, ["last", "n", "second"])


def test_construct_joins_element_dims():
    model = make_model([helper.make_node("SequenceConstruct", ["a", "c"], ["s"])], {"a": A, "c": C}, ["s"])
    shape = fusegraph.parse_onnx(model).main.outputs[0].shape
    assert shape == SequenceShape(DType.float32, Shape.dynamic(DType.float32, [2, Dim(1, 3)]), Dim.fixed(2))


@pytest.mark.parametrize("new_axis,axis", [(0, 0), (0, -1), (1, 0), (1, -1), (1, 2)])
def test_concat_from_sequence(new_axis, axis):
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)]
    model = make_model(nodes, {"a": A, "b": B}, ["y"])
    assert not fusegraph.parse_onnx(model).main.outputs[0].shape.is_dynamic  # two known elements
    check_vs_ort(model, {"a": A, "b": B})


@pytest.mark.parametrize("split,attrs", [
    (None, {"axis": 1}), (None, {"axis": 1, "keepdims": 0}), (np.array(2, np.int64), {"axis": 1}),
    (np.array([1, 2], np.int64), {"axis": -1}),
])
def test_split_to_sequence_then_concat(split, attrs):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    ins = ["x"] + ([] if split is None else ["split"])
    nodes = [helper.make_node("SplitToSequence", ins, ["s"], **attrs),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=int(attrs.get("keepdims", 1) == 0))]
    # as an initializer the split is a constant; as an input it is known only at run time
    for inits in ({}, {"split": split}) if split is not None else ({},):
        inputs = {"x": x} if split is None or inits else {"x": x, "split": split}
        model = make_model(nodes, inputs, ["n", "y"], initializers=inits or None)
        check_vs_ort(model, inputs)


def test_empty_sequence_filled_by_a_loop_keeps_its_element_shape():
    body = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_in", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
             helper.make_node("Loop", ["M", "", "empty"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)]
    inputs = {"M": np.array(3, np.int64), "x": A}
    model = make_model(nodes, inputs, ["y"])
    assert str(fusegraph.parse_onnx(model).main.outputs[0].shape) == "float32[{0..?},2,3]"
    check_vs_ort(model, inputs)


def test_sequence_map_with_a_tensor_input():
    body = helper.make_graph([helper.make_node("Mul", ["e", "t"], ["o"]),
                              helper.make_node("ReduceSum", ["o"], ["r"], keepdims=0)], "body",
                             [helper.make_tensor_value_info("e", F, [2, 3]), helper.make_tensor_value_info("t", F, [3])],
                             [helper.make_tensor_value_info("o", F, [2, 3]), helper.make_tensor_value_info("r", F, [])])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceMap", ["s", "t"], ["os", "rs"], body=body),
             helper.make_node("ConcatFromSequence", ["os"], ["y"], axis=0),
             helper.make_node("ConcatFromSequence", ["rs"], ["z"], axis=0, new_axis=1)]
    _check(nodes, {"a": A, "b": B, "t": rng.standard_normal(3).astype(np.float32)}, ["y", "z"])


def test_optionals():
    elem_type = helper.make_tensor_type_proto(F, [2, 3])
    nodes = [helper.make_node("Optional", ["a"], ["full"]),
             helper.make_node("Optional", [], ["empty"], type=elem_type),
             helper.make_node("OptionalHasElement", ["full"], ["has_full"]),
             helper.make_node("OptionalHasElement", ["empty"], ["has_empty"]),
             helper.make_node("OptionalGetElement", ["full"], ["value"])]
    _check(nodes, {"a": A}, ["has_full", "has_empty", "value"], opset=18)


def _sequence_input_model():
    graph = helper.make_graph([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "g",
                              [helper.make_tensor_sequence_value_info("s", F, ["n", 3])],
                              [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sequence_input():
    out = run_fusegraph(_sequence_input_model(), {"s": [A, C.repeat(3, axis=1), B]})
    np.testing.assert_array_equal(out[0], np.concatenate([A, C.repeat(3, axis=1), B]))


@pytest.mark.parametrize("value,match", [(A, "expected a sequence"), ([A, A.astype(np.float64)], r"\[1\]: expected dtype"),
                                         ([A[:, :2]], r"\[0\]: expected shape")])
def test_sequence_input_is_checked(value, match):
    program = fusegraph.parse_onnx(_sequence_input_model()).compile(fusegraph.get_target("ref"))
    with pytest.raises(InputError, match=match):
        program.run({"s": value})


# -- shapes -------------------------------------------------------------------------------------------
_dims = st.builds(lambda lo, span: Dim(lo, None if span is None else lo + span),
                  st.integers(0, 4), st.one_of(st.none(), st.integers(0, 3)))
_tensors = st.builds(lambda dims: Shape.dynamic(DType.float32, dims), st.lists(_dims, min_size=2, max_size=2))
_seqs = st.builds(SequenceShape, st.just(DType.float32), st.one_of(st.none(), _tensors), _dims)
_values = st.one_of(_tensors, _seqs, st.builds(OptionalShape, st.one_of(_tensors, _seqs)))


@given(_values)
def test_shape_text_round_trips(s):
    assert parse_shape(str(s)) == s


@given(_tensors | _seqs, _tensors | _seqs, st.booleans())
def test_join_covers_both(a, b, widen):
    if isinstance(a, Shape) != isinstance(b, Shape):
        return
    j = join_shapes(a, b, widen)
    assert shape_covers(j, a) and shape_covers(j, b)
    assert join_shapes(j, a, widen) == j  # a fixpoint: loop-carried shapes settle


def test_join_of_two_empty_sequences_is_a_fixpoint():
    """Found by hypothesis: an empty sequence of unknown elements joined with an empty one of known
    elements gave the known shape one way and None the other, so loop-carried shapes never settled."""

    unknown = SequenceShape(DType.float32, None, Dim.fixed(0))
    known = SequenceShape(DType.float32, Shape.dynamic(DType.float32, [Dim(0, None), Dim(0, None)]), Dim.fixed(0))
    for widen in (False, True):
        for a, b in ((unknown, known), (known, unknown)):
            j = join_shapes(a, b, widen)
            assert j.elem == known.elem
            assert join_shapes(j, a, widen) == j and join_shapes(j, b, widen) == j
