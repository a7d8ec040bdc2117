"""choose_layout: convolutions and poolings run channels-last, joined without copies, and the program
still computes what ONNX Runtime does."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(11)
n = helper.make_node


def _w(*shape):
    return (rng.standard_normal(shape) * (2.0 / np.prod(shape[1:])) ** 0.5).astype(np.float32)


def _compile(model, inputs):
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    return p, p.run(inputs)


def _names(p) -> list[str]:
    return [i.op.name for i in p.main.instructions]


def test_conv_chain_with_pointwise_concat_slice_resize_runs_channels_last():
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    init = {"w1": _w(16, 3, 3, 3), "w2": _w(16, 16, 3, 3), "w3": _w(32, 32, 1, 1), "w4": _w(16, 16, 3, 3),
            "scales": np.array([1, 1, 2, 2], np.float32), "half": np.array(0.5, np.float32)}
    nodes = [
        n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]), n("Sigmoid", ["a"], ["sa"]),
        n("Mul", ["a", "sa"], ["b"]),                                       # silu: fused into the conv
        n("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), n("Mul", ["c", "half"], ["c2"]), n("Exp", ["c2"], ["d"]),
        n("Concat", ["b", "d"], ["e"], axis=1), n("Conv", ["e", "w3"], ["f0"]), n("Sin", ["f0"], ["f"]),
        n("Split", ["f"], ["f1", "f2"], axis=1, num_outputs=2),               # channel slices
        n("MaxPool", ["f1"], ["g"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Resize", ["g", "", "scales"], ["h"], mode="nearest"), n("Add", ["h", "f2"], ["i"]),
        n("Conv", ["i", "w4"], ["j"], pads=[1, 1, 1, 1]), n("GlobalAveragePool", ["j"], ["k"]),
        n("Flatten", ["k"], ["out"]),
    ]
    model = make_model(nodes, {"x": x}, ["out", "i"], init, opset=18)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    names = _names(p)
    convs = [i.op for i in p.main.instructions if i.op.name == "conv_epilogue"]
    assert len(convs) == 4 and all(op.channels_last for op in convs)
    assert "pooling_channels_last" in names and "pooling" not in names
    # the only copy is the network input's, into N, H, W, C
    assert names.count("contiguous") == 1


def test_fused_reduction_after_a_channels_last_conv_reads_a_standard_copy():
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    nodes = [n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), n("Exp", ["y"], ["e"]),
             n("ReduceSum", ["e", "axes"], ["s"], keepdims=1), n("Div", ["e", "s"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], {"w": _w(8, 8, 3, 3), "axes": np.array([3], np.int64)})
    _, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-6)


def test_narrow_conv_keeps_n_c_h_w():
    # a convolution to fewer channels than a vector gains nothing channels-last (YOLO's box decoding)
    x = rng.standard_normal((1, 16, 4, 40)).astype(np.float32)
    model = make_model([n("Softmax", ["x"], ["s"], axis=1), n("Conv", ["s", "w"], ["out"])], {"x": x}, ["out"],
                       {"w": _w(1, 16, 1, 1)})
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-6)
    assert "transpose" not in _names(p)


def test_batch_and_residual_blocks():
    x = rng.standard_normal((3, 8, 10, 10)).astype(np.float32)
    nodes = [n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["b"]),
             n("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), n("Add", ["c", "x"], ["d"]), n("Relu", ["d"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], {"w1": _w(8, 8, 3, 3), "w2": _w(8, 8, 3, 3)})
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    assert [op.n_residual for op in (i.op for i in p.main.instructions) if op.name == "conv_epilogue"] == [0, 1]


def test_conv_read_in_channel_slices_becomes_one_conv_per_slice():
    # YOLOv8's C2f: conv + SiLU, split in halves, one half through another conv, concat
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    init = {"w1": _w(32, 8, 1, 1), "b1": rng.standard_normal(32).astype(np.float32), "w2": _w(16, 16, 3, 3)}
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"]), n("Sigmoid", ["a"], ["s"]), n("Mul", ["a", "s"], ["b"]),
             n("Split", ["b"], ["h1", "h2"], axis=1, num_outputs=2), n("Conv", ["h2", "w2"], ["c"], pads=[1, 1, 1, 1]),
             n("Concat", ["h1", "h2", "c"], ["out"], axis=1)]
    model = make_model(nodes, {"x": x}, ["out"], init, opset=18)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    names = _names(p)
    assert "slice" not in names and names.count("conv_epilogue") == 3


def test_fused_reduction_over_a_transposed_view_of_a_conv_keeps_its_layout():
    # a TF-exported classifier (open_nsfw): conv + relu, transposed to N, H, W, C, then a spatial
    # mean: the fused reduction reads a strided view of the conv, and its body is typed for that view
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    nodes = [n("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
             n("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]), n("Exp", ["t"], ["e"]),
             n("ReduceMean", ["e"], ["out"], axes=[1, 2], keepdims=0)]
    model = make_model(nodes, {"x": x}, ["out"], {"w": _w(16, 8, 3, 3)})
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-6)
    assert any(i.op.name == "conv_epilogue" and i.op.channels_last for i in p.main.instructions)
