"""Custom ops (fusegraph/custom) on the gpu target: a TorchKernel as a value step (the YOLO decoder
example), a TritonKernel writing into the plan's buffer, and the fallback rules: an op without a gpu
kernel runs its reference on the host only where its definition allows it, with a warning naming it.
On the GPU when there is one, else through Triton's interpreter (conftest.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import helper

import fusegraph
from examples.yolo_decode import DOMAIN, NAME, decode_model, decode_reference
from fusegraph.custom import Attr, TritonKernel, custom_op
from fusegraph.errors import CompileError
from fusegraph.targets.gpu.dynamic import HostFallbackWarning
from tests.util import make_model

rng = np.random.default_rng(3)
DOM = "test.fusegraph.gpu"


def _model(name):
    node = helper.make_node(name, ["x"], ["y"], domain=DOM, k=3.0)
    return make_model([node], {"x": np.ones((4, 33), np.float32)}, ["y"], extra_opsets={DOM: 1})


def _op(name, **kw):
    return custom_op(name, domain=DOM, attributes={"k": Attr(float, 2.0)}, shape=lambda inputs, k: inputs[0],
                     reference=lambda x, k: x * np.float32(k), **kw)


def test_the_decoder_runs_its_torch_kernel_on_the_device(gpu_target):
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    p = fusegraph.parse_onnx(decode_model(), map_input_dims={"raw": list(x.shape)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostFallbackWarning)
        p.compile(gpu_target)
    assert p.executable.host_ops == []
    got = p.run({"raw": x})[0]
    np.testing.assert_allclose(got, decode_reference(x, stride=8.0, sigmoid_scores=True), rtol=2e-6, atol=1e-6)


def test_a_triton_kernel_writes_into_the_planned_buffer(gpu_target):
    from fusegraph.targets.gpu.device import triton

    tr = triton()
    tl = tr.language

    @tr.jit
    def scale(x_ptr, y_ptr, n, k, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * k, mask=i < n)

    def launch(out, x, k):
        n = out.numel()
        scale[(tr.cdiv(n, 64),)](x, out, n, k, BLOCK=64)

    _op("ScaleTriton", gpu=TritonKernel(launch))
    x = rng.standard_normal((4, 33)).astype(np.float32)
    p = fusegraph.parse_onnx(_model("ScaleTriton")).compile(gpu_target)
    assert p.executable.host_ops == []
    np.testing.assert_array_equal(p.run({"x": x})[0], x * np.float32(3))


def test_without_a_gpu_kernel_the_host_runs_it_only_where_allowed(gpu_target):
    _op("ScaleHostOk", host_fallback=True)
    x = rng.standard_normal((4, 33)).astype(np.float32)
    with pytest.warns(HostFallbackWarning, match=f"custom.{DOM}.ScaleHostOk"):
        p = fusegraph.parse_onnx(_model("ScaleHostOk")).compile(gpu_target)
    np.testing.assert_array_equal(p.run({"x": x})[0], x * np.float32(3))
    _op("ScaleHostNo")
    with pytest.raises(CompileError, match=r"ScaleHostNo.*host_fallback=False"):
        fusegraph.parse_onnx(_model("ScaleHostNo")).compile(gpu_target)


@pytest.mark.gpu
def test_the_decoder_on_cuda_survives_save_and_load(tmp_path):
    from fusegraph.targets.gpu import GpuTarget

    x = rng.standard_normal((1, 80, 80, 85)).astype(np.float32)
    model = decode_model(classes=81)
    p = fusegraph.parse_onnx(model, map_input_dims={"raw": list(x.shape)}).compile(GpuTarget())
    want = decode_reference(x, stride=8.0, sigmoid_scores=True)
    np.testing.assert_allclose(p.run({"raw": x})[0], want, rtol=1e-5, atol=1e-5)
    fusegraph.save(p, tmp_path / "d.fgx")
    assert f"custom.{DOMAIN}.{NAME}".encode() in (tmp_path / "d.fgx").read_bytes()
    np.testing.assert_allclose(fusegraph.load(tmp_path / "d.fgx").run({"raw": x})[0], want, rtol=1e-5, atol=1e-5)
