"""Convolutions written into the arena (lower_nn.convolution, CudnnInto): every window shape and
layout against ONNX Runtime, on the GPU (cuDNN writing the arena buffer) or Triton's interpreter
(torch's convolution, then a copy); on the GPU, that cuDNN took the channels-last ones and that a run
leaves no tensor of its own beside the arena."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(23)

CASES = {  # name: (input shape, weight shape, Conv attributes)
    "3x3": ((2, 8, 9, 7), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "strided": ((2, 8, 11, 10), (12, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise": ((2, 16, 9, 9), (16, 1, 7, 7), {"group": 16, "pads": [3, 3, 3, 3]}),
    "grouped_dilated": ((1, 8, 12, 12), (8, 2, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "asymmetric_pads": ((1, 4, 8, 8), (6, 4, 3, 3), {"pads": [0, 1, 2, 1]}),
    "1d": ((2, 6, 17), (10, 6, 5), {"pads": [2, 2], "strides": [2]}),
    "3d": ((1, 4, 5, 6, 7), (8, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
}


def conv_relu_model(x_shape, w_shape, attrs, output_is_conv: bool):
    """Conv (-> Relu): the conv's value an arena buffer read by a pointwise step, or the program's
    output (standard layout)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], **attrs)]
    if not output_is_conv:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    x = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    return make_model(nodes, x, ["c" if output_is_conv else "y"], initializers={"w": w}), x


@pytest.mark.parametrize("output_is_conv", [False, True])
@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_convolution_into_the_arena(gpu_target, case, fp16, output_is_conv):
    model, x = conv_relu_model(*CASES[case], output_is_conv)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)  # the captured graph's replay


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["3x3", "strided", "depthwise", "grouped_dilated", "1d", "3d"])
def test_cudnn_writes_the_arena_buffer(gpu_target, case):
    """fp16 channels-last convolutions go to cuDNN's out= form (CudnnInto.ok), and once built and run
    the program holds its two allocations (activations, weights) and nothing else."""
    import torch

    from fusegraph.targets.gpu.lower_nn import DEPTHWISE_MAX_OUTPUTS, DEPTHWISE_MAX_TAPS, CudnnInto

    taken = []
    original = CudnnInto._takes

    def spy(*args):
        taken.append(original(*args))
        return taken[-1]

    x_shape, w_shape, attrs = CASES[case]
    big = {1: (2048,), 2: (64, 64), 3: (16, 16, 16)}[len(x_shape) - 2]  # outputs of 0.25-1 MiB in fp16
    # (a smaller depthwise one, or a 3x3, is Triton's: lower_nn.triton_depthwise_rows)
    batch = 16 if case == "depthwise" else 4
    assert case != "depthwise" or (batch * w_shape[0] * 64 * 64 > DEPTHWISE_MAX_OUTPUTS
                                   and 7 * 7 > DEPTHWISE_MAX_TAPS)
    model, x = conv_relu_model((batch, x_shape[1], *big), w_shape, attrs, output_is_conv=False)
    feed = torch.from_numpy(x["x"]).cuda()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    CudnnInto._takes = staticmethod(spy)
    try:
        p = fusegraph.parse_onnx(model)
        p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    finally:
        CudnnInto._takes = staticmethod(original)
    exe = p.executable
    exe.run_device({"x": feed})
    torch.cuda.synchronize()
    activations, weights = exe.memory
    held = torch.cuda.memory_allocated() - before
    assert taken == [True]
    # a convolution output of its own would be >= 256 KiB more; cuDNN's workspace goes with its call
    assert held <= activations.numel() + weights.numel() + 64 * 1024
