"""Shape and layout ops: ONNX converters against ONNX Runtime, shape rules, and the run-time paths.

Shape-deciding values (axes, pads, repeats, ...) are tested twice: as initializers, which become op
attributes, and as graph inputs, which take the `*_dynamic` ops.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import ParseError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Dim, Shape
from fusegraph.ops.movement import slice_bounds, slice_len
from tests.util import check_vs_ort, make_model, node_check

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


def op_names(model, **parse_kwargs):
    return [i.op.name for i in fusegraph.parse_onnx(model, **parse_kwargs).main.instructions]


# -- reshapes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [(6, 20), (0, -1), (2, 0, 0, 5), (-1,), (2, 3, 1, 4, 5)])
def test_reshape(dims):
    node_check("Reshape", {"x": X}, initializers={"s": i64(*dims)})


def test_reshape_allowzero_and_runtime_dims():
    node_check("Reshape", {"x": X}, {"allowzero": 1}, initializers={"s": i64(6, 4, 5)}, opset=14)
    node_check("Reshape", {"x": X, "s": i64(0, -1, 5)})  # dims known only at run time


@pytest.mark.parametrize("axis", [0, 1, 3, 4, -1, -3])
def test_flatten(axis):
    node_check("Flatten", {"x": X}, {"axis": axis})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset):
    x = rng.standard_normal((1, 3, 1, 5)).astype(np.float32)
    as_attr = opset < 13
    for op, axes in [("Squeeze", [0, -2]), ("Unsqueeze", [0, -1, 2])]:
        if as_attr:
            node_check(op, {"x": x}, {"axes": axes}, opset=opset)
        else:
            node_check(op, {"x": x}, initializers={"axes": i64(*axes)}, opset=opset)
            node_check(op, {"x": x, "axes": i64(*axes)}, opset=opset)  # run-time axes
    node_check("Squeeze", {"x": x}, opset=opset)  # no axes: every size-1 dim


def test_transpose():
    node_check("Transpose", {"x": X})
    node_check("Transpose", {"x": X}, {"perm": [0, 2, 3, 1]})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    x = rng.standard_normal((1, 8, 2, 3)).astype(np.float32)
    node_check("DepthToSpace", {"x": x}, {"blocksize": 2, "mode": mode})
    node_check("SpaceToDepth", {"x": X[:, :, :4, :4].copy()}, {"blocksize": 2})


# -- joining, splitting, slicing --------------------------------------------------------------------
def test_concat():
    node_check("Concat", {"a": X, "b": X[:, :2].copy()}, {"axis": 1})
    node_check("Concat", {"a": X, "b": X}, {"axis": -1})


def test_split():
    node_check("Split", {"x": X}, {"axis": 1}, n_outputs=3)
    node_check("Split", {"x": X}, {"axis": -1}, n_outputs=2, initializers={"s": i64(1, 4)}, opset=13)
    node_check("Split", {"x": X, "s": i64(3, 2)}, {"axis": 3}, n_outputs=2, opset=13)  # run-time sizes
    node_check("Split", {"x": X}, {"axis": 3, "num_outputs": 2}, n_outputs=2, opset=18)  # 3 + 2


SLICES = [  # starts, ends, axes, steps
    ([1], [3], [1], [1]),
    ([-3, 0], [-1, 100], [3, 2], [1, 2]),
    ([10], [-10], [2], [-1]),            # reversed, clamped at both ends
    ([-1, 4], [-100, 0], [0, 3], [-1, -2]),
    ([5], [1], [3], [1]),                # empty
    ([-4], [-4], [1], [-1]),             # ONNX clamps the start to 0 here, where numpy gives nothing
    ([0], [9223372036854775807], [0], [1]),  # the whole axis: no op at all
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    bounds = {"starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes), "steps": i64(*steps)}
    node_check("Slice", {"x": X}, initializers=bounds)
    node_check("Slice", {"x": X, **bounds})  # every bound known only at run time


def test_slice_opset1_and_identity_slice_is_free():
    node_check("Slice", {"x": X}, {"starts": [1, -2], "ends": [2, 1000], "axes": [1, 3]}, opset=9)
    model = make_model([helper.make_node("Slice", ["x", "s", "e"], ["y"])], {"x": X}, ["y"],
                       {"s": i64(0), "e": i64(2**62)}, opset=13)
    assert "slice" not in op_names(model)


def test_center_crop_pad():
    x = rng.standard_normal((6, 7, 3)).astype(np.float32)
    node_check("CenterCropPad", {"x": x}, initializers={"shape": i64(4, 10)}, attrs={"axes": [0, 1]}, opset=18)
    node_check("CenterCropPad", {"x": x, "shape": i64(3, 9, 3)}, opset=18)


# -- expanding, tiling, padding ---------------------------------------------------------------------
def test_expand_and_tile():
    y = rng.standard_normal((3, 1)).astype(np.float32)
    node_check("Expand", {"y": y}, initializers={"s": i64(2, 1, 4)})
    node_check("Expand", {"y": y, "s": i64(2, 3, 4)})
    node_check("Tile", {"y": y}, initializers={"r": i64(2, 3)})
    node_check("Tile", {"x": X}, initializers={"r": i64(1, 2, 1, 3)})
    node_check("Tile", {"y": y, "r": i64(3, 1)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    pads = i64(0, 1, 2, 1, 1, 0, 1, 2)
    opset = 19 if mode == "wrap" else 18
    node_check("Pad", {"x": X}, {"mode": mode}, initializers={"p": pads}, opset=opset)
    node_check("Pad", {"x": X, "p": pads}, {"mode": mode}, opset=opset)  # run-time pads


def test_pad_value_axes_and_negative_pads():
    inits = {"p": i64(1, -1, 2, -2), "v": np.array(1.5, np.float32), "a": i64(1, 3)}
    node_check("Pad", {"x": X}, initializers=inits, opset=18)
    node_check("Pad", {"x": X}, {"pads": [0, 1, 0, 0, 2, 0, 0, 0], "value": 3.0}, opset=2)


@pytest.mark.parametrize("pads", [i64(0, 0, -5, 0, 0, 0, 3, 0), i64(0, 0, 3, 0, 0, 0, -6, 0),
                                  i64(-1, 0, -5, 1, 1, 0, 3, 0)], ids=["-5+3", "+3-6", "two-axes"])
def test_a_constant_pad_whose_cut_passes_the_data(pads):
    """A negative pad removing more of an axis than its data eats into the other side's padding
    (ONNX Runtime: [0, 1, 2, 3] padded by (-5, 3) is [0, 0]); cut first, it gave [0, 0, 0]."""
    node_check("Pad", {"x": X}, {"mode": "constant"}, initializers={"p": pads}, opset=18, everywhere=True)
    node_check("Pad", {"x": X, "p": pads}, opset=18, everywhere=True)  # run-time pads


@pytest.mark.parametrize("mode, pads, message", [
    ("constant", i64(0, 0, -3, 0, 0, 0, -2, 0), r"pad widths \(-3, -2\) leave axis 2 \(of 4\) a negative size, -1"),
    ("edge", i64(0, 0, -5, 0, 0, 0, 3, 0), r"pad widths \(-5, 3\) remove more than the 4 elements of axis 2, which edge padding"),
], ids=["negative-size", "edge-past-the-data"])
def test_pads_that_leave_nothing_to_pad_from_are_refused(mode, pads, message):
    model = make_model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], {"x": X}, ["y"], {"p": pads},
                       opset=18)
    with pytest.raises(ParseError, match=message):  # (ONNX Runtime refuses them at run time)
        fusegraph.parse_onnx(model)


# -- tensors from shapes ----------------------------------------------------------------------------
def test_shape_and_size_are_literals_for_static_inputs():
    node_check("Shape", {"x": X}, {"start": 1, "end": -1}, opset=15)
    node_check("Size", {"x": X})
    model = make_model([helper.make_node("Shape", ["x"], ["y"])], {"x": X}, ["y"])
    assert "shape_of" not in op_names(model)


def test_range_constant_of_shape_eye_like():
    node_check("Range", {"a": np.array(10, np.int32), "b": np.array(-3, np.int32), "c": np.array(-4, np.int32)})
    node_check("Range", {"a": np.array(0.5, np.float32)},
               initializers={"b": np.array(3.0, np.float32), "c": np.array(0.7, np.float32)})
    value = helper.make_tensor("v", TensorProto.INT32, [1], [7])
    node_check("ConstantOfShape", {"s": i64(2, 3)}, {"value": value})
    node_check("ConstantOfShape", {}, initializers={"s": i64(2, 3)})
    node_check("EyeLike", {"x": X[0, 0]}, {"k": 1, "dtype": TensorProto.INT64})


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(upper):
    node_check("Trilu", {"x": X}, {"upper": upper})
    node_check("Trilu", {"x": X}, {"upper": upper}, initializers={"k": np.array(-1, np.int64)})
    node_check("Trilu", {"x": X, "k": np.array(2, np.int64)}, {"upper": upper})


@pytest.mark.parametrize("attr,value,expected", [
    ("value_float", 1.5, np.array(1.5, np.float32)),
    ("value_ints", [1, 2], i64(1, 2)),
    ("value_strings", ["a", "b"], np.array(["a", "b"], object)),
    ("value", helper.make_tensor("t", TensorProto.FLOAT16, [2], [1.0, 2.0]), np.array([1, 2], np.float16)),
])
def test_constant_forms(attr, value, expected):
    model = make_model([helper.make_node("Constant", [], ["y"], **{attr: value})], {}, ["y"], opset=13)
    (got,) = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run({})
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


# -- dynamic input dims -----------------------------------------------------------------------------
def _symbolic_batch(model):
    """Mark input 0's first dim symbolic, as exported models with a dynamic batch do."""
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model


