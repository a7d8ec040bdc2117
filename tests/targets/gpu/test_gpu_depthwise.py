"""Depthwise convolutions (one input and one output channel a group) of up to DEPTHWISE_MAX_OUTPUTS
outputs, and larger 2-D ones of small windows, run on the gpu target as Triton window kernels
(triton_pool.py's "depthwise" forms), not cuDNN: against ONNX Runtime over 1 to 3 spatial dims,
strides, asymmetric pads, dilations, windows past the unrolled size, fp16, and a channels-last input;
larger ones of large windows, and grouped convolutions that are not depthwise, stay cuDNN's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(11)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv_model(shape, k, c_out=None, after_conv=False, **attrs):
    c = shape[1]
    c_out = c_out or c
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=c, **attrs)]
    inits = {"w": randn(c_out, 1, *k) * 0.3}
    if after_conv:  # a channels-last input, as a convolution leaves it
        nodes.insert(0, helper.make_node("Conv", ["x0", "w0"], ["x"], pads=[1, 1, 1, 1]))
        inits["w0"] = randn(c, c, 3, 3) * 0.3
    feeds = {"x0" if after_conv else "x": randn(*shape)}
    return make_model(nodes, feeds, ["y"], initializers=inits), feeds


CASES = [
    ((2, 8, 9, 9), (3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 6, 12, 11), (5, 5), dict(pads=[2, 1, 0, 2], strides=[2, 2])),
    ((1, 4, 10, 10), (3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((2, 3, 20), (7,), dict(pads=[3, 3])),
    ((1, 4, 5, 6, 7), (3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 1])),
    ((1, 2, 20, 20), (17, 17), dict(pads=[8, 8, 8, 8])),  # past WIDE_TAPS: the loop form, not unrolled
]


@pytest.mark.parametrize("shape, k, attrs", CASES)
def test_depthwise_convolutions_match_onnxruntime(gpu_target, shape, k, attrs):
    model, feeds = conv_model(shape, k, **attrs)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert [s.kind for s in p.executable.plan.steps] == ["convolution"]
    assert any(name.startswith("pool_") for name in p.executable.sources)
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("after_conv", [False, True])
def test_depthwise_in_fp16_and_channels_last(gpu_target, after_conv):
    model, feeds = conv_model((2, 16, 14, 14), (3, 3), after_conv=after_conv, pads=[1, 1, 1, 1], strides=[2, 2])
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=2e-2, atol=2e-2)


def test_past_the_output_limit_windows_of_few_taps_stay_triton(gpu_target, monkeypatch):
    """Up to DEPTHWISE_MAX_OUTPUTS outputs: Triton's kernel, one output row a program (tiled form over
    the channels-last buffers of fp16). Past it: a 2-D window of up to DEPTHWISE_MAX_TAPS taps stays
    Triton's, DEPTHWISE_LARGE_ROWS rows a program; a larger window is cuDNN's."""
    from fusegraph.targets.gpu import lower_nn

    model, feeds = conv_model((2, 8, 9, 9), (3, 3), pads=[1, 1, 1, 1])
    want = run_ort(model, feeds)

    def compiled():
        p = fusegraph.parse_onnx(model)
        p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
        assert_close(p.run(feeds), want, rtol=2e-2, atol=2e-2)
        return [src for name, src in p.executable.sources.items() if name.startswith("pool_")]

    monkeypatch.setattr(lower_nn, "DEPTHWISE_MAX_OUTPUTS", 2 * 8 * 9 * 9)
    (small,) = compiled()
    assert "BLOCK_C" in small and "acc1 " not in small
    monkeypatch.setattr(lower_nn, "DEPTHWISE_MAX_OUTPUTS", 2 * 8 * 9 * 9 - 1)
    (large,) = compiled()
    rows = lower_nn.DEPTHWISE_LARGE_ROWS
    assert "BLOCK_C" in large and f"acc{rows - 1} " in large and f"acc{rows} " not in large
    monkeypatch.setattr(lower_nn, "DEPTHWISE_MAX_TAPS", 8)
    assert compiled() == []


def test_a_channel_multiplier_is_not_depthwise(gpu_target):
    """Two output channels a group: a grouped convolution (cuDNN's), still right."""
    model, feeds = conv_model((1, 4, 8, 8), (3, 3), c_out=8, pads=[1, 1, 1, 1])
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert not any(name.startswith("pool_") for name in p.executable.sources)
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels_last, tiled, rows", [(True, True, 1), (True, True, 3), (False, False, 1)])
@pytest.mark.parametrize("c, hw, k, stride, pad", [(16, 14, 3, 2, 1), (70, 9, 5, 1, 2), (3, 40, 7, 1, 3)])
def test_the_tiled_form_over_channels_last_operands(gpu_target, channels_last, tiled, rows, c, hw, k, stride, pad):
    """Channels-last operands take the tiled form (a tile of output pixels and channels of `rows` output
    rows a program), others the flat one; both are torch's convolution (ragged channel, pixel and row
    blocks included)."""
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.triton_pool import PoolLauncher

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.from_numpy(randn(2, c, hw, hw + 3)).to(dev).to(memory_format=fmt)
    w = torch.from_numpy(randn(c, 1, k, k)).to(dev)
    want = torch.nn.functional.conv2d(x, w, None, stride, pad, 1, c)
    out = torch.empty(want.shape, device=dev).to(memory_format=fmt)
    launcher = PoolLauncher("depthwise", DType.float32, (k, k), (stride, stride), (pad, pad), (1, 1),
                            torch.ones(1, device=dev), None, rows=rows)
    launcher(out, x, w)
    assert [("BLOCK_C" in src) for src in launcher.sources.values()] == [tiled]
    assert_close([out.cpu().numpy()], [want.cpu().numpy()], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k, rows, dilation, looped", [(7, 1, (2, 1), True), (5, 1, (2, 1), False), (7, 2, (2, 1), False),
                                                    (7, 3, (1, 2), True)])
