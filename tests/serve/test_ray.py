"""fusegraph.serve.ray on a local Ray cluster: replicas answer Python handle calls and v2 JSON over HTTP
like ONNX Runtime; autoscaling and one GPU per replica reach Ray's deployment options."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.util import FEATURES, free_port, mlp_model, ort_reference

ray = pytest.importorskip("ray", reason="the Ray Serve adapter needs ray[serve] (pip install 'fusegraph[ray]')")
pytest.importorskip("ray.serve")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()
    ray.shutdown()


def test_replicas_answer_handle_calls_and_v2_json_like_onnxruntime(cluster, tmp_path):
    import json
    import urllib.request

    import onnx
    from ray import serve

    from fusegraph.serve.ray import deployment

    onnx.save(mlp_model(), tmp_path / "mlp.onnx")
    handle = serve.run(deployment(tmp_path / "mlp.onnx", name="mlp", num_replicas=2, num_cpus=0.5,
                                  max_batch_size=8), name="mlp", route_prefix="/mlp")
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1 + k % 3, FEATURES)).astype(np.float32) for k in range(12)]
    answers = [handle.infer.remote({"x": x}) for x in xs]
    for x, a in zip(xs, answers, strict=True):
        np.testing.assert_allclose(a.result(timeout_s=120)["y"], ort_reference(mlp_model(), x)["y"], rtol=1e-5, atol=1e-5)
    assert handle.metadata.remote().result(timeout_s=60)["inputs"] == [{"name": "x", "datatype": "FP32",
                                                                       "shape": [-1, FEATURES]}]
    body = {"id": "r1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, FEATURES],
                                    "data": xs[1].reshape(-1).tolist()}]}
    req = urllib.request.Request(f"http://127.0.0.1:{cluster}/mlp", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        reply = json.loads(r.read())
    assert reply["id"] == "r1"
    y = next(o for o in reply["outputs"] if o["name"] == "y")
    np.testing.assert_allclose(np.array(y["data"], np.float32).reshape(y["shape"]),
                               ort_reference(mlp_model(), xs[1])["y"], rtol=1e-5, atol=1e-5)
    bad = urllib.request.Request(f"http://127.0.0.1:{cluster}/mlp", json.dumps({"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}).encode())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=60)
    assert e.value.code == 400 and "expected [N, 16]" in e.value.read().decode()
    assert len(serve.status().applications["mlp"].deployments["mlp"].replica_states) >= 1
    serve.delete("mlp")


def test_autoscaling_and_one_gpu_per_replica_reach_the_deployment_options(tmp_path):
    from fusegraph.serve.ray import deployment

    app = deployment(tmp_path / "m.onnx", target="gpu", autoscaling_config={"min_replicas": 1, "max_replicas": 4})
    dep = app._bound_deployment
    assert dep.ray_actor_options["num_gpus"] == 1
    assert dep._deployment_config.autoscaling_config.max_replicas == 4
    assert deployment(tmp_path / "m.onnx", num_replicas=3)._bound_deployment.num_replicas == 3
    assert "num_gpus" not in deployment(tmp_path / "m.onnx")._bound_deployment.ray_actor_options
