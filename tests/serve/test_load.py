"""Dynamic batching under concurrent load: every answer is checked against ONNX Runtime."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tests.serve.util import FEATURES, ort_reference, skip_without_serve_deps

REQUESTS, CONCURRENCY = 320, 16

skip_without_serve_deps()


def test_concurrent_requests_are_batched_and_each_answered_once_and_right(server, mlp):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    rng = np.random.default_rng(42)
    xs = [rng.standard_normal((int(rng.integers(1, 4)), FEATURES)).astype(np.float32) for _ in range(REQUESTS)]
    refs = [ort_reference(mlp, x) for x in xs]
    local = threading.local()

    def client(k: int):
        # half over gRPC, half over HTTP; a client per thread (tritonclient's are not shared across threads)
        if not hasattr(local, "clients"):
            local.clients = (grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"),
                             httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}"))
        return local.clients[k % 2], (grpcclient, httpclient)[k % 2]

    def one(k: int):
        c, mod = client(k)
        i = mod.InferInput("x", list(xs[k].shape), "FP32")
        i.set_data_from_numpy(xs[k])
        r = c.infer("mlp", [i], request_id=str(k), client_timeout=30) if k % 2 == 0 else \
            c.infer("mlp", [i], request_id=str(k), timeout=30_000_000)
        rid = r.get_response().id if k % 2 == 0 else r.get_response()["id"]
        return rid, r.as_numpy("y"), r.as_numpy("s")

    before = server.repo.get("mlp").stats.snapshot()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        answers = list(pool.map(one, range(REQUESTS), timeout=120))
    after = server.repo.get("mlp").stats.snapshot()

    ids = [a[0] for a in answers]
    assert sorted(ids, key=int) == [str(k) for k in range(REQUESTS)]  # 0 lost, 0 duplicated
    wrong = [k for k, (_, y, s) in enumerate(answers)
             if not (np.allclose(y, refs[k]["y"], rtol=1e-5, atol=1e-5) and np.allclose(s, refs[k]["s"], rtol=1e-5, atol=1e-5))]
    assert wrong == []
    runs = after["execution_count"] - before["execution_count"]
    samples = after["inference_count"] - before["inference_count"]
    assert samples == sum(len(x) for x in xs)
    assert runs < REQUESTS, f"{REQUESTS} requests in {runs} runs: dynamic batching formed no batch"
    assert after["fail"].count == before["fail"].count
