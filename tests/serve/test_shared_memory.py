"""Triton's system shared-memory extension, driven by stock tritonclient (its `utils.shared_memory`
makes the regions) over gRPC and HTTP; answers checked against ONNX Runtime."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.serve.util import FEATURES, HIDDEN, ort_reference, skip_without_serve_deps

skip_without_serve_deps()
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="system shared memory needs /dev/shm")

BATCH = 3
IN_BYTES = BATCH * FEATURES * 4
OUT_BYTES = BATCH * HIDDEN * 4


def _modules(protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod
    return mod


@pytest.fixture(params=["grpc", "http"])
def protocol(request):
    return request.param


@pytest.fixture
def client(server, protocol):
    mod = _modules(protocol)
    port = server.grpc_port if protocol == "grpc" else server.http_port
    c = mod.InferenceServerClient(f"127.0.0.1:{port}")
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture
def regions(request):
    """Make shared memory regions by (name, bytes): their keys are this process's own; destroyed after."""
    import tritonclient.utils.shared_memory as shm

    made = []

    def make(name: str, size: int):
        key = f"/fusegraph_test_{os.getpid()}_{name}"
        handle = shm.create_shared_memory_region(name, key, size)
        made.append(handle)
        return handle, key

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def _x(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, FEATURES)).astype(np.float32)


def test_register_status_unregister_across_protocols(server, client, protocol, regions):
    other = _modules("http" if protocol == "grpc" else "grpc")
    other_port = server.http_port if protocol == "grpc" else server.grpc_port
    _, key = regions("a", 256)
    client.register_system_shared_memory("a", key, 128, offset=64)
    seen = other.InferenceServerClient(f"127.0.0.1:{other_port}")  # the server's regions, whatever protocol
    status = seen.get_system_shared_memory_status("a")
    if isinstance(status, list):  # HTTP: a JSON list
        row = status[0]
    else:  # gRPC: a map by name
        r = status.regions["a"]
        row = {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
    assert row == {"name": "a", "key": key, "offset": 64, "byte_size": 128}
    client.unregister_system_shared_memory("a")
    everything = seen.get_system_shared_memory_status()
    assert len(everything if isinstance(everything, list) else everything.regions) == 0
    seen.close()


def test_infer_inputs_and_outputs_in_shared_memory(client, protocol, mlp, regions):
    import tritonclient.utils.shared_memory as shm

    mod = _modules(protocol)
    x = _x()
    h_in, k_in = regions("in", IN_BYTES)
    h_out, k_out = regions("out", 64 + OUT_BYTES)
    shm.set_shared_memory_region(h_in, [x])
    client.register_system_shared_memory("in", k_in, IN_BYTES)
    client.register_system_shared_memory("out", k_out, 64 + OUT_BYTES)
    inp = mod.InferInput("x", [BATCH, FEATURES], "FP32")
    inp.set_shared_memory("in", IN_BYTES)
    y = mod.InferRequestedOutput("y")
    y.set_shared_memory("out", OUT_BYTES, offset=64)
    s = mod.InferRequestedOutput("s")  # the other output comes back in the response as usual
    result = client.infer("mlp", [inp], outputs=[y, s])
    ref = ort_reference(mlp, x)
    got_y = shm.get_contents_as_numpy(h_out, np.float32, [BATCH, HIDDEN], offset=64)
    np.testing.assert_allclose(got_y, ref["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.as_numpy("s"), ref["s"], rtol=1e-5, atol=1e-5)
    placed = result.get_output("y")
    params = placed["parameters"] if isinstance(placed, dict) else {
        k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in placed.parameters.items()}
    assert params["shared_memory_region"] == "out" and params["shared_memory_byte_size"] == OUT_BYTES


def test_output_region_too_small_is_an_error(client, protocol, regions):
    from tritonclient.utils import InferenceServerException

    mod = _modules(protocol)
    _, key = regions("small", 16)
    client.register_system_shared_memory("small", key, 16)
    inp = mod.InferInput("x", [BATCH, FEATURES], "FP32")
    inp.set_data_from_numpy(_x())
    y = mod.InferRequestedOutput("y")
    y.set_shared_memory("small", 16)
    with pytest.raises(InferenceServerException, match="do not fit the 16 bytes"):
        client.infer("mlp", [inp], outputs=[y])


@pytest.mark.parametrize("case, match", [
    ("unregistered", "no shared memory region 'nowhere'"),
    ("past_end", "run past shared memory region 'in'"),
    ("wrong_size", "bytes of data, but FP32"),
])
def test_bad_input_placement_names_the_problem(client, protocol, regions, case, match):
    from tritonclient.utils import InferenceServerException

    mod = _modules(protocol)
    _, key = regions("in", IN_BYTES)
    client.register_system_shared_memory("in", key, IN_BYTES)
    inp = mod.InferInput("x", [BATCH, FEATURES], "FP32")
    inp.set_shared_memory(*{"unregistered": ("nowhere", IN_BYTES), "past_end": ("in", IN_BYTES, 8),
                            "wrong_size": ("in", IN_BYTES - 4)}[case])
    with pytest.raises(InferenceServerException, match=match):
        client.infer("mlp", [inp])


def test_register_errors(client, regions):
    from tritonclient.utils import InferenceServerException

    _, key = regions("r", 64)
    client.register_system_shared_memory("r", key, 64)
    with pytest.raises(InferenceServerException, match="already registered"):
        client.register_system_shared_memory("r", key, 64)
    with pytest.raises(InferenceServerException, match="exceeds the 64 bytes"):
        client.register_system_shared_memory("r2", key, 64, offset=8)
    with pytest.raises(InferenceServerException, match="not a POSIX shared memory name"):
        client.register_system_shared_memory("r3", "/../etc/passwd", 8)
    with pytest.raises(InferenceServerException, match="cannot open key"):
        client.register_system_shared_memory("r4", f"/fusegraph_test_{os.getpid()}_absent", 8)
    with pytest.raises(InferenceServerException, match="no shared memory region 'absent'"):
        client.get_system_shared_memory_status("absent")


def test_cuda_shared_memory_is_not_supported(client):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported"):
        client.get_cuda_shared_memory_status()
