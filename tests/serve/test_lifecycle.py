"""Repository load/unload, a generated config for a bare model file, FP16 as raw bytes, and the CLI's
graceful shutdown."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIG, free_port, mlp_model

from fusegraph.serve import Server, ServerOptions

ROOT = Path(__file__).resolve().parents[2]


def _half_model():
    """z = x * 2 in float16, batch dim symbolic."""
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2, np.float16), "two")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["z"])], "half",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT16, ["N", 4])], [two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bare_model_file_gets_a_generated_config_and_fp16_travels_raw(tmp_path):
    import onnx
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    onnx.save(_half_model(), tmp_path / "half.onnx")
    with Server(tmp_path / "half.onnx", ServerOptions(http_port=0, grpc_port=0, metrics_port=None, cores=2)) as s:
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        config = g.get_model_config("half").config
        assert config.name == "half" and config.max_batch_size == 4 and config.HasField("dynamic_batching")
        assert [(i.name, list(i.dims)) for i in config.input] == [("x", [4])]
        x = (np.arange(12, dtype=np.float16) / 8).reshape(3, 4)
        i = grpcclient.InferInput("x", [3, 4], "FP16")
        i.set_data_from_numpy(x)
        np.testing.assert_array_equal(g.infer("half", [i]).as_numpy("z"), x * np.float16(2))
        h = httpclient.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        hi = httpclient.InferInput("x", [3, 4], "FP16")
        hi.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_array_equal(h.infer("half", [hi]).as_numpy("z"), x * np.float16(2))
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
