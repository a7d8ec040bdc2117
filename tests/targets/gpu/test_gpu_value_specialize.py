"""Value specialization on the gpu target (targets/specialize.py): an integer input that decides an
`if` (a sample rate) gets one static program per value seen, behind a guard on the value; past
VALUES_PER_INPUT values the input is left general (the `if` on the host), never a wrong program.
silero-vad end to end: at 16 kHz one static program (no host step), at 8 kHz likewise at its
256-sample chunk, both as ONNX Runtime computes them."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import FusegraphError
from fusegraph.targets import CompileOptions
from fusegraph.targets import specialize as specialize_module
from fusegraph.targets.gpu.dynamic import DynamicExecutable, HostFallbackWarning
from fusegraph.targets.gpu.segmented import SegmentedExecutable
from fusegraph.targets.specialize import SpecializingExecutable
from tests.helpers.real_models import REAL_MODELS
from tests.util import assert_close, make_model, run_ort

n, F = helper.make_node, TensorProto.FLOAT
rng = np.random.default_rng(7)


def rate_model():
    """h = x @ w; y = h*h if sr == 16000 else -h; z = relu(y)."""
    then = helper.make_graph([n("Mul", ["h", "h"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2, 5])])
    other = helper.make_graph([n("Neg", ["h"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2, 5])])
    nodes = [n("MatMul", ["x", "w"], ["h"]), n("Equal", ["sr", "k16"], ["c"]),
             n("If", ["c"], ["y"], then_branch=then, else_branch=other), n("Relu", ["y"], ["z"])]
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32), "sr": np.array(16000, np.int64)}
    inits = {"w": rng.standard_normal((4, 5)).astype(np.float32), "k16": np.array(16000, np.int64)}
    return make_model(nodes, feeds, ["z", "y"], initializers=inits), feeds


def on_device_only(exe) -> bool:
    """A static program: one arena (one CUDA graph on a GPU), no host step, no dynamic segment."""
    return not isinstance(exe, (SegmentedExecutable, DynamicExecutable)) and exe.host_ops == []


def _run(p, model, feeds, rtol=1e-5, atol=1e-6):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        got = p.run(feeds)
    assert_close(got, run_ort(model, feeds), rtol=rtol, atol=atol)


def test_each_value_gets_a_static_program_of_its_branch(gpu_target):
    model, feeds = rate_model()
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    exe = p.executable
    assert isinstance(exe, SpecializingExecutable) and exe.guarded == ["sr"]
    for sr in (16000, 8000, 16000):
        _run(p, model, dict(feeds, sr=np.array(sr, np.int64)))
    assert [s.values for s in exe.specializations] == [{"sr": 16000}, {"sr": 8000}]  # the third run reused the first
    for sr, body in ((16000, "mul"), (8000, "neg")):
        static = exe.executable_for({k: v.shape for k, v in feeds.items()}, {"sr": sr})
        assert on_device_only(static)
        ops = {i.op.name for i in static.program.main.instructions}
        assert "if" not in ops and "sr" in static.program.get_parameter_names()
        assert body in ops or any(body in str(i.op) for i in static.program.main.instructions)


def test_values_past_the_limit_take_the_general_program(gpu_target, monkeypatch):
    monkeypatch.setattr(specialize_module, "VALUES_PER_INPUT", 1)
    model, feeds = rate_model()
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    for sr in (16000, 8000, 22050, 16000):
        _run(p, model, dict(feeds, sr=np.array(sr, np.int64)))
    exe = p.executable
    assert [s.values for s in exe.specializations] == [{"sr": 16000}, {}]  # 8000 and 22050 share the general one
    general = exe.executable_for({k: v.shape for k, v in feeds.items()}, {"sr": 44100})
    assert general.host_ops == ["if"]  # it reads sr and decides on the host
    assert on_device_only(exe.executable_for({k: v.shape for k, v in feeds.items()}, {"sr": 16000}))


def test_device_tensor_inputs_are_guarded_too(gpu_target):
    torch = pytest.importorskip("torch")
    model, feeds = rate_model()
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    device = gpu_target.device or "cuda"
    for sr in (8000, 16000):
        host = dict(feeds, sr=np.array(sr, np.int64))
        got = p.run({k: torch.from_numpy(v).to(device) for k, v in host.items()})
        assert_close([np.asarray(g.cpu()) if hasattr(g, "cpu") else g for g in got], run_ort(model, host), rtol=1e-5, atol=1e-6)


def test_a_zero_cache_keeps_the_target_control_flow(gpu_target):
    model, feeds = rate_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        p = fusegraph.parse_onnx(model).compile(gpu_target, CompileOptions(dynamic_cache_size=0))
    assert p.executable.host_ops == ["if"]
    _run(p, model, dict(feeds, sr=np.array(8000, np.int64)))


# -- silero-vad ------------------------------------------------------------------------------------
def _silero():
    path = REAL_MODELS["silero_vad"].path()
    if path is None:
        pytest.skip(f"silero_vad: pip install --no-deps {REAL_MODELS['silero_vad'].pip_name}")
    return onnx.load(str(path))


def _silero_feeds(samples: int, sr: int):
    return {"input": (rng.standard_normal((1, samples)) * 0.1).astype(np.float32),
            "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32), "sr": np.array(sr, np.int64)}


@pytest.mark.parametrize("samples,sr", [(512, 16000), (256, 8000)])
def test_silero_vad_runs_as_one_static_program_per_sample_rate(gpu_target, samples, sr):
    model = _silero()
    p = fusegraph.parse_onnx(model, map_input_dims={"input": [1, samples], "state": [2, 1, 128], "sr": []})
    p.compile(gpu_target)
    exe = p.executable
    assert isinstance(exe, SpecializingExecutable) and exe.guarded == ["sr"]
    for _ in range(2):  # the state carried from one chunk to the next, as a stream runs it
        feeds = _silero_feeds(samples, sr)
        got = p.run(feeds)
        assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)
    static = exe.executable_for({"input": (1, samples), "state": (2, 1, 128), "sr": ()}, {"sr": sr})
    assert on_device_only(static), static.describe()
    assert len(exe.specializations) == 1


def test_silero_vad_fails_like_onnx_runtime_for_a_rate_its_chunk_does_not_fit(gpu_target):
    model = _silero()
    p = fusegraph.parse_onnx(model, map_input_dims={"input": [1, 512], "state": [2, 1, 128], "sr": []})
    p.compile(gpu_target)
    feeds = _silero_feeds(512, 8000)
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument):
        run_ort(model, feeds)
    with warnings.catch_warnings(), pytest.raises(FusegraphError, match="cannot run for these input shapes"):
        warnings.simplefilter("ignore", HostFallbackWarning)
        p.run(feeds)
    _run(p, model, _silero_feeds(512, 16000), rtol=1e-4, atol=1e-5)  # the guard: 16 kHz still gets its own program
