"""A small batching ONNX model in a Triton-layout repository, and a server on free loopback ports."""

from __future__ import annotations

import socket

import numpy as np
import pytest

pytest.importorskip("grpc", reason="serving tests need grpcio (pip install 'fusegraph[serve]')")
pytest.importorskip("tritonclient.grpc", reason="serving tests need tritonclient (pip install 'fusegraph[serve]')")
pytest.importorskip("tritonclient.http", reason="serving tests need tritonclient's HTTP client (geventhttpclient)")
pytest.importorskip("prometheus_client", reason="serving tests need prometheus-client")

from fusegraph.serve import Server, ServerOptions  # noqa: E402

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


@pytest.fixture(scope="session")
def mlp():
    return mlp_model()


@pytest.fixture(scope="session")
def repo(tmp_path_factory, mlp):
    import onnx

    root = tmp_path_factory.mktemp("repo")
    (root / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp, root / "mlp" / "1" / "model.onnx")
    (root / "mlp" / "config.pbtxt").write_text(CONFIG)
    # a model that fails to load: its state says why, and the others still serve
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(repo):
    opts = ServerOptions(http_port=0, grpc_port=0, metrics_port=0, default_target="cpu", cores=2)
    with Server(repo, opts) as s:
        yield s


@pytest.fixture
def grpc_client(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.close()


@pytest.fixture
def http_client(server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", concurrency=4)
    yield client
    client.close()
