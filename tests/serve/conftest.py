"""A Triton-layout repository of the small model, and a server on free loopback ports."""

from __future__ import annotations

import pytest

from fusegraph.serve import Server, ServerOptions
from tests.serve.util import CONFIG, mlp_model


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
