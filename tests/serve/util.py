"""What the serving tests share: a small batching ONNX model, its repository config, its ONNX Runtime
reference, free loopback ports, and the skip for an absent serve extra."""

from __future__ import annotations

import socket

import numpy as np
import pytest

_DEPS = [("grpc", "grpcio (pip install 'fusegraph[serve]')"), ("tritonclient.grpc", "tritonclient[grpc]"),
         ("tritonclient.http", "tritonclient's HTTP client (geventhttpclient)"), ("prometheus_client", "prometheus-client")]


def skip_without_serve_deps() -> None:
    """Skip the calling test module, with the reason, when a package the server or its tests need is
    absent (called at module level: a skip raised from a conftest would stop `pytest tests/serve`)."""
    for module, what in _DEPS:
        pytest.importorskip(module, reason=f"serving tests need {what}")

FEATURES, HIDDEN = 16, 8

CONFIG = """
name: "mlp"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 8 ] }, { name: "s" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 2000 preferred_batch_size: [ 4, 8 ] }
"""


def mlp_model(batch_dim="N"):
    """y = relu(x @ W + b), s = sum(x, axis=1): two outputs, a symbolic batch dim."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "B")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, HIDDEN]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch_dim, 1])], [w, b, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ort_reference(model, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, s = sess.run(["y", "s"], {"x": x})
    return {"y": y, "s": s}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_mlp_repo(root, config: str = CONFIG):
    """`root` as a repository of the mlp model under `config`; `root` back."""
    import onnx

    (root / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp_model(), root / "mlp" / "1" / "model.onnx")
    (root / "mlp" / "config.pbtxt").write_text(config)
    return root
