"""Scheduling through the protocol: priorities and per-level queue limits over gRPC and HTTP, a full
queue answered UNAVAILABLE / 503, a cancelled gRPC call dropped from the queue, and where instances go
(`count` CPU instances, `gpus: [...]`)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.serve.util import CONFIG, FEATURES, mlp_model, skip_without_serve_deps, write_mlp_repo

skip_without_serve_deps()

# requests wait in the queue (a minute's delay, no preferred size) until the test stops the server
HELD = CONFIG.replace("max_queue_delay_microseconds: 2000 preferred_batch_size: [ 4, 8 ]",
                      "max_queue_delay_microseconds: 60000000 priority_levels: 2 default_priority_level: 2 "
                      "priority_queue_policy { key: 1 value { max_queue_size: 1 } }").replace(
                      "max_batch_size: 8", "max_batch_size: 16")


@pytest.fixture
def held_server(tmp_path):
    from fusegraph.serve import Server, ServerOptions

    write_mlp_repo(tmp_path, HELD)
    s = Server(tmp_path, ServerOptions(http_port=0, grpc_port=0, metrics_port=None, cores=2,
                                       isolation="thread")).start()
    yield s
    s.stop(grace_s=20)


def _until(cond, limit_s: float = 20.0) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.01)


def _grpc_input(x):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def test_priority_levels_have_their_own_limits_and_a_full_queue_is_unavailable(held_server):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    sched = held_server.repo.get("mlp").scheduler
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{held_server.grpc_port}")
    h = httpclient.InferenceServerClient(f"127.0.0.1:{held_server.http_port}")
    x = np.ones((1, FEATURES), np.float32)
    answers = []
    g.async_infer("mlp", [_grpc_input(x)], callback=lambda result, error: answers.append(error), priority=1)
    _until(lambda: sched.pending == 1)
    with pytest.raises(InferenceServerException) as e:
        g.infer("mlp", [_grpc_input(x)], priority=1)
    assert e.value.status() == "StatusCode.UNAVAILABLE" and "queue of priority level 1 full" in e.value.message()
    hi = httpclient.InferInput("x", [1, FEATURES], "FP32")
    hi.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as e:
        h.infer("mlp", [hi], priority=1)
    assert e.value.status() == "503" and "priority level 1 full" in e.value.message()
    # the default level's queue has room
    g.async_infer("mlp", [_grpc_input(x)], callback=lambda result, error: answers.append(error), priority=2)
    g.async_infer("mlp", [_grpc_input(x)], callback=lambda result, error: answers.append(error))
    _until(lambda: sched.pending == 3)
    assert [len(q) for q in sched._queues] == [1, 2]
    held_server.stop(grace_s=20)  # the queued requests run and are answered
    _until(lambda: len(answers) == 3)
    assert answers == [None, None, None]
    g.close()
    h.close()


def test_a_cancelled_grpc_call_leaves_the_queue(held_server):
    import tritonclient.grpc as grpcclient

    loaded = held_server.repo.get("mlp")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{held_server.grpc_port}")
    errors = []
    call = g.async_infer("mlp", [_grpc_input(np.ones((1, FEATURES), np.float32))],
                         callback=lambda result, error: errors.append(error))
    _until(lambda: loaded.scheduler.pending == 1)
    call.cancel()
    _until(lambda: loaded.scheduler.pending == 0)  # dropped now, not when the minute's delay ends
    snap = loaded.stats.snapshot()
    assert snap["failures_by_reason"] == {"CANCELED": 1} and snap["execution_count"] == 0
    _until(lambda: errors)
    assert "CANCELLED" in str(errors[0].status())
    g.close()


def _config(text: str):
    from google.protobuf import text_format

    from fusegraph.serve.config import pb

    return text_format.Parse(text, pb().ModelConfig(name="m"))


@pytest.mark.parametrize("groups, gpus, want", [
    ("", 0, [None]),
    ("instance_group [ { kind: KIND_CPU count: 3 } ]", 0, [None, None, None]),
    ("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]", 0, [0, 0, 1, 1]),
    ("instance_group [ { kind: KIND_GPU } ]", 4, [0, 1, 2, 3]),  # one on each GPU where none are listed
    ("instance_group [ { kind: KIND_GPU gpus: [ 2 ] }, { kind: KIND_CPU count: 1 } ]", 0, [2, None]),
])
def test_instances_are_placed_on_the_devices_the_config_names(groups, gpus, want):
    from fusegraph.serve.config import instance_devices

    assert instance_devices(_config(groups), "gpu", lambda: gpus) == want


def test_instances_on_several_gpus_need_process_isolation(tmp_path):
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.errors import ModelConfigError
    from fusegraph.serve.instances import load_instances

    onnx.save(mlp_model(), tmp_path / "m.onnx")
    entry = cfg.single_file_entry(tmp_path / "m.onnx")
    entry.config.instance_group.add(kind=cfg.pb().ModelInstanceGroup.KIND_GPU, gpus=[0, 1])
    with pytest.raises(ModelConfigError, match=r"instances on GPUs \[0, 1\] need --isolation process"):
        load_instances(entry, 1, tmp_path / "m.onnx", "cpu", 2, "thread")


def test_cpu_instances_share_the_cores(tmp_path):
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.instances import load_instances

    onnx.save(mlp_model(), tmp_path / "m.onnx")
    entry = cfg.single_file_entry(tmp_path / "m.onnx")
    entry.config.instance_group.add(kind=cfg.pb().ModelInstanceGroup.KIND_CPU, count=2)
    model, executors = load_instances(entry, 1, tmp_path / "m.onnx", "cpu", 4, "process")
    try:
        assert model.instances == 2 and len(executors) == 2 and model.threads == 2  # 2 x 2 <= 4 cores
        assert [w.threads for w in executors] == [2, 2]
        assert all(w.device is None and w._env()["OMP_NUM_THREADS"] == "2" for w in executors)
    finally:
        for w in executors:
            w.close()


@pytest.mark.gpu
def test_gpu_instances_each_run_in_a_process_bound_to_their_device(tmp_path):
    """On a GPU machine: one instance per GPU (`gpus` lists them), each worker sees only its own device."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.instances import load_instances
    from tests.serve.util import ort_reference

    n = torch.cuda.device_count()
    onnx.save(mlp_model(), tmp_path / "m.onnx")
    entry = cfg.single_file_entry(tmp_path / "m.onnx")
    entry.config.instance_group.add(kind=cfg.pb().ModelInstanceGroup.KIND_GPU, gpus=list(range(n)))
    model, executors = load_instances(entry, 1, tmp_path / "m.onnx", "cpu", None, None)
    try:
        assert model.target == "gpu" and [w.device for w in executors] == list(range(n))
        assert [w._env()["CUDA_VISIBLE_DEVICES"] for w in executors] == [str(d) for d in range(n)]
        x = np.random.default_rng(1).standard_normal((3, FEATURES)).astype(np.float32)
        for w in executors:
            np.testing.assert_allclose(w.execute({"x": x}, 3)["y"], ort_reference(mlp_model(), x)["y"],
                                       rtol=1e-4, atol=1e-4)
    finally:
        for w in executors:
            w.close()


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_solo_threads_instances_answer_alone_and_together(tmp_path, isolation):
    """Two 1-thread instances with 2-thread solo programs: a lone request (solo) and concurrent ones
    (each instance's own) all answer as ONNX Runtime does, over gRPC."""
    import concurrent.futures

    import tritonclient.grpc as grpcclient

    from fusegraph.serve import Server, ServerOptions
    from tests.serve.util import ort_reference

    config = CONFIG + 'parameters { key: "solo_threads" value { string_value: "2" } }\n'
    write_mlp_repo(tmp_path, config.replace("max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 0"))
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((1, FEATURES)).astype(np.float32) for _ in range(16)]
    with Server(tmp_path, ServerOptions(http_port=None, grpc_port=0, metrics_port=None, cores=2,
                                        isolation=isolation)) as s:
        model = s.repo.get("mlp").model
        assert (model.instances, model.threads, model.solo_threads) == (2, 1, 2)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        got = [client.infer("mlp", [_grpc_input(xs[0])]).as_numpy("y")]  # alone: the solo programs
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got += list(pool.map(lambda x: grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}").infer(
                "mlp", [_grpc_input(x)]).as_numpy("y"), xs[1:]))
    for x, y in zip(xs, got, strict=True):
        np.testing.assert_allclose(y, ort_reference(mlp_model(), x)["y"], rtol=1e-5, atol=1e-5)
