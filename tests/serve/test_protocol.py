"""The KServe v2 protocol over gRPC and HTTP, driven by stock tritonclient against an in-process server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.serve.util import FEATURES, HIDDEN, ort_reference, skip_without_serve_deps

skip_without_serve_deps()


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, FEATURES)).astype(np.float32)


def _grpc_input(x):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def test_server_live_ready_metadata(grpc_client, http_client):
    assert grpc_client.is_server_live() and http_client.is_server_live()
    meta = grpc_client.get_server_metadata(as_json=True)
    assert meta["name"] == "fusegraph" and "model_repository" in meta["extensions"]
    assert http_client.get_server_metadata()["name"] == "fusegraph"
    # strict readiness: the broken model keeps the server from being ready, the good one serves
    assert not grpc_client.is_server_ready() and not http_client.is_server_ready()
    assert grpc_client.is_model_ready("mlp") and http_client.is_model_ready("mlp")
    assert not grpc_client.is_model_ready("broken") and not grpc_client.is_model_ready("nosuch")


def test_repository_index_names_the_failed_model(grpc_client, http_client):
    rows = {m["name"]: m for m in grpc_client.get_model_repository_index(as_json=True)["models"]}
    assert rows["mlp"]["state"] == "READY" and rows["mlp"]["version"] == "1"
    assert rows["broken"]["state"] == "UNAVAILABLE" and "model.onnx" in rows["broken"]["reason"]
    assert {m["name"] for m in http_client.get_model_repository_index()} == {"mlp", "broken"}


def test_model_metadata_and_config(grpc_client, http_client):
    for meta in (grpc_client.get_model_metadata("mlp", as_json=True), http_client.get_model_metadata("mlp")):
        (x,) = meta["inputs"]  # gRPC's JSON writes int64 as strings
        assert (x["name"], x["datatype"], [int(d) for d in x["shape"]]) == ("x", "FP32", [-1, FEATURES])
        assert [o["name"] for o in meta["outputs"]] == ["y", "s"]
    config = grpc_client.get_model_config("mlp").config
    assert config.max_batch_size == 8 and list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    http_config = http_client.get_model_config("mlp")
    assert http_config["max_batch_size"] == 8 and http_config["output"][0]["dims"] == [HIDDEN]
    assert http_config["instance_group"][0]["kind"] == "KIND_CPU"


@pytest.mark.parametrize("n", [1, 3, 8])
def test_grpc_infer_matches_onnxruntime(grpc_client, mlp, n):
    x = _x(n, seed=n)
    result = grpc_client.infer("mlp", [_grpc_input(x)], request_id=f"r{n}")
    ref = ort_reference(mlp, x)
    assert result.get_response().id == f"r{n}"
    for name in ("y", "s"):
        np.testing.assert_allclose(result.as_numpy(name), ref[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("binary", [True, False])
def test_http_infer_json_and_binary_match_onnxruntime(http_client, mlp, binary):
    import tritonclient.http as httpclient

    x = _x(5, seed=7)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    out = [httpclient.InferRequestedOutput("s", binary_data=binary)]
    result = http_client.infer("mlp", [i], outputs=out)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["s"]  # only what was asked for
    np.testing.assert_allclose(result.as_numpy("s"), ort_reference(mlp, x)["s"], rtol=1e-5, atol=1e-5)


def test_grpc_typed_contents(server, mlp):
    """A request with InferTensorContents (not raw bytes), through the generated stub itself."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    x = _x(2, seed=3)
    req = service_pb2.ModelInferRequest(model_name="mlp")
    t = req.inputs.add(name="x", datatype="FP32", shape=[2, FEATURES])
    t.contents.fp32_contents.extend(x.reshape(-1).tolist())
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=10)
    y = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(list(resp.outputs[0].shape))
    np.testing.assert_allclose(y, ort_reference(mlp, x)["y"], rtol=1e-5, atol=1e-5)


