"""The Python API's typed errors: each mistake raises its FusegraphError subclass with a message
that names the culprit (file, op, node, opset, shapes, input)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import (
    FusegraphError,
    InputError,
    ModelLoadError,
    ShapeError,
    TargetError,
    UnknownModelError,
    UnsupportedOpError,
)


def model(nodes, inputs, outputs=("z",), opset=17, extra_opsets=None) -> onnx.ModelProto:
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    return helper.make_model(helper.make_graph(nodes, "g", vis, outs), opset_imports=opsets, ir_version=8)


def relu_model() -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["z"], name="relu")], {"x": ["N", 3]})


@pytest.fixture
def compiled():
    p = fusegraph.parse_onnx(relu_model(), map_input_dims={"x": [2, 3]})
    return p.compile(fusegraph.get_target("ref"))


def message(excinfo) -> str:
    return str(excinfo.value)


# -- loading ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"\x08\x01garbage\xff\xff", b""], ids=["malformed", "empty"])
def test_malformed_bytes(data):
    with pytest.raises(ModelLoadError) as e:
        fusegraph.parse_onnx(data)
    assert "not a valid ONNX model" in message(e)


def test_truncated_file(tmp_path):
    whole = relu_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ModelLoadError) as e:
        fusegraph.parse_onnx(path)
    assert "not a valid ONNX model" in message(e) and "truncated" in message(e)


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError) as e:
        fusegraph.parse_onnx(tmp_path / "absent.onnx")
    assert "no such model file" in message(e) and "absent.onnx" in message(e)


# -- parsing ---------------------------------------------------------------------------------------
def test_unknown_op_names_op_node_and_opset():
    m = model([helper.make_node("FrobnicateTensor", ["x"], ["z"], name="frob_1")], {"x": [2]}, opset=13)
    with pytest.raises(UnsupportedOpError) as e:
        fusegraph.parse_onnx(m)
    assert "FrobnicateTensor" in message(e) and "'frob_1'" in message(e) and "opset 13" in message(e)
    assert (e.value.op_type, e.value.node, e.value.opset) == ("FrobnicateTensor", "frob_1", 13)


def test_unknown_domain_names_the_domain():
    node = helper.make_node("Fancy", ["x"], ["z"], name="f", domain="com.example")
    with pytest.raises(UnsupportedOpError) as e:
        fusegraph.parse_onnx(model([node], {"x": [2]}, extra_opsets={"com.example": 2}))
    assert "com.example.Fancy" in message(e) and "opset 2" in message(e)


def test_shape_inference_failure_names_node_and_shapes():
    m = model([helper.make_node("Add", ["a", "b"], ["z"], name="add_7")], {"a": [2, 3], "b": [4]})
    with pytest.raises(ShapeError) as e:
        fusegraph.parse_onnx(m)
    assert "'add_7'" in message(e) and "Add" in message(e)
    assert "[2,3]" in message(e) and "[4]" in message(e)


def test_shape_error_from_a_defaulted_dim_names_it():
    reshape = [helper.make_node("Reshape", ["x", "s"], ["z"], name="r")]
    shape = helper.make_tensor("s", TensorProto.INT64, [4], [-1, 3, 8, 8])
    m = model(reshape, {"x": ["batch", 3, "height", "width"]})
    m.graph.initializer.append(shape)
    with pytest.raises(ShapeError) as e:
        fusegraph.parse_onnx(m)
    assert "default_dim_value=1: x: 'batch', 'height', 'width'" in message(e) and "map_input_dims" in message(e)
    fusegraph.parse_onnx(m, map_input_dims={"x": [2, 3, 8, 8]})  # the hint was right
    with pytest.raises(ShapeError) as e:
        fusegraph.parse_onnx(m, map_input_dims={"x": [1, 3, 2, 2]})  # no default: no hint
    assert "default_dim_value" not in message(e)


def test_map_input_dims_of_an_unknown_input():
    with pytest.raises(FusegraphError) as e:
        fusegraph.parse_onnx(relu_model(), map_input_dims={"y": [1, 3]})
    assert "'y'" in message(e) and "'x'" in message(e)


# -- running ---------------------------------------------------------------------------------------
def test_missing_input(compiled):
    with pytest.raises(InputError) as e:
        compiled.run({})
    assert "missing" in message(e) and "'x'" in message(e)


def test_extra_input(compiled):
    with pytest.raises(InputError) as e:
        compiled.run({"x": np.zeros((2, 3), np.float32), "bias": np.zeros(3, np.float32)})
    assert "unknown" in message(e) and "'bias'" in message(e) and "'x'" in message(e)


def test_wrong_shape_input(compiled):
    with pytest.raises(InputError) as e:
        compiled.run({"x": np.zeros((2, 4), np.float32)})
    assert "'x'" in message(e) and "expected shape [2,3]" in message(e) and "got [2,4]" in message(e)


def test_wrong_dtype_input(compiled):
    with pytest.raises(InputError) as e:
        compiled.run({"x": np.zeros((2, 3), np.float64)})
    assert "'x'" in message(e) and "expected dtype float32" in message(e) and "float64" in message(e)


def test_run_before_compile():
    with pytest.raises(FusegraphError) as e:
        fusegraph.parse_onnx(relu_model()).run({"x": np.zeros((1, 3), np.float32)})
    assert "compile" in message(e)


# -- targets and models ----------------------------------------------------------------------------
def test_unknown_target():
    with pytest.raises(TargetError) as e:
        fusegraph.get_target("tpu")
    assert "'tpu'" in message(e) and "ref" in message(e)


def test_compile_takes_a_targets_name():
    p = fusegraph.parse_onnx(relu_model(), map_input_dims={"x": [2, 3]}).compile("ref")
    assert p.target_name == "ref"
    np.testing.assert_array_equal(p.run({"x": -np.ones((2, 3), np.float32)})[0], np.zeros((2, 3), np.float32))
    with pytest.raises(TargetError) as e:
        fusegraph.parse_onnx(relu_model()).compile("tpu")
    assert "'tpu'" in message(e)


def test_unknown_model_name_lists_the_zoo():
    from fusegraph.driver.models import builtin_names, resolve_model

    with pytest.raises(UnknownModelError) as e:
        resolve_model("resnet51")
    assert "'resnet51'" in message(e)
    if builtin_names():  # the zoo is importable
        assert "resnet50" in message(e)