def _shape_chain_model():
    """Reshape(x, [Shape(x)[0], 4, -1]) then Flatten: the pattern exporters write for a dynamic batch."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
             helper.make_node("Concat", ["b1", "rest"], ["dims"], axis=0),
             helper.make_node("Reshape", ["x", "dims"], ["r"]),
             helper.make_node("Flatten", ["r"], ["y"], axis=2)]
    inits = {"zero": np.array(0, np.int64), "zero1": i64(0), "rest": i64(4, -1)}
    return _symbolic_batch(make_model(nodes, {"x": np.zeros((1, 8, 5), np.float32)}, ["y"], inits, opset=13))


def test_dynamic_batch_reshape_keeps_known_dims():
    x = rng.standard_normal((3, 8, 5)).astype(np.float32)
    dyn = {"x": [(1, 4), 8, 5]}
    check_vs_ort(_shape_chain_model(), {"x": x}, map_dyn_input_dims=dyn)
    program = fusegraph.parse_onnx(_shape_chain_model(), map_dyn_input_dims=dyn)
    assert program.get_output_shapes()[0].dims == (Dim(4, 16), Dim.fixed(10))  # [b*4, 10]


def test_dynamic_inputs_through_views():
    x = rng.standard_normal((2, 3, 1, 5)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
             helper.make_node("Squeeze", ["t", "a"], ["s"]),
             helper.make_node("Slice", ["s", "st", "en", "ax"], ["c"]),
             helper.make_node("Shape", ["c"], ["y"])]
    model = _symbolic_batch(make_model(nodes, {"x": x}, ["c", "y"],
                                       {"a": i64(2), "st": i64(1), "en": i64(3), "ax": i64(0)}, opset=13))
    dyn = {"x": [(1, 8), 3, 1, 5]}
    check_vs_ort(model, {"x": x}, map_dyn_input_dims=dyn)
    c, y = fusegraph.parse_onnx(model, map_dyn_input_dims=dyn).get_output_shapes()
    assert c.dims == (Dim.fixed(2), Dim(1, 8), Dim.fixed(5)) and y == Shape.of(DType.int64, [3])


# -- shape rules ------------------------------------------------------------------------------------
def _spec_slice(dim, start, end, step):
    """The indices ONNX's Slice spec picks; it differs from Python slicing, which clamps a negative
    step's start below 0 to "empty" where ONNX clamps it to 0."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    lo, hi = (0, dim) if step > 0 else (0, dim - 1)
    start = min(max(start, lo), hi)
    end = min(max(end, lo if step > 0 else -1), hi)
    return list(range(start, end, step)) if dim else []