def test_grpc_async_and_streaming(grpc_client, mlp):
    import queue

    results: queue.Queue = queue.Queue()
    xs = [_x(k + 1, seed=100 + k) for k in range(4)]
    for k, x in enumerate(xs):
        grpc_client.async_infer("mlp", [_grpc_input(x)], callback=lambda result, error: results.put((result, error)),
                                request_id=str(k))
    grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for k, x in enumerate(xs):
            grpc_client.async_stream_infer("mlp", [_grpc_input(x)], request_id=str(10 + k))
        got = {}
        for _ in range(2 * len(xs)):
            r, e = results.get(timeout=20)
            assert e is None, e
            got[r.get_response().id] = r.as_numpy("y")
    finally:
        grpc_client.stop_stream()
    assert sorted(got) == sorted([str(k) for k in range(4)] + [str(10 + k) for k in range(4)])
    for k, x in enumerate(xs):
        ref = ort_reference(mlp, x)["y"]
        np.testing.assert_allclose(got[str(k)], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[str(10 + k)], ref, rtol=1e-5, atol=1e-5)


def test_statistics_count_the_requests(grpc_client, http_client):
    before = grpc_client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    grpc_client.infer("mlp", [_grpc_input(_x(2))])
    after = http_client.get_inference_statistics("mlp")["model_stats"][0]
    assert int(after["inference_stats"]["success"]["count"]) == int(before["inference_stats"]["success"]["count"]) + 1
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 2
    # perf_analyzer refuses statistics whose phases count differently ("compute counts must be the same")
    phases = ("compute_input", "compute_infer", "compute_output")
    counts = {p: int(after["inference_stats"][p]["count"]) for p in phases}
    assert len(set(counts.values())) == 1 and counts["compute_infer"] == int(after["inference_stats"]["success"]["count"])
    for b in after["batch_stats"]:
        assert len({int(b[p]["count"]) for p in phases}) == 1, b


def _metrics(server) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("nv_") and 'model="mlp"' in line:
            out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_metrics_under_triton_names_agree_with_statistics(server, grpc_client):
    grpc_client.infer("mlp", [_grpc_input(_x(3))])
    m = _metrics(server)
    stats = grpc_client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    assert m["nv_inference_request_success"] == int(stats["inference_stats"]["success"]["count"])
    assert m["nv_inference_count"] == int(stats["inference_count"])
    assert m["nv_inference_exec_count"] == int(stats["execution_count"])
    assert m["nv_inference_compute_infer_duration_us"] > 0 and m["nv_inference_queue_duration_us"] > 0
    assert "nv_inference_request_failure" in m


def _post(server, path: str, body: bytes, headers=None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=body, method="POST",
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


BAD_HTTP = [
    ("/v2/models/nosuch/infer", {"inputs": []}, 404, "unknown model 'nosuch'"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "q", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}]},
     400, "no input 'q'"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]},
     400, "datatype INT32, expected FP32"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [1, 15], "datatype": "FP32", "data": [0] * 15}]},
     400, "shape [1, 15], expected [N, 16]"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [9, 16], "datatype": "FP32", "data": [0] * 144}]},
     400, "batch 9 outside 1..8"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 15}]},
     400, "15 values, but shape [1, 16] needs 16"),
    ("/v2/models/mlp/infer", {"inputs": []}, 400, "lacks inputs ['x']"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}],
                              "outputs": [{"name": "zz"}]}, 400, "no output 'zz'"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}],
                              "outputs": [{"name": "y", "parameters": 5}]}, 400, "'parameters' must be dict"),
    ("/v2/models/mlp/infer", {"inputs": [{"name": "x", "shape": "1,16", "datatype": "FP32"}]}, 400,
     "'shape' must be list"),
    ("/v2/models/broken/infer", {"inputs": []}, 503, "not ready"),
]


@pytest.mark.parametrize("path,body,status,message", BAD_HTTP, ids=[m for *_, m in BAD_HTTP])
def test_http_bad_requests_get_status_and_message(server, path, body, status, message):
    code, answer = _post(server, path, json.dumps(body).encode())
    assert code == status and message in answer["error"], answer


def test_http_binary_byte_size_and_malformed_json(server):
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 64}}]}).encode()
    short = header + b"\0" * 60
    code, answer = _post(server, "/v2/models/mlp/infer", short, {"Inference-Header-Content-Length": str(len(header))})
    assert code == 400 and "runs past the 60 bytes" in answer["error"]
    code, answer = _post(server, "/v2/models/mlp/infer", b"{not json")
    assert code == 400 and "malformed" in answer["error"]