def test_large_windows_loop_over_their_input_rows(gpu_target, k, rows, dilation, looped):
    """Windows past ROLLED_ROWS_TAPS loop over the input rows they read (a 7x7 wholly unrolled took
    seconds to compile, and spilled): one output row a program at any dilation, several where the
    window's rows are not dilated (each output row takes a loaded row where its window has it);
    strided and padded, as torch's convolution."""
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.triton_pool import PoolLauncher

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.from_numpy(randn(2, 5, 17, 12)).to(dev).to(memory_format=torch.channels_last)
    w = torch.from_numpy(randn(5, 1, k, k)).to(dev)
    want = torch.nn.functional.conv2d(x, w, None, (2, 1), (3, 4), dilation, 5)
    out = torch.empty(want.shape, device=dev).to(memory_format=torch.channels_last)
    launcher = PoolLauncher("depthwise", DType.float32, (k, k), (2, 1), (3, 4), dilation, torch.ones(1, device=dev),
                            None, rows=rows)
    launcher(out, x, w)
    (src,) = launcher.sources.values()
    assert ("for k0 in range" in src or "for rel in range" in src) == looped and "BLOCK_C" in src
    assert_close([out.cpu().numpy()], [want.cpu().numpy()], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fp16", [False, True])
def test_asymmetric_pads_bias_and_dilation_over_channels_last_input(gpu_target, fp16):
    """The tiled form's window from its begins alone (the ends set the output's size), a bias after it,
    a dilation: through the lowering, the input channels-last as a convolution leaves it."""
    c = 6
    nodes = [helper.make_node("Conv", ["x0", "w0"], ["x"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, pads=[2, 0, 1, 3], strides=[2, 1],
                              dilations=[1, 2])]
    inits = {"w0": randn(c, c, 3, 3) * 0.3, "w": randn(c, 1, 3, 3) * 0.3, "b": randn(c)}
    feeds = {"x0": randn(2, c, 13, 10)}
    model = make_model(nodes, feeds, ["y"], initializers=inits)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    assert [("BLOCK_C" in src) for name, src in p.executable.sources.items() if name.startswith("pool_")] == [True]
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=tol, atol=tol)