@given(dim=st.integers(0, 6), start=st.integers(-9, 9), end=st.integers(-9, 9),
       step=st.integers(-3, 3).filter(bool))
def test_slice_bounds_follow_the_spec(dim, start, end, step):
    s, e = slice_bounds(dim, start, end, step)
    expected = _spec_slice(dim, start, end, step)
    assert list(range(dim))[s:None if e < 0 else e:step] == expected
    assert slice_len(s, e, step) == len(expected)


def test_views_report_strides():
    x = Shape.of(DType.float32, [2, 3, 4])
    t = make_op("transpose", perm=(2, 0, 1)).infer_shape([x])
    assert t.strides == (1, 12, 4)
    assert make_op("unsqueeze", axes=(0, 3)).infer_shape([t]).strides[1:3] == (1, 12)
    assert make_op("unsqueeze", axes=(1,)).infer_shape([x]).standard
    assert make_op("squeeze", axes=(0,)).infer_shape([Shape.of(DType.float32, [1, 3])]).standard


def test_errors_name_the_node():
    model = make_model([helper.make_node("Squeeze", ["x", "a"], ["y"], name="sq")], {"x": X}, ["y"],
                       {"a": i64(1)}, opset=13)
    with pytest.raises(ParseError, match="'sq'.*not 1"):
        fusegraph.parse_onnx(model)
