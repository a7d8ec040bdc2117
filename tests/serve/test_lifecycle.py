"""Repository load/unload, a generated config for a bare model file, FP16 as raw bytes, and the CLI's
graceful shutdown."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fusegraph.serve import Server, ServerOptions
from tests.serve.util import CONFIG, free_port, mlp_model, skip_without_serve_deps

ROOT = Path(__file__).resolve().parents[2]

skip_without_serve_deps()


def _half_model(elem_type):
    """z = x * x in a 16-bit float type, batch dim symbolic."""
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["z"])], "half",
                              [helper.make_tensor_value_info("x", elem_type, ["N", 4])],
                              [helper.make_tensor_value_info("z", elem_type, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_bare_model_file_gets_a_generated_config_and_16_bit_floats_travel_raw(tmp_path, datatype):
    import ml_dtypes
    import onnx
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from onnx import TensorProto

    elem, np_type = {"FP16": (TensorProto.FLOAT16, np.float16), "BF16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16)}[datatype]
    onnx.save(_half_model(elem), tmp_path / "half.onnx")
    with Server(tmp_path / "half.onnx", ServerOptions(http_port=0, grpc_port=0, metrics_port=None, cores=2)) as s:
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        config = g.get_model_config("half").config
        assert config.name == "half" and config.max_batch_size == 4 and config.HasField("dynamic_batching")
        assert [(i.name, list(i.dims)) for i in config.input] == [("x", [4])]
        x = (np.arange(12) / 8).astype(np_type).reshape(3, 4)  # squares exact in either type
        want = (x.astype(np.float32) ** 2).astype(np_type)
        i = grpcclient.InferInput("x", [3, 4], datatype)
        i.set_data_from_numpy(x)
        np.testing.assert_array_equal(g.infer("half", [i]).as_numpy("z").astype(np.float32), want.astype(np.float32))
        h = httpclient.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        hi = httpclient.InferInput("x", [3, 4], datatype)
        hi.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_array_equal(h.infer("half", [hi]).as_numpy("z").astype(np.float32), want.astype(np.float32))
        g.close()
        h.close()


def test_unload_and_load_through_the_repository_api(tmp_path):
    import onnx
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    (tmp_path / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp_model(), tmp_path / "mlp" / "1" / "model.onnx")
    (tmp_path / "mlp" / "config.pbtxt").write_text(CONFIG)
    with Server(tmp_path, ServerOptions(http_port=None, grpc_port=0, metrics_port=None, cores=2,
                                        load_models=())) as s:
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        assert not g.is_model_ready("mlp")
        g.load_model("mlp")
        assert g.is_model_ready("mlp") and g.is_server_ready()
        g.unload_model("mlp")
        assert not g.is_model_ready("mlp")
        i = grpcclient.InferInput("x", [1, 16], "FP32")
        i.set_data_from_numpy(np.zeros((1, 16), np.float32))
        with pytest.raises(InferenceServerException) as e:
            g.infer("mlp", [i])
        assert e.value.status() == "StatusCode.UNAVAILABLE" and "unloaded" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            g.load_model("nosuch")
        assert e.value.status() == "StatusCode.NOT_FOUND"
        g.close()


def test_cli_serves_until_sigterm_then_exits_cleanly(tmp_path):
    import onnx
    import tritonclient.http as httpclient

    onnx.save(mlp_model(), tmp_path / "mlp.onnx")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fusegraph", "serve", str(tmp_path / "mlp.onnx"),
                             "--http-port", str(port), "--grpc-port", "0", "--metrics-port", "0", "--target", "cpu"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        end = time.monotonic() + 60
        while True:
            try:
                if client.is_server_ready():
                    break
            except (ConnectionError, OSError):
                pass
            assert proc.poll() is None and time.monotonic() < end, "the server did not come up"
            time.sleep(0.2)
        assert client.get_model_metadata("mlp")["name"] == "mlp"
        client.close()
        proc.terminate()
        assert proc.wait(30) == 0
        assert "model mlp 1: READY" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_stop_drains_queued_requests_then_refuses(tmp_path):
    """Requests queued when the server stops are all answered, right; a request after the stop is refused."""
    import onnx
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from tests.serve.util import ort_reference

    model = mlp_model()
    (tmp_path / "mlp" / "1").mkdir(parents=True)
    onnx.save(model, tmp_path / "mlp" / "1" / "model.onnx")
    # a long queue delay (longer than a loaded machine takes to send them all) and no preferred size:
    # the requests wait in the queue until the stop
    slow = CONFIG.replace("max_batch_size: 8", "max_batch_size: 16").replace(
        "max_queue_delay_microseconds: 2000 preferred_batch_size: [ 4, 8 ]", "max_queue_delay_microseconds: 60000000")
    (tmp_path / "mlp" / "config.pbtxt").write_text(slow)
    s = Server(tmp_path, ServerOptions(http_port=0, grpc_port=0, metrics_port=None, cores=2)).start()
    results, errors = {}, []
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
    xs = [np.full((1, 16), k, np.float32) for k in range(12)]
    http_pending = []
    # HTTP requests from threads: tritonclient's async_infer runs on gevent greenlets, which progress only
    # while the caller is inside gevent (time.sleep below is not), so some would reach the server late
    pool = ThreadPoolExecutor(6)

    def http_one(x):
        h = httpclient.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        i = httpclient.InferInput("x", [1, 16], "FP32")
        i.set_data_from_numpy(x)
        try:
            return h.infer("mlp", [i])
        finally:
            h.close()

    for k, x in enumerate(xs):
        if k % 2:
            http_pending.append((k, pool.submit(http_one, x)))
        else:
            i = grpcclient.InferInput("x", [1, 16], "FP32")
            i.set_data_from_numpy(x)
            g.async_infer("mlp", [i], callback=lambda result, error, k=k: (
                results.__setitem__(k, result.as_numpy("y")) if error is None else errors.append(error)))
    sched = s.repo.get("mlp").scheduler
    end = time.monotonic() + 20
    while sched.pending < len(xs):
        assert time.monotonic() < end, f"only {sched.pending} of {len(xs)} requests reached the queue"
        time.sleep(0.01)
    s.stop(grace_s=20)
    for k, req in http_pending:
        results[k] = req.result(timeout=20).as_numpy("y")
    pool.shutdown()
    end = time.monotonic() + 20
    while len(results) + len(errors) < len(xs) and time.monotonic() < end:
        time.sleep(0.01)
    assert errors == [] and sorted(results) == list(range(len(xs)))
    for k, x in enumerate(xs):
        np.testing.assert_allclose(results[k], ort_reference(model, x)["y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(InferenceServerException):
        i = grpcclient.InferInput("x", [1, 16], "FP32")
        i.set_data_from_numpy(xs[0])
        g.infer("mlp", [i], client_timeout=5)
    g.close()


def test_fgx_file_is_served_at_its_compiled_shape(tmp_path):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    import fusegraph
    from tests.serve.util import ort_reference

    model = mlp_model()
    program = fusegraph.parse_onnx(model, map_input_dims={"x": [2, 16]}).compile("cpu")
    fusegraph.save(program, tmp_path / "mlp2.fgx")
    with Server(tmp_path / "mlp2.fgx", ServerOptions(http_port=None, grpc_port=0, metrics_port=None, cores=2)) as s:
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        config = g.get_model_config("mlp2").config
        assert config.max_batch_size == 0 and [list(i.dims) for i in config.input] == [[2, 16]]
        x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
        i = grpcclient.InferInput("x", [2, 16], "FP32")
        i.set_data_from_numpy(x)
        np.testing.assert_allclose(g.infer("mlp2", [i]).as_numpy("y"), ort_reference(model, x)["y"], rtol=1e-5, atol=1e-5)
        one = grpcclient.InferInput("x", [1, 16], "FP32")
        one.set_data_from_numpy(x[:1])
        with pytest.raises(InferenceServerException, match=r"shape \[1, 16\], expected \[2, 16\]"):
            g.infer("mlp2", [one])
        g.close()


def test_a_taken_port_is_an_error_naming_it_and_nothing_stays_open(tmp_path):
    import socket

    import onnx

    onnx.save(mlp_model(), tmp_path / "mlp.onnx")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(tmp_path / "mlp.onnx", ServerOptions(http_port=port, grpc_port=0, metrics_port=None, cores=2))
        with pytest.raises(OSError, match=f"cannot bind the HTTP port 127.0.0.1:{port}"):
            server.start()
    assert server.repo.loaded()[0].scheduler._closed  # its instances were stopped


def test_load_model_names_must_exist(tmp_path):
    import onnx

    from fusegraph.serve.errors import ModelNotFoundError

    onnx.save(mlp_model(), tmp_path / "mlp.onnx")
    with pytest.raises(ModelNotFoundError, match="--load-model 'mpl'"):
        Server(tmp_path / "mlp.onnx", ServerOptions(http_port=None, grpc_port=None, metrics_port=None,
                                                    load_models=("mpl",))).start()
