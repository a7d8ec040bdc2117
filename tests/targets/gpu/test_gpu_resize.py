"""Linear Resize on the gpu target: one Triton kernel over the reference's taps (triton_resize.py),
reading its input through the movement chain before it and writing into a concat's slice; against
ONNX Runtime. Non-finite inputs: tests/targets/gpu/test_gpu_nonfinite.py."""

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


@pytest.mark.parametrize("shape, mode, scales, sizes", [
    ((2, 3, 8, 8), "half_pixel", [1, 1, 2, 2], None),          # SegFormer's, DeepLabV3's upsampling
    ((2, 3, 5, 7), "half_pixel", None, [2, 3, 13, 9]),         # sizes: the real-valued scale
    ((2, 3, 8, 6), "half_pixel", [1, 1, 0.5, 0.5], None),      # downsampling, no antialias
    ((2, 3, 5, 7), "align_corners", None, [2, 3, 9, 12]),
    ((2, 3, 9), "half_pixel", [1, 1, 3], None),                # 1-D
    ((1, 2, 4, 4, 4), "half_pixel", [1, 1, 2, 2, 2], None),    # 3-D
    ((2, 3, 8, 8), "asymmetric", [1, 1, 2, 2], None),
    ((2, 3, 8, 8), "pytorch_half_pixel", None, [2, 3, 1, 5]),  # a one-pixel axis
    ((2, 4, 6), "half_pixel", [1, 2, 2], None),                # the channel axis too
])
@pytest.mark.parametrize("fp16", [False, True])
def test_linear_resize(gpu_target, shape, mode, scales, sizes, fp16):
    model, x = _model(shape, mode, scales, sizes)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-3 if fp16 else 1e-5
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    assert any(name.startswith("resize_") for name in p.executable.sources)  # one Triton kernel


def test_decoder_upsampling_reads_matmul_rows_and_writes_the_concat(gpu_target):
    """SegFormer's decoder: each level's [B, H*W, C] matmul rows transposed and reshaped to
    [B, C, H, W], upsampled to one size, the levels concatenated for a 1x1 convolution. The resizes
    read the rows through a channels-last view (no `contiguous` copy) and write their concat slices
    (the concat copies nothing)."""
    rng = np.random.default_rng(1)
    b, c, out = 2, 8, 8
    nodes, inits, levels = [], {}, []
    for k, side in enumerate((8, 4, 2)):
        rows = f"rows{k}"
        inits[f"w{k}"] = rng.standard_normal((c, c)).astype(np.float32) * 0.3
        inits[f"shape{k}"] = np.array([b, c, side, side], np.int64)
        inits[f"s{k}"] = np.array([1, 1, out / side, out / side], np.float32)
        nodes += [helper.make_node("MatMul", [f"x{k}", f"w{k}"], [rows]),
                  helper.make_node("Transpose", [rows], [f"t{k}"], perm=[0, 2, 1]),
                  helper.make_node("Reshape", [f"t{k}", f"shape{k}"], [f"m{k}"]),
                  helper.make_node("Resize", [f"m{k}", "", f"s{k}"], [f"u{k}"], mode="linear",
                                   coordinate_transformation_mode="half_pixel")]
        levels.append(f"u{k}")
    inits["wf"] = rng.standard_normal((4, 3 * c, 1, 1)).astype(np.float32) * 0.3
    nodes += [helper.make_node("Concat", levels, ["cat"], axis=1), helper.make_node("Conv", ["cat", "wf"], ["y"])]
    x = {f"x{k}": rng.standard_normal((b, side * side, c)).astype(np.float32) for k, side in enumerate((8, 4, 2))}
    model = make_model(nodes, x, ["y"], initializers=inits, opset=13)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    plan = p.executable.plan
    assert not [s for s in plan.steps if s.kind == "contiguous"]
    resizes = [s for s in plan.steps if s.kind == "resize"]
    assert len(resizes) == 3 and all(plan.storage[s.ins.uid] == "slice" for s in resizes)
    assert next(s for s in plan.steps if s.kind == "concat").data["aliased"] == {0, 1, 2}
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_an_fp16_programs_float32_output_is_the_resize_kernels_store(mode, gpu_target):
    """A segmenter's upsampled logits as an fp16 program's float32 output: the conversion is the
    resize kernel's store (no float16 result buffer, no convert step), the same bits as the
    conversion after it (kept apart here by an exact doubling between them: y + y in float16)."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)
    inits = {"s": np.array([1, 1, 4, 4], np.float32)}
    x = {"x": np.random.default_rng(2).standard_normal((2, 3, 5, 7)).astype(np.float32)}
    fused = fusegraph.parse_onnx(make_model([node], x, ["y"], initializers=inits, opset=13))
    fused.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    kinds = [s.kind for s in fused.executable.plan.steps]
    assert "convert" not in kinds and kinds.count("resize") == 1, kinds
    doubled = [node, helper.make_node("Add", ["y", "y"], ["z"])]
    apart = fusegraph.parse_onnx(make_model(doubled, x, ["z"], initializers=inits, opset=13))
    apart.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert [s.kind for s in apart.executable.plan.steps].count("resize") == 1
    got, want = fused.run(x)[0], apart.run(x)[0] * np.float32(0.5)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert_close([got], run_ort(make_model([node], x, ["y"], initializers=inits, opset=13), x), rtol=2e-3, atol=2e-3)
