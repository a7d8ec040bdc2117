"""A small ONNX model with fusible chains for the profile, verify --per-layer and reduce tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn() -> onnx.ModelProto:
    """x[1,3,8,8] -> conv -> relu -> *scale -> +shift -> sigmoid -> global pool -> flatten -> fc -> tanh."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "b": rng.standard_normal(4).astype(np.float32) * 0.1,
        "scale": np.array(1.5, np.float32),
        "shift": np.array(-0.25, np.float32),
        "fc_w": rng.standard_normal((4, 5)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "scale"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "shift"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["a"], ["s"], name="sigmoid"),
        helper.make_node("GlobalAveragePool", ["s"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc_w"], ["g"], name="fc"),
        helper.make_node("Tanh", ["g"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