def test_http_body_over_the_size_limit_is_refused(server):
    limit = server.options.max_message_bytes
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/v2/models/mlp/infer", data=b"{}",
                                 method="POST", headers={"Content-Length": str(limit + 1)})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 413


def test_grpc_bad_requests_get_status_codes(grpc_client, server):
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as e:
        grpc_client.infer("nosuch", [_grpc_input(_x(1))])
    assert e.value.status() == "StatusCode.NOT_FOUND"
    wrong = grpcclient.InferInput("x", [1, FEATURES], "FP64")
    wrong.set_data_from_numpy(np.zeros((1, FEATURES), np.float64))
    with pytest.raises(InferenceServerException) as e:
        grpc_client.infer("mlp", [wrong])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "datatype FP64, expected FP32" in e.value.message()
    # raw bytes of the wrong length, which tritonclient would never send: through the stub
    req = service_pb2.ModelInferRequest(model_name="mlp")
    req.inputs.add(name="x", datatype="FP32", shape=[1, FEATURES])
    req.raw_input_contents.append(b"\0" * 60)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch, pytest.raises(grpc.RpcError) as e:
        service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "60 bytes of data" in e.value.details()


def test_grpc_message_over_the_size_limit_is_refused(server):
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    req = service_pb2.ModelInferRequest(model_name="mlp")
    req.raw_input_contents.append(b"\0" * (server.options.max_message_bytes + 1))
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}",
                               options=[("grpc.max_send_message_length", -1)]) as ch, \
            pytest.raises(grpc.RpcError) as e:
        service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=20)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_stream_answers_a_bad_request_with_its_error_and_goes_on(grpc_client, mlp):
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        bad = grpcclient.InferInput("x", [1, FEATURES + 1], "FP32")
        bad.set_data_from_numpy(np.zeros((1, FEATURES + 1), np.float32))
        grpc_client.async_stream_infer("mlp", [bad], request_id="bad")
        x = _x(2, seed=9)
        grpc_client.async_stream_infer("mlp", [_grpc_input(x)], request_id="good")
        answers = [results.get(timeout=20) for _ in range(2)]
    finally:
        grpc_client.stop_stream()
    errors = [e for r, e in answers if e is not None]
    good = [r for r, e in answers if e is None]
    assert len(errors) == 1 and "shape [1, 17], expected [N, 16]" in errors[0].message()
    assert len(good) == 1 and good[0].get_response().id == "good"
    np.testing.assert_allclose(good[0].as_numpy("y"), ort_reference(mlp, x)["y"], rtol=1e-5, atol=1e-5)


def test_failures_are_counted_and_a_failing_batch_leaves_the_model_serving(server, grpc_client, monkeypatch):
    from tritonclient.utils import InferenceServerException

    before = _metrics(server)["nv_inference_request_failure"]
    bad = _x(1)[:, :-1]
    with pytest.raises(InferenceServerException):
        grpc_client.infer("mlp", [_grpc_input(bad)])
    with pytest.raises(InferenceServerException, match="has no version '7'"):
        grpc_client.infer("mlp", [_grpc_input(_x(1))], model_version="7")
    executors = server.repo.get("mlp").scheduler.executors
    raised = []

    def crash_once(real):
        def execute(inputs, n):  # the model raising, as a crashing kernel would
            if raised:
                return real(inputs, n)
            raised.append(n)
            raise MemoryError("arena exhausted")
        return execute

    for ex in executors:  # whichever instance takes the batch
        monkeypatch.setattr(ex, "execute", crash_once(ex.execute))
    with pytest.raises(InferenceServerException) as e:
        grpc_client.infer("mlp", [_grpc_input(_x(1))])
    assert e.value.status() == "StatusCode.INTERNAL" and "MemoryError: arena exhausted" in e.value.message()
    assert grpc_client.infer("mlp", [_grpc_input(_x(2))]).as_numpy("y").shape == (2, HIDDEN)
    # the bad shape and the crashed batch count; a request for an absent version names no loaded model
    assert _metrics(server)["nv_inference_request_failure"] == before + 2
