"""The gpu target end to end against ONNX Runtime: small graphs that exercise each lowering kind
(generated pointwise and reduction kernels, cuBLAS with the bias epilogue, attention, cuDNN
convolution and pooling, views, copies), in fp32 and through quantize_fp16. They run on the GPU when
there is one, else on the CPU through Triton's interpreter (see conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def check(target, model, inputs, fp16=False, rtol=1e-4, atol=1e-5):
    p = fusegraph.parse_onnx(model)
    p.compile(target, fusegraph.CompileOptions(fp16=fp16))
    got = p.run(inputs)
    assert_close(got, run_ort(model, inputs), rtol=rtol, atol=atol)
    return p


def test_pointwise_chain_with_broadcasts(gpu_target):
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Mul", ["e", "x"], ["m"]), helper.make_node("Relu", ["m"], ["y"]),
             helper.make_node("Less", ["y", "b"], ["c"])]
    check(gpu_target, make_model(nodes, {"x": randn(2, 3, 5), "b": randn(3, 1)}, ["y", "c"]),
          {"x": randn(2, 3, 5), "b": randn(3, 1)})


def test_integer_pointwise_truncates_like_c(gpu_target):
    nodes = [helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mod", ["a", "b"], ["r"], fmod=0)]
    a = rng.integers(-20, 20, (17,)).astype(np.int64)
    b = rng.choice([-3, -2, 2, 5], (17,)).astype(np.int64)
    check(gpu_target, make_model(nodes, {"a": a, "b": b}, ["q", "r"]), {"a": a, "b": b})


def test_layer_norm_and_softmax_fuse_into_reductions(gpu_target):
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "bb"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1),
             helper.make_node("ReduceMean", ["y"], ["m"], axes=[1], keepdims=1)]
    x = {"x": randn(4, 6, 48), "r": randn(4, 6, 48)}
    inits = {"g": randn(48), "bb": randn(48)}
    model = make_model(nodes, x, ["y", "m"], initializers=inits, opset=17)
    p = check(gpu_target, model, x)
    kinds = [s.kind for s in p.executable.plan.steps]
    assert "fused_reduce" in kinds and not {"softmax", "moments"} & set(kinds)


def test_gemm_bias_and_attention(gpu_target):
    b, h, s, d = 2, 2, 8, 16
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "bias"], ["q"]),
             helper.make_node("Reshape", ["q", "shape"], ["q4"]),
             helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["qh", "kt"], ["sc"]), helper.make_node("Mul", ["sc", "scale"], ["z"]),
             helper.make_node("Add", ["z", "mask"], ["zm"]), helper.make_node("Softmax", ["zm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "qh"], ["y"])]
    inits = {"w": randn(h * d, h * d) * 0.2, "bias": randn(h * d), "shape": np.array([b, s, h, d], np.int64),
             "scale": np.array([d ** -0.5], np.float32)}
    x = {"x": randn(b, s, h * d), "mask": np.where(rng.random((b, 1, 1, s)) < 0.2, -1e4, 0).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    kinds = [s.kind for s in p.executable.plan.steps]
    assert "attention" in kinds and "softmax" not in kinds
    assert_close(p.run(x), run_ort(model, x), rtol=1e-3, atol=1e-4)
    check(gpu_target, model, x, fp16=True, rtol=2e-2, atol=2e-2)


def test_conv_pool_concat_resize(gpu_target):
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
             helper.make_node("AveragePool", ["r"], ["ap"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], strides=[2, 2]),
             helper.make_node("Resize", ["ap", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Concat", ["mp", "up"], ["y"], axis=1)]
    inits = {"w": randn(8, 3, 3, 3) * 0.3, "cb": randn(8), "scales": np.array([1, 1, 2, 2], np.float32)}
    x = {"x": randn(2, 3, 12, 12)}
    check(gpu_target, make_model(nodes, x, ["y"], initializers=inits), x, rtol=1e-3, atol=1e-4)


def test_concat_inputs_are_computed_in_place(gpu_target):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["s", "r", "x"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"])]
    inits = {"w": randn(4, 3, 3, 3), "w2": randn(2, 10, 1, 1)}
    x = {"x": randn(2, 3, 6, 6)}
    p = check(gpu_target, make_model(nodes, x, ["y", "cat"], initializers=inits), x, rtol=1e-3, atol=1e-4)
    plan = p.executable.plan
    assert len(plan.slices) == 2  # sigmoid and relu write into the concat; the input x is copied
    assert all(plan.storage[u] == "slice" for u in plan.slices)


def test_views_copies_and_gathers(gpu_target):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Slice", ["r", "st", "en", "ax", "sp"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["g"], axis=0),
             helper.make_node("Pad", ["g", "pads"], ["y"], mode="reflect")]
    inits = {"shape": np.array([6, 8], np.int64), "st": np.array([5, 1], np.int64), "en": np.array([-100, 7], np.int64),
             "ax": np.array([0, 1], np.int64), "sp": np.array([-2, 2], np.int64),
             "idx": np.array([[0, -1], [1, 2]], np.int64), "pads": np.array([0, 0, 1, 0, 0, 1], np.int64)}
    x = {"x": randn(2, 3, 8)}
    check(gpu_target, make_model(nodes, x, ["y"], initializers=inits), x)


def test_quantized_program_keeps_float32_io(gpu_target):
    from fusegraph.models import get_model, sample_inputs

    feeds = sample_inputs("bert_small", batch=1)
    dims = {k: list(v.shape) for k, v in feeds.items()}
    ref = fusegraph.parse_onnx(get_model("bert_small"), map_input_dims=dims).compile(fusegraph.get_target("ref"))
    p = fusegraph.parse_onnx(get_model("bert_small"), map_input_dims=dims)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    for got, want in zip(p.run(feeds), ref.run(feeds)):
        assert got.dtype == np.float32
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3  # fp16's documented tolerance


def test_device_tensors_in_and_out(gpu_target):
    import torch

    nodes = [helper.make_node("Sigmoid", ["x"], ["y"])]
    model = make_model(nodes, {"x": randn(3, 4)}, ["y"])
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    exe = p.executable
    x = torch.randn(3, 4, device=exe.device)
    (y,) = exe.run({"x": x})  # a torch tensor in: a device tensor out, no host copy
    assert isinstance(y, torch.Tensor) and y.device == x.device
    torch.testing.assert_close(y, torch.sigmoid(x))
    exe.input_buffers()["x"].copy_(x * 2)  # zero-copy input: write the buffer, run with no inputs
    (y2,) = exe.run_device()
    torch.testing.assert_close(y2, torch.sigmoid(x * 2))
    with pytest.raises(fusegraph.errors.InputError):
        exe.run_device({"x": torch.zeros(4, 3, device=exe.device)})


@pytest.mark.gpu
def test_a_compile_leaves_no_cublas_workspace_outside_its_graph():
    """cuBLAS keeps a workspace per stream for the life of the process (32 MiB on an H200): a
    compile leaves none behind; its CUDA graph's pool holds the one the capture used, and replays
    still compute the product."""
    import torch

    from fusegraph.targets.gpu import GpuTarget

    x, w = randn(64, 64), randn(64, 64)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": w})
    torch._C._cuda_clearCublasWorkspaces()
    before = torch.cuda.memory_allocated()
    p = fusegraph.parse_onnx(model).compile(GpuTarget(gemm="library"))
    held = torch.cuda.memory_allocated() - before
    assert p.executable.graph is not None
    assert held < 2**20, f"a 64x64 matmul holds {held / 2**20:.1f} MiB"
    for _ in range(3):
        assert_close(p.run({"x": x}), run_ort(model, {"x": x}), rtol=1e-4, atol=1e-4)
