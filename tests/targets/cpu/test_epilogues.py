"""Epilogue fusion on the cpu target: how pointwise bodies read as oneDNN post-ops (epilogue.py), and
whole convolutions / products with their epilogues fused (conv_epilogue, dot_epilogue) against ORT."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ops.scalar import Const, Var, parse_expr
from fusegraph.targets.cpu.ops import ConvEpilogue, DotEpilogue
from fusegraph.targets.cpu.passes.epilogue import read_epilogue
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)
n = helper.make_node


@pytest.mark.parametrize("body, activations", [
    ("add(x0, x1)", []),
    ("max(add(x0, x1), 0)", [("relu", 0.0, 0.0)]),
    # hard-swish as PyTorch exports it: x * relu6(x + 3) / 6, the 1/6 folded into a later scale
    ("mul(mul(add(x0, x1), min(max(add(add(x0, x1), 3), 0), 6)), 0.5)",
     [("hard_swish", 0.0, 0.0), ("linear", 3.0, 0.0)]),
    # GELU with its 0.5 outside, and the affine 'x * 0.5 * 2' steps cancelling
    ("mul(mul(add(x0, x1), add(erf(mul(add(x0, x1), 0.7071067811865476)), 1)), 0.5)", [("gelu_erf", 0.0, 0.0)]),
    # ... and with x / sqrt(2), a division simplify_algebra keeps (its reciprocal is not exact)
    ("mul(mul(add(x0, x1), add(erf(div(add(x0, x1), 1.4142135381698608)), 1)), 0.5)", [("gelu_erf", 0.0, 0.0)]),
    # PP-LCNet's learnable affine block after a hard-sigmoid: scale then shift
    ("add(mul(max(min(add(mul(x0, 0.2), 0.5), 1), 0), 2.5), -1)",
     [("hard_sigmoid", 0.2, 0.5), ("linear", 2.5, -1.0)]),
    ("mul(sigmoid(add(x0, x1)), add(x0, x1))", [("silu", 0.0, 0.0)]),  # commuted
])
def test_read_epilogue(body, activations):
    ep = read_epilogue(parse_expr(body), lambda t: isinstance(t, (Var, Const)))
    assert ep is not None and ep.activations == activations
    assert ep.terms == [Var(0), Var(1)] or ep.terms == [Var(0)]


def test_read_epilogue_with_a_residual_after_the_activation():
    ep = read_epilogue(parse_expr("add(x2, mul(add(x0, x1), sigmoid(add(x0, x1))))"), lambda t: isinstance(t, Var))
    assert ep.terms == [Var(0), Var(1)] and ep.residuals == [Var(2)]
    assert ep.activations == [("silu", 0.0, 0.0), ("residual", 0.0, 0.0)]


@pytest.mark.parametrize("body", ["mul(x0, x1)", "exp(add(x0, x1))", "add(x0, mul(x0, exp(x1)))"])
def test_read_epilogue_refuses_what_post_ops_cannot_do(body):
    assert read_epilogue(parse_expr(body), lambda t: isinstance(t, (Var, Const))) is None


def _compile(model, inputs):
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    return p, p.run(inputs)


def _ops(p, cls):
    return [i.op for i in p.main.instructions if isinstance(i.op, cls)]


def test_conv_batchnorm_hardswish_scale_and_residual_fuse_into_one_conv():
    c = 16
    x = rng.standard_normal((1, c, 12, 12)).astype(np.float32)
    init = {"w": (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32),
            "s": rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32),
            "b": rng.standard_normal((1, c, 1, 1)).astype(np.float32),
            "three": np.array(3, np.float32), "zero": np.array(0, np.float32), "six": np.array(6, np.float32),
            "k": np.array(0.3, np.float32)}
    nodes = [n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), n("Mul", ["y", "s"], ["ys"]),
             n("Add", ["ys", "b"], ["t"]), n("Add", ["t", "three"], ["t3"]), n("Clip", ["t3", "zero", "six"], ["r6"]),
             n("Mul", ["t", "r6"], ["h"]), n("Mul", ["h", "k"], ["hk"]), n("Add", ["hk", "x"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    # the residual comes after the activations: oneDNN's sum post-op sits where the model adds it
    (op,) = _ops(p, ConvEpilogue)
    assert op.has_bias and op.n_residual == 1
    assert [a[0] for a in op.activations] == ["hard_swish", "linear", "residual"]


def test_conv_bias_residual_relu_fuse():
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    init = {"w": (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32),
            "bias": rng.standard_normal(8).astype(np.float32)}
    nodes = [n("Conv", ["x", "w", "bias"], ["y"]), n("Add", ["y", "x"], ["s"]), n("Relu", ["s"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (op,) = _ops(p, ConvEpilogue)
    assert op.has_bias and op.n_residual == 1 and op.activations == (("residual", 0.0, 0.0), ("relu", 0.0, 0.0))


@pytest.mark.parametrize("act", ["Gelu", "Relu", "Tanh", None])
def test_matmul_bias_activation_fuse_through_the_frontend_reshape(act):
    x = rng.standard_normal((2, 16, 32)).astype(np.float32)
    init = {"w": (rng.standard_normal((32, 48)) * 0.2).astype(np.float32),
            "b": rng.standard_normal(48).astype(np.float32)}
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Add", ["y", "b"], ["out" if act is None else "z"])]
    if act:
        nodes.append(n(act, ["z"], ["out"]))
    model = make_model(nodes, {"x": x}, ["out"], init, opset=20)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (op,) = _ops(p, DotEpilogue)
    assert op.has_bias and op.out_lens == (2, 16, 48)


def test_dense_residual_fuses_and_shared_product_does_not():
    x = rng.standard_normal((16, 32)).astype(np.float32)
    r = rng.standard_normal((16, 32)).astype(np.float32)
    init = {"w": (rng.standard_normal((32, 32)) * 0.2).astype(np.float32)}
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Add", ["y", "r"], ["a"]), n("Tanh", ["a"], ["out"]),
             n("MatMul", ["out", "w"], ["y2"]), n("Sigmoid", ["y2"], ["s"]), n("Mul", ["y2", "s"], ["out2"]),
             n("Add", ["y2", "r"], ["out3"])]
    model = make_model(nodes, {"x": x, "r": r}, ["out", "out2", "out3"], init)
    p, got = _compile(model, {"x": x, "r": r})
    assert_close(got, run_ort(model, {"x": x, "r": r}))
    (op,) = _ops(p, DotEpilogue)  # the second product feeds two epilogues: it stays a plain dot
    assert op.n_residual == 1 and op.activations == (("residual", 0.0, 0.0), ("tanh", 0.0, 0.0))


def test_epilogue_ops_reference_matches_the_cpu_kernels():
    # the fused ops keep a numpy reference: the cpu-rewritten program runs on ref too
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    init = {"w": (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
            "b": rng.standard_normal((1, 8, 1, 1)).astype(np.float32)}
    nodes = [n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), n("Add", ["y", "b"], ["t"]),
             n("HardSigmoid", ["t"], ["out"], alpha=0.25, beta=0.4)]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    text = p.to_text()
    ref = fusegraph.Program.from_text(text)
    ref.compile(fusegraph.get_target("ref"), fusegraph.CompileOptions(optimize=False))
    assert_close(ref.run({"x": x}), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out_channels, act", [(16, "Relu"), (1, "Sigmoid")])
def test_deconvolution_scale_bias_activation_fuse(out_channels, act):
    # PP-OCR's detector head: ConvTranspose, BatchNorm as mul + add, then ReLU (16 channels, run
    # channels-last) or a sigmoid over one channel (gemm-based: the chain runs after the primitive)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    init = {"w": (rng.standard_normal((8, out_channels, 2, 2)) * 0.3).astype(np.float32),
            "s": rng.uniform(0.5, 1.5, (1, out_channels, 1, 1)).astype(np.float32),
            "b": rng.standard_normal((1, out_channels, 1, 1)).astype(np.float32)}
    nodes = [n("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2]), n("Mul", ["y", "s"], ["ys"]),
             n("Add", ["ys", "b"], ["t"]), n(act, ["t"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (op,) = [i.op for i in p.main.instructions if i.op.name == "deconv_epilogue"]
    assert op.has_bias and op.activations == ((act.lower(), 0.0, 0.0),)
    assert op.channels_last == (out_channels >= 8)


@pytest.mark.parametrize("attrs", [dict(pads=[1, 1]), dict(pads=[2, 1], strides=[2], dilations=[2]),
                                   dict(pads=[1, 1], group=2)])
def test_small_1d_convs_with_epilogue_run_in_numpy(attrs):
    # silero-vad's tiny 1-D convs: im2col by a precomputed gather, one product, the chain in numpy
    x = rng.standard_normal((2, 8, 9)).astype(np.float32)
    g = attrs.get("group", 1)
    init = {"w": (rng.standard_normal((6, 8 // g, 3)) * 0.3).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32)}
    nodes = [n("Conv", ["x", "w", "b"], ["y"], **attrs), n("Sigmoid", ["y"], ["s"]), n("Mul", ["y", "s"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (step,) = [s for s in p.executable.steps if s.name == "conv_epilogue"]
    assert "small" in step.fn.__qualname__ or "_small" in step.fn.__qualname__


@pytest.mark.parametrize("length, attrs", [(2, dict(pads=[0, 1])), (1, dict(pads=[1, 1])), (3, dict()),
                                          (4, dict(pads=[1, 1]))])
def test_small_convs_over_few_positions_run_as_generated_c(length, attrs):
    # silero-vad's last encoder convs (1 or 2 positions in, 1 out), padding included: below oneDNN's
    # cost per call a tiny convolution is generated C (codegen/small_conv.py), a native program's step
    x = rng.standard_normal((2, 8, length)).astype(np.float32)
    init = {"w": (rng.standard_normal((6, 8, 3)) * 0.3).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32)}
    nodes = [n("Conv", ["x", "w", "b"], ["y"], **attrs), n("Relu", ["y"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (step,) = [s for s in p.executable.steps if s.name == "conv_epilogue"]
    assert "c_small_conv" in step.fn.__qualname__


def test_small_conv_with_a_residual():
    x = rng.standard_normal((1, 4, 6, 5)).astype(np.float32)
    init = {"w": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)}
    nodes = [n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), n("Relu", ["y"], ["r"]), n("Add", ["r", "x"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (op,) = _ops(p, ConvEpilogue)
    assert op.activations == (("relu", 0.0, 0.0), ("residual", 0.0, 0.0))


def test_products_of_one_input_merge_into_one():
    # a transformer's Q, K, V projections (bias on two, none on the third) and an unrelated product
    x = rng.standard_normal((1, 16, 32)).astype(np.float32)
    init = {f"w{k}": (rng.standard_normal((32, 24)) * 0.2).astype(np.float32) for k in "qkv"}
    init["wo"] = (rng.standard_normal((24, 24)) * 0.2).astype(np.float32)
    init |= {"bq": rng.standard_normal(24).astype(np.float32), "bk": rng.standard_normal(24).astype(np.float32)}
    nodes = [n("MatMul", ["x", "wq"], ["q0"]), n("Add", ["q0", "bq"], ["q"]),
             n("MatMul", ["x", "wk"], ["k0"]), n("Add", ["k0", "bk"], ["k"]), n("MatMul", ["x", "wv"], ["v"]),
             n("Relu", ["q"], ["rq"]), n("MatMul", ["rq", "wo"], ["o"])]
    model = make_model(nodes, {"x": x}, ["q", "k", "v", "o"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-5)
    merged = [i.op for i in p.main.instructions if i.op.name == "dot_epilogue" and i.shape.lens == (16, 72)]
    assert len(merged) == 1 and merged[0].has_bias


def test_dense_bias_then_scale_runs_where_onednn_has_only_its_reference_kernel():
    # OPT's and Whisper's query projection (x @ Wq + b) * 0.25 fuses as a product, a 0.25 scale and
    # the scaled bias as a residual; oneDNN's matmul has only its reference kernel for a linear
    # post-op before a Sum, so the chain runs in numpy after the product there
    x = rng.standard_normal((1, 16, 32)).astype(np.float32)
    init = {"w": (rng.standard_normal((32, 32)) * 0.2).astype(np.float32), "s": np.array(0.25, np.float32),
            "b": rng.standard_normal(32).astype(np.float32)}
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Add", ["y", "b"], ["yb"]), n("Mul", ["yb", "s"], ["ys"]),
             n("Transpose", ["ys"], ["out"], perm=[0, 2, 1])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    (op,) = _ops(p, DotEpilogue)
    assert op.n_residual == 1 and op.activations == (("linear", 0.25, 0.0), ("residual", 0.0, 0.0))
