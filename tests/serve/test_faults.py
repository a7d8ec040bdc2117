"""Faults with process isolation: a worker killed under load fails only the batch it ran and is restarted;
one killed while idle fails nothing; the wire between the server and its workers carries every datatype."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.serve.util import FEATURES, mlp_model, ort_reference, skip_without_serve_deps, write_mlp_repo

skip_without_serve_deps()


def test_wire_round_trips_every_datatype_and_shape():
    from fusegraph.serve import wire
    from fusegraph.serve.tensors import DATATYPES

    rng = np.random.default_rng(3)
    tensors = {f"t_{name}": (rng.standard_normal((2, 3)) * 10).astype(dt.numpy) for name, dt in DATATYPES.items()}
    tensors["scalar"] = np.float32(2.5).reshape(())
    tensors["empty"] = np.zeros((0, 4), np.int64)
    tensors["strided"] = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]  # not contiguous
    a, b = socket.socketpair()
    with a, b:
        sender = threading.Thread(target=wire.send, args=(a, {"op": "run", "n": 2}, tensors))
        sender.start()
        header, got = wire.recv(b)
        sender.join(5)
    assert header == {"op": "run", "n": 2}
    assert list(got) == list(tensors)
    for name, want in tensors.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_wire_names_a_closed_peer():
    from fusegraph.serve import wire

    a, b = socket.socketpair()
    a.close()
    with b, pytest.raises(wire.PeerClosed):
        wire.recv(b)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """A server whose two mlp instances each run in a worker process."""
    from fusegraph.serve import Server, ServerOptions

    root = write_mlp_repo(tmp_path_factory.mktemp("faults"))
    with Server(root, ServerOptions(http_port=None, grpc_port=0, metrics_port=None, cores=2,
                                    isolation="process")) as s:
        yield s


def _workers(server):
    return server.repo.get("mlp").scheduler.executors


def _send(client, x: np.ndarray, rid: str):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer("mlp", [i], request_id=rid, client_timeout=60)


def _wait_dead(pid: int, limit_s: float = 10.0) -> None:
    """Until `pid` is gone or a zombie (it stays a zombie until the server reaps it)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs")


def test_worker_killed_under_load_fails_only_its_batch_and_is_restarted(isolated):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    requests, concurrency = 400, 8
    model = mlp_model()
    xs = [np.full((1, FEATURES), k / 100, np.float32) for k in range(requests)]
    victim = _workers(isolated)[0]
    old_pid = victim.pid
    answered = threading.Semaphore(0)
    local = threading.local()

    def one(k: int):
        if not hasattr(local, "c"):
            local.c = grpcclient.InferenceServerClient(f"127.0.0.1:{isolated.grpc_port}")
        try:
            r = _send(local.c, xs[k], str(k))
            return k, r.get_response().id, r.as_numpy("y"), None
        except InferenceServerException as e:
            return k, None, None, e
        finally:
            answered.release()

    with ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(one, k) for k in range(requests)]
        for _ in range(100):  # kill once the load is well under way
            assert answered.acquire(timeout=60)
        os.kill(old_pid, signal.SIGKILL)
        results = [f.result(timeout=120) for f in futures]

    failed = [(k, e) for k, _, _, e in results if e is not None]
    ok = [(k, rid, y) for k, rid, y, e in results if e is None]
    assert len(failed) + len(ok) == requests
    assert sorted(int(rid) for _, rid, _ in ok) == sorted(k for k, _, _ in ok)  # each answer is its own
    # only the batch the killed worker ran fails (at most max_batch_size requests of one sample), named
    assert len(failed) <= 8, failed
    for _, e in failed:
        assert e.status() == "StatusCode.INTERNAL" and f"(pid {old_pid}) was killed by SIGKILL" in e.message()
    ref = ort_reference(model, np.concatenate(xs))["y"]
    wrong = [k for k, _, y in ok if not np.allclose(y, ref[k:k + 1], rtol=1e-5, atol=1e-5)]
    assert wrong == []
    # the instance is back, in a new process, and every request succeeds again
    end = time.monotonic() + 60
    while not (victim.running and victim.pid != old_pid):
        assert time.monotonic() < end, "the killed worker was not restarted"
        time.sleep(0.05)
    assert victim.restarts >= 1
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{isolated.grpc_port}")
    for k in range(20):
        np.testing.assert_allclose(_send(c, xs[k], str(k)).as_numpy("y"), ref[k:k + 1], rtol=1e-5, atol=1e-5)
    assert c.is_server_live() and c.is_model_ready("mlp")
    c.close()


def test_worker_killed_while_idle_fails_nothing(isolated):
    import tritonclient.grpc as grpcclient

    pids = [w.pid for w in _workers(isolated)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _wait_dead(pid)
    before = isolated.repo.get("mlp").stats.snapshot()["fail"].count
    model = mlp_model()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{isolated.grpc_port}")
    rng = np.random.default_rng(9)
    for k in range(10):  # the batch a dead worker never received runs on a restarted one
        x = rng.standard_normal((2, FEATURES)).astype(np.float32)
        np.testing.assert_allclose(_send(c, x, str(k)).as_numpy("y"), ort_reference(model, x)["y"], rtol=1e-5, atol=1e-5)
    c.close()
    assert isolated.repo.get("mlp").stats.snapshot()["fail"].count == before
    # both come back (one may still be loading while the other served the requests above)
    end = time.monotonic() + 60
    while not all(w.pid not in pids and w.running for w in _workers(isolated)):
        assert time.monotonic() < end, "a worker killed while idle was not replaced"
        time.sleep(0.05)


def test_stop_ends_the_worker_processes(tmp_path):
    import onnx

    from fusegraph.serve import Server, ServerOptions

    onnx.save(mlp_model(), tmp_path / "mlp.onnx")
    s = Server(tmp_path / "mlp.onnx", ServerOptions(http_port=None, grpc_port=None, metrics_port=None, cores=2,
                                                    isolation="process")).start()
    procs = [w.proc for w in s.repo.get("mlp").scheduler.executors]
    s.stop()
    assert [p.poll() for p in procs] == [0] * len(procs)  # each stopped when asked, none killed
