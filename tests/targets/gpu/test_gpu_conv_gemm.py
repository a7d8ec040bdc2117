"""1x1 convolutions as matmuls on the gpu target (patterns.match_conv_gemm, lower_nn.conv_gemm): the
bias and ReLU epilogue taken from the only reader, channel slices read in place, other readers (a
residual add) taken whole by conv_gemm_epilogue; results against ONNX Runtime (GPU, or Triton's
interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compile_check(target, model, x, fp16=False):
    p = fusegraph.parse_onnx(model)
    p.compile(target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    return {s.ins.uid: s for s in p.executable.plan.steps}


@pytest.mark.parametrize("fp16", [False, True])
def test_bias_relu_epilogue_and_residual(gpu_target, fp16):
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]), helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    inits = {"w1": randn(16, 8, 1, 1) * 0.3, "b1": randn(16), "w2": randn(8, 16, 1, 1) * 0.3, "b2": randn(8)}
    x = {"x": randn(2, 8, 5, 6)}
    steps = compile_check(gpu_target, make_model(nodes, x, ["y"], initializers=inits), x, fp16)
    kinds = sorted(s.kind for s in steps.values() if s.kind.startswith(("conv_gemm", "convolution")))
    # bias + ReLU goes to cuBLASLt's epilogue; the residual conv takes its whole reader (bias, add, ReLU)
    assert kinds == ["conv_gemm", "conv_gemm_epilogue"]
    (relu,) = [s for s in steps.values() if s.kind == "conv_gemm"]
    assert relu.data["relu"] and len(relu.inputs) == 3


def test_reads_a_channel_slice_and_writes_into_a_concat(gpu_target):
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c0"], ["a"]),
             helper.make_node("Split", ["a", "sizes"], ["a0", "a1"], axis=1),
             helper.make_node("Conv", ["a1", "w1", "b1"], ["c1"]),
             helper.make_node("Concat", ["a0", "a1", "c1"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"])]
    inits = {"w0": randn(8, 3, 3, 3) * 0.3, "w1": randn(6, 4, 1, 1) * 0.3, "b1": randn(6),
             "w2": randn(4, 14, 1, 1) * 0.3, "sizes": np.array([4, 4], np.int64)}
    x = {"x": randn(1, 3, 7, 5)}
    steps = compile_check(gpu_target, make_model(nodes, x, ["y"], initializers=inits, opset=13), x)
    assert sum(s.kind.startswith("conv_gemm") for s in steps.values()) == 2
