"""The built-in models on the GPU against ONNX Runtime (fp32) and within fp16's documented tolerance,
and the executable's device interfaces: CUDA-graph replay, the caller's stream, DLPack. Marked `gpu`
(skipped without CUDA; these take seconds on an H200, minutes in an interpreter).

Documented tolerances: fp32 matches ONNX Runtime to rtol 1e-3 / atol 1e-4 scaled by the output's
magnitude (cuDNN and cuBLAS sum in other orders, no TF32); fp16 (quantize_fp16, float32
accumulation) stays within 1% relative L2 error of the fp32 result."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.models import get_model, sample_inputs
from tests.util import run_ort

pytestmark = pytest.mark.gpu
MODELS = [("bert_small", 2), ("resnet50", 2), ("yolov8n", 1), ("unet", 1)]
FP16_REL_L2 = 1e-2


def compiled(name: str, batch: int, fp16: bool = False, **target_kwargs):
    from fusegraph.targets.gpu import GpuTarget

    feeds = sample_inputs(name, batch=batch)
    dims = {k: list(v.shape) for k, v in feeds.items()}
    p = fusegraph.parse_onnx(get_model(name), map_input_dims=dims)
    p.compile(GpuTarget(**target_kwargs), fusegraph.CompileOptions(fp16=fp16))
    return p, feeds


def _ort(name, feeds):
    return run_ort(get_model(name), feeds)


@pytest.mark.parametrize("name, batch", MODELS)
def test_fp32_matches_onnxruntime(name, batch):
    p, feeds = compiled(name, batch)
    assert p.executable.graph is not None  # graph mode is the default
    for got, want in zip(p.run(feeds), _ort(name, feeds)):
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)


@pytest.mark.parametrize("name, batch", MODELS)
def test_fp16_within_tolerance(name, batch):
    p, feeds = compiled(name, batch, fp16=True)
    for got, want in zip(p.run(feeds), _ort(name, feeds)):
        assert got.dtype == want.dtype
        err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        assert err < FP16_REL_L2, f"{name}: relative L2 error {err:.2e}"


def test_graph_replay_matches_step_by_step_and_repeats():
    graph, feeds = compiled("bert_small", 2)
    steps, _ = compiled("bert_small", 2, graph_mode=False)
    assert steps.executable.graph is None
    a = graph.run(feeds)
    b = steps.run(feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    other = sample_inputs("bert_small", batch=2, seed=1) if "seed" in sample_inputs.__code__.co_varnames else feeds
    graph.run(other)
    for x, y in zip(graph.run(feeds), a):  # replays read the new inputs each time
        np.testing.assert_array_equal(x, y)


def test_callers_stream_and_dlpack():
    import torch

    p, feeds = compiled("resnet50", 1, fp16=True)
    exe = p.executable
    x = torch.from_numpy(feeds["input"]).cuda()
    want = exe.run_device({"input": x}, copy_outputs=True)[0]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x2 = x.clone()  # made on the caller's stream
        got = exe.run_device({"input": x2}, stream=stream, copy_outputs=True)[0]
    stream.synchronize()
    torch.testing.assert_close(got, want)
    capsule_in = torch.utils.dlpack.to_dlpack(x)

    class Producer:  # any DLPack producer (cupy, jax, ...) is taken without a host copy
        def __dlpack__(self, stream=None):
            return capsule_in

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    (out,) = exe.run({"input": Producer()})
    torch.testing.assert_close(out, want)
