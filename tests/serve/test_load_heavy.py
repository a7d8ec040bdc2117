"""The issue's load test: 10,000 requests at concurrency 64 over gRPC (and 2,000 at 16 over HTTP) on worker
processes, every answer checked against a local run: 0 lost, 0 wrong, 0 duplicated. Each request carries
an id and an input derived from that id, so an answer given to the wrong request cannot pass."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.serve.util import FEATURES, mlp_model, ort_reference, skip_without_serve_deps, write_mlp_repo

skip_without_serve_deps()

pytestmark = pytest.mark.slow


def _x(k: int) -> np.ndarray:
    """Request k's input: batch 1-3 (from k), values from k; distinct for every k."""
    n = 1 + k % 3
    return (np.arange(n * FEATURES, dtype=np.float32).reshape(n, FEATURES) / 97 + k / 1000).astype(np.float32)


@pytest.fixture(scope="module")
def loaded_server(tmp_path_factory):
    from fusegraph.serve import Server, ServerOptions

    root = write_mlp_repo(tmp_path_factory.mktemp("load"))
    with Server(root, ServerOptions(http_port=0, grpc_port=0, metrics_port=None, cores=2, isolation="process")) as s:
        yield s


def _run(server, protocol: str, requests: int, concurrency: int) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    mod = grpcclient if protocol == "grpc" else httpclient
    port = server.grpc_port if protocol == "grpc" else server.http_port
    # the local run every answer is checked against: ONNX Runtime on all inputs at once
    xs = [_x(k) for k in range(requests)]
    ref = ort_reference(mlp_model(), np.concatenate(xs))
    starts = np.cumsum([0] + [len(x) for x in xs])
    local = threading.local()
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def one(k: int):
        if not hasattr(local, "client"):
            local.client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        i = mod.InferInput("x", list(xs[k].shape), "FP32")
        i.set_data_from_numpy(xs[k])
        kw = {"client_timeout": 120} if protocol == "grpc" else {}
        r = local.client.infer("mlp", [i], request_id=f"req-{k}", **kw)
        rid = r.get_response().id if protocol == "grpc" else r.get_response()["id"]
        with lock:
            seen[rid] = seen.get(rid, 0) + 1
        y, s = r.as_numpy("y"), r.as_numpy("s")
        a, b = starts[k], starts[k + 1]
        return rid == f"req-{k}" and np.allclose(y, ref["y"][a:b], rtol=1e-5, atol=1e-5) and \
            np.allclose(s, ref["s"][a:b], rtol=1e-5, atol=1e-4)

    before = server.repo.get("mlp").stats.snapshot()
    with ThreadPoolExecutor(concurrency) as pool:
        right = list(pool.map(one, range(requests), timeout=900))
    after = server.repo.get("mlp").stats.snapshot()
    wrong = [k for k, ok in enumerate(right) if not ok]
    assert wrong == [], f"{len(wrong)} wrong answers, first {wrong[:10]}"
    assert sorted(seen) == sorted(f"req-{k}" for k in range(requests))      # 0 lost
    assert set(seen.values()) == {1}                                         # 0 duplicated
    assert after["success"].count - before["success"].count == requests
    assert after["fail"].count == before["fail"].count
    assert after["inference_count"] - before["inference_count"] == int(starts[-1])
    assert after["execution_count"] - before["execution_count"] < requests  # batches formed


def test_grpc_10000_requests_at_concurrency_64(loaded_server):
    _run(loaded_server, "grpc", 10_000, 64)


def test_http_2000_requests_at_concurrency_16(loaded_server):
    _run(loaded_server, "http", 2_000, 16)
