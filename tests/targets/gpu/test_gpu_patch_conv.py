"""Convolutions of few input channels whose windows tile the input (patch embeddings: ViT's 16x16 /
16, ConvNeXt's 4x4 / 4) run as one permuted copy and a matmul (lower_nn.py) on the gpu target:
against ONNX Runtime, from a contiguous input and from a channels-last one, with rows and columns
past the last window, in fp32 and fp16; and the rule's legality on the window attributes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir.dtypes import DType
from fusegraph.ir.shape import Shape
from fusegraph.ops.conv import Convolution, window_attrs
from fusegraph.targets.gpu.lower_nn import _tiles_the_input
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("shape, k, after_conv", [((2, 3, 16, 16), 4, False), ((1, 3, 18, 21), 4, False),
                                                  ((2, 5, 12, 12), 3, True), ((1, 4, 8, 8), 8, True)])
def test_patch_embedding_matches_onnxruntime(gpu_target, fp16, shape, k, after_conv):
    c = shape[1]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[k, k])]
    inits = {"w": randn(6, c, k, k) * 0.2, "b": randn(6)}
    if after_conv:  # a channels-last input, as a convolution leaves it
        nodes.insert(0, helper.make_node("Conv", ["x0", "w0"], ["x"], pads=[1, 1, 1, 1]))
        inits["w0"] = randn(c, c, 3, 3) * 0.3
    x = {"x0" if after_conv else "x": randn(*shape)}
    model = make_model(nodes, x, ["y"], initializers=inits)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)


@pytest.mark.parametrize("kernel, attrs, tiles", [
    ((4, 4), dict(stride=(4, 4)), True),
    ((4, 2), dict(stride=(4, 2)), True),
    ((4, 4), dict(stride=(2, 2)), False),                      # overlapping windows
    ((4, 4), dict(stride=(4, 4), padding=(1, 1, 1, 1)), False),
    ((4, 4), dict(stride=(4, 4), dilation=(2, 2)), False),
    ((4, 4), dict(stride=(4, 4), group=2), False),
    ((1, 1), dict(stride=(1, 1)), False),                      # a 1x1: conv_gemm's
])
def test_which_convolutions_tile_their_input(kernel, attrs, tiles):
    op = Convolution(**attrs)
    x, w = Shape.of(DType.float16, (1, 4, 16, 16)), Shape.of(DType.float16, (8, 4 // op.group, *kernel))
    assert _tiles_the_input(op, x, w, *window_attrs(op, 2)) == tiles
    assert not _tiles_the_input(op, Shape.of(DType.int8, (1, 4, 16, 16)), w, *window_attrs(op, 2))
    many = Shape.of(DType.float16, (1, 96, 16, 16))  # ConvNeXt's downsampling: cuDNN's
    assert not _tiles_the_input(op, many, Shape.of(DType.float16, (8, 96 // op.group, *kernel)), *window_attrs(op, 2))


@pytest.mark.parametrize("out_last", [True, False])
@pytest.mark.parametrize("x_last, w_last", [(False, False), (True, False), (False, True), (True, True)])
def test_patch_matmul_takes_either_layout(x_last, w_last, out_last):
    """Any input and weight layout; into a channels-last output the matmul writes directly, into a
    standard one (a program output) by a copy."""
    torch = pytest.importorskip("torch")
    from fusegraph.targets.gpu.lower_nn import _patch_matmul

    x, w = torch.randn(2, 3, 13, 10, dtype=torch.float64), torch.randn(5, 3, 4, 3, dtype=torch.float64)
    fmt = torch.channels_last
    x = x.contiguous(memory_format=fmt) if x_last else x
    w = w.contiguous(memory_format=fmt) if w_last else w
    out = torch.full((2, 5, 3, 3), float("nan"), dtype=torch.float64)
    out = out.contiguous(memory_format=fmt) if out_last else out
    _patch_matmul(out, x, w)
    want = torch.nn.functional.conv2d(x, w, stride=(4, 3))
    assert out.is_contiguous(memory_format=fmt) == out_last and torch.allclose(out, want)
