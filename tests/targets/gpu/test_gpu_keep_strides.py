"""The keep_strides pattern (patterns.py): a `contiguous` read only by convolutions (through movement
ops) is no copy; the convolution reads the strided view. Results against ONNX Runtime."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)


def _mix_ffn(second_reader: str | None = None):
    """SegFormer's Mix-FFN: matmul rows [B, H*W, C] -> [B, C, H, W] -> depthwise 3x3 convolution."""
    b, side, c = 2, 4, 8
    nodes = [helper.make_node("MatMul", ["x", "w"], ["rows"]),
             helper.make_node("Transpose", ["rows"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["m"]),
             helper.make_node("Conv", ["m", "k", "bias"], ["y"], group=c, pads=[1, 1, 1, 1])]
    outputs = ["y"]
    if second_reader:  # the image also read by another op than a convolution
        nodes.append(helper.make_node(second_reader, ["m"], ["z"]))
        outputs.append("z")
    inits = {"w": rng.standard_normal((c, c)).astype(np.float32) * 0.3,
             "shape": np.array([b, c, side, side], np.int64),
             "k": rng.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.3,
             "bias": rng.standard_normal(c).astype(np.float32)}
    x = {"x": rng.standard_normal((b, side * side, c)).astype(np.float32)}
    return make_model(nodes, x, outputs, initializers=inits, opset=13), x


def _compiled(model, gpu_target):
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    return p, [s.kind for s in p.executable.plan.steps]


def test_a_convolution_reads_matmul_rows_without_a_copy(gpu_target):
    model, x = _mix_ffn()
    p, kinds = _compiled(model, gpu_target)
    assert "keep_strides" in kinds and "contiguous" not in kinds
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)


def test_another_reader_keeps_the_copy(gpu_target):
    model, x = _mix_ffn("Relu")
    p, kinds = _compiled(model, gpu_target)
    assert "keep_strides" not in kinds
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)
