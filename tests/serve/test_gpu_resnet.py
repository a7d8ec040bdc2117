"""On a GPU machine: ResNet-50 in float16 on a KIND_GPU instance (its own worker process, bound to GPU 0),
requests batched dynamically, answers checked against ONNX Runtime in float32 within fp16's tolerance.

    PYTHONPATH=. python -m pytest -q -m gpu tests/serve/test_gpu_resnet.py
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

# the gRPC client only: the H200 machine is given grpcio and tritonclient, not the HTTP client's gevent
pytest.importorskip("grpc", reason="needs grpcio (pip install 'fusegraph[serve]')")
pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]")
pytestmark = pytest.mark.gpu

CONFIG = """
max_batch_size: 4
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
parameters { key: "precision" value { string_value: "fp16" } }
dynamic_batching { max_queue_delay_microseconds: 50000 preferred_batch_size: [ 4 ] }
"""
# sent at once: the batcher's 50 ms wait gathers them (3 buckets, 1 2 4, compile at load: a short test)
REQUESTS = 4


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import onnx

    from fusegraph.models import get_model
    from fusegraph.serve import Server, ServerOptions

    root = tmp_path_factory.mktemp("gpu_repo")
    (root / "resnet50" / "1").mkdir(parents=True)
    onnx.save(get_model("resnet50"), root / "resnet50" / "1" / "model.onnx")
    (root / "resnet50" / "config.pbtxt").write_text(CONFIG)
    with Server(root, ServerOptions(http_port=None, grpc_port=0, metrics_port=None)) as server:
        yield server


def test_resnet50_fp16_on_a_gpu_instance_batches_and_matches_ort(gpu_server):
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    from fusegraph.models import get_model
    from tests.corpus.compare import REL_L2_TOL

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{gpu_server.grpc_port}")
    config = client.get_model_config("resnet50").config
    assert config.parameters["precision"].string_value == "fp16"
    assert [g.kind for g in config.instance_group] == [config.instance_group[0].KIND_GPU]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(REQUESTS)]
    got: list = [None] * REQUESTS
    start = threading.Barrier(REQUESTS)

    def one(k: int) -> None:
        inp = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
        inp.set_data_from_numpy(xs[k])
        start.wait()
        got[k] = client.infer("resnet50", [inp], client_timeout=600).as_numpy("logits")

    threads = [threading.Thread(target=one, args=(k,)) for k in range(REQUESTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    sess = ort.InferenceSession(get_model("resnet50").SerializeToString(), providers=["CPUExecutionProvider"])
    for x, y in zip(xs, got, strict=True):
        want = sess.run(None, {"input": x})[0]
        assert y.dtype == np.float32 and y.shape == want.shape
        assert np.linalg.norm(y - want) / np.linalg.norm(want) < REL_L2_TOL["fp16"]
    stats = client.get_inference_statistics("resnet50").model_stats[0]
    assert stats.inference_count == REQUESTS
    assert stats.execution_count < REQUESTS  # some requests ran together
    assert max(b.batch_size for b in stats.batch_stats) > 1
    client.close()

