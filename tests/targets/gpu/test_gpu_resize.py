"""Linear Resize on the gpu target: torch's one interpolate kernel where its weights are the
reference's on every resized axis (lower_resize._torch_linear), the reference's taps elsewhere;
both against ONNX Runtime. Non-finite inputs: tests/targets/gpu/test_gpu_nonfinite.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort


def _model(shape, mode, scales=None, sizes=None):
    inits = {"roi": np.array([], np.float32)}
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear", coordinate_transformation_mode=mode)
    else:
        inits["scales"], inits["sizes"] = np.array([], np.float32), np.array(sizes, np.int64)
        node = helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="linear",
                                coordinate_transformation_mode=mode)
    x = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    return make_model([node], x, ["y"], initializers=inits), x


@pytest.mark.parametrize("shape, mode, scales, sizes, one_kernel", [
    ((2, 3, 8, 8), "half_pixel", [1, 1, 2, 2], None, True),          # SegFormer's, DeepLabV3's upsampling
    ((2, 3, 5, 7), "half_pixel", None, [2, 3, 13, 9], True),         # sizes: torch's in/out scale too
    ((2, 3, 8, 6), "half_pixel", [1, 1, 0.5, 0.5], None, True),      # downsampling, no antialias
    ((2, 3, 5, 7), "align_corners", None, [2, 3, 9, 12], True),
    ((2, 3, 9), "half_pixel", [1, 1, 3], None, True),                # 1-D: torch's "linear"
    ((1, 2, 4, 4, 4), "half_pixel", [1, 1, 2, 2, 2], None, True),    # 3-D: "trilinear"
    ((2, 3, 8, 8), "asymmetric", [1, 1, 2, 2], None, False),         # another source grid: the taps
    ((2, 3, 8, 8), "pytorch_half_pixel", None, [2, 3, 1, 5], False),  # a one-pixel axis: the taps
    ((2, 4, 6), "half_pixel", [1, 2, 2], None, False),               # the channel axis too: the taps
])
@pytest.mark.parametrize("fp16", [False, True])
def test_linear_resize(gpu_target, monkeypatch, shape, mode, scales, sizes, one_kernel, fp16):
    import torch

    calls = []
    interpolate = torch.nn.functional.interpolate
    def counted(x, **k):  # the model's calls (the lowering's own check interpolates float64 identities)
        if x.dtype != torch.float64:
            calls.append(k)
        return interpolate(x, **k)
    monkeypatch.setattr(torch.nn.functional, "interpolate", counted)
    model, x = _model(shape, mode, scales, sizes)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))  # on CUDA its warm-up runs the steps
    tol = 2e-3 if fp16 else 1e-5
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    assert bool(calls) == one_kernel  # in the warm-up or the run (a CUDA graph's replay calls nothing)
