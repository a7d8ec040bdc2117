"""Tiny ONNX models for the fusegraph.migraphx unit tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
B = np.array([0.1, -0.2, 0.3], np.float32)


def dense(extra_node: onnx.NodeProto | None = None) -> onnx.ModelProto:
    """y = relu(x @ W) + B, x: float32 [batch, 4]; `extra_node` (reading y, writing z) is appended."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "B"], ["y"], name="add")]
    out = "y"
    if extra_node is not None:
        nodes.append(extra_node)
        out = extra_node.output[0]
    graph = helper.make_graph(
        nodes, "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])


def dense_reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W, 0) + B
