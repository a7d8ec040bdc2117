"""ONNX Runtime contrib ops (com.microsoft) against ONNX Runtime's CPU kernels: activations,
FusedMatMul, normalizations, and a BERT layer chaining them. Attention ops and quantized ops have
files of their own (test_contrib_attention.py, test_contrib_quantized.py).

Ops ORT's CPU provider lacks (BiasAdd, BiasSplitGelu) are checked against ORT running the same math
spelled in standard ops.
"""

import itertools

import numpy as np
import pytest
from onnx import helper

from tests.onnx.contrib_util import MS, contrib_check, randn, rng
from tests.util import assert_close, check_vs_ort, make_model, run_fusegraph, run_ort

# -- activations -------------------------------------------------------------------------------------
X = randn(2, 3, 16) * 3


@pytest.mark.parametrize("dtype, tol", [(np.float32, {}), (np.float16, {"rtol": 2e-3, "atol": 2e-3})])
def test_gelu_family(dtype, tol):
    x, b = X.astype(dtype), randn(16, dtype=dtype)
    contrib_check("Gelu", {"x": x}, **tol)
    contrib_check("BiasGelu", {"x": x, "b": b}, **tol)
    contrib_check("FastGelu", {"x": x}, **tol)
    contrib_check("FastGelu", {"x": x, "b": b}, **tol)
    contrib_check("QuickGelu", {"x": x}, **tol)


@pytest.mark.parametrize("alpha", [1.0, -0.5, 2.25])
def test_quick_gelu_alpha(alpha):
    contrib_check("QuickGelu", {"x": X}, {"alpha": alpha})


def _same_as_standard(contrib: list, standard: list, inputs, opset=20):
    """The contrib node(s) on fusegraph against ORT running `standard` (standard ONNX nodes)."""
    got = run_fusegraph(make_model(contrib, inputs, ["y"], opset=opset, extra_opsets={MS: 1}), inputs)
    assert_close(got, run_ort(make_model(standard, inputs, ["y"], opset=opset), inputs))


def test_bias_add():
    inputs = {"x": X, "b": randn(16), "s": randn(2, 3, 16)}
    _same_as_standard([helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)],
                      [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Add", ["t", "s"], ["y"])],
                      inputs)


def test_bias_split_gelu():
    inputs = {"x": X, "b": randn(16)}
    split = helper.make_tensor("sizes", 7, [2], [8, 8])
    _same_as_standard([helper.make_node("BiasSplitGelu", ["x", "b"], ["y"], domain=MS)],
                      [helper.make_node("Constant", [], ["sizes"], value=split),
                       helper.make_node("Add", ["x", "b"], ["t"]),
                       helper.make_node("Split", ["t", "sizes"], ["l", "r"], axis=-1),
                       helper.make_node("Gelu", ["r"], ["g"]), helper.make_node("Mul", ["l", "g"], ["y"])],
                      inputs)


# -- FusedMatMul -------------------------------------------------------------------------------------
def _physical(t, trans, trans_batch):
    """The stored layout that FusedMatMul's flags read back as the logical operand `t`."""
    if trans:
        t = np.swapaxes(t, -1, -2)
    if trans_batch:
        t = np.moveaxis(t, -2, 0)
    return np.ascontiguousarray(t)


@pytest.mark.parametrize("ta, tb, tba, tbb", list(itertools.product([0, 1], repeat=4)))
def test_fused_matmul_flags(ta, tb, tba, tbb):
    a, b = _physical(randn(3, 4, 2, 5), ta, tba), _physical(randn(3, 4, 5, 6), tb, tbb)
    attrs = {"transA": ta, "transB": tb, "transBatchA": tba, "transBatchB": tbb, "alpha": 0.5}
    contrib_check("FusedMatMul", {"a": a, "b": b}, attrs)


def test_fused_matmul_broadcast():
    contrib_check("FusedMatMul", {"a": randn(2, 3, 4), "b": randn(6, 4)}, {"transB": 1, "alpha": 2.0})
    contrib_check("FusedMatMul", {"a": randn(4, 3), "b": randn(2, 4, 5)}, {"transA": 1})


# -- normalizations ----------------------------------------------------------------------------------
H = 16
GAMMA, BETA, BIAS = randn(H), randn(H), randn(H)
SKIP_OUTS = ("y", "mean", "inv_std", "sum")


@pytest.mark.parametrize("skip_shape", [(2, 3, H), (1, 3, H), (3, H)])
@pytest.mark.parametrize("with_beta, with_bias", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_skip_layer_norm(skip_shape, with_beta, with_bias):
    inputs = {"x": randn(2, 3, H), "skip": randn(*skip_shape), "gamma": GAMMA}
    names = ["x", "skip", "gamma", "beta" if with_beta else "", "bias" if with_bias else ""]
    inputs.update({k: v for k, v in (("beta", BETA), ("bias", BIAS)) if k in names})
    contrib_check("SkipLayerNormalization", inputs, {"epsilon": 1e-5}, SKIP_OUTS, input_names=names)


def test_skip_layer_norm_2d_fp16_and_default_epsilon():
    x, skip = randn(5, H, dtype=np.float16), randn(5, H, dtype=np.float16)
    contrib_check("SkipLayerNormalization", {"x": x, "skip": skip, "gamma": GAMMA.astype(np.float16)},
                  outputs=SKIP_OUTS, rtol=2e-3, atol=2e-3)
    contrib_check("SkipLayerNormalization", {"x": randn(5, H), "skip": randn(5, H), "gamma": GAMMA},
                  outputs=("y",))


@pytest.mark.parametrize("with_bias", [0, 1])
def test_skip_simplified_layer_norm(with_bias):
    inputs = {"x": randn(2, 3, H), "skip": randn(1, 3, H), "gamma": GAMMA}
    names = ["x", "skip", "gamma"] + (["bias"] if with_bias else [])
    if with_bias:
        inputs["bias"] = BIAS
    # ORT leaves the `mean` output of the RMS variant unwritten, so it is not compared
    contrib_check("SkipSimplifiedLayerNormalization", inputs, {"epsilon": 1e-6}, ("y", "", "inv_std", "sum"),
                  input_names=names)


def _default_domain_check(op_type, inputs, attrs, outputs, opset=13):
    node = helper.make_node(op_type, list(inputs), list(outputs), **attrs)
    check_vs_ort(make_model([node], inputs, list(outputs), opset=opset), inputs)


@pytest.mark.parametrize("axis", [-1, -2, 1])
def test_layer_norm_before_opset_17(axis):
    x = randn(2, 3, 4, 5)
    tail = x.shape[axis % 4:]
    _default_domain_check("LayerNormalization", {"x": x, "s": randn(*tail), "b": randn(*tail)},
                          {"axis": axis, "epsilon": 1e-3}, ["y", "mean", "inv_std"])


@pytest.mark.parametrize("axis", [-1, 2])
def test_simplified_layer_norm(axis):
    x = randn(2, 3, 4, 5)
    _default_domain_check("SimplifiedLayerNormalization", {"x": x, "s": randn(*x.shape[axis % 4:])},
                          {"axis": axis}, ["y", "inv_std"])


VOCAB, SEQ = 11, 5
IDS = rng.integers(0, VOCAB, (2, SEQ)).astype(np.int32)
EMBED = {"word": randn(VOCAB, H), "position": randn(8, H)}


@pytest.mark.parametrize("segments, mask, positions", [
    (True, True, None), (False, False, None), (True, False, (1, SEQ)), (False, True, (2, SEQ))])
def test_embed_layer_norm(segments, mask, positions):
    inputs = {"ids": IDS}
    names = ["ids", "seg" if segments else "", "word", "position", "segment" if segments else "",
             "gamma", "beta", "mask" if mask else "", "pos" if positions else ""]
    if segments:
        inputs.update(seg=rng.integers(0, 2, (2, SEQ)).astype(np.int32), segment=randn(2, H))
    if mask:  # a 2 is not a 1: ORT counts only the 1s
        inputs["mask"] = np.array([[1, 1, 1, 0, 0], [1, 2, 1, 1, 1]], np.int32)
    if positions:
        inputs["pos"] = rng.integers(0, 8, positions).astype(np.int32)
    inputs.update(EMBED, gamma=GAMMA, beta=BETA)
    contrib_check("EmbedLayerNormalization", inputs, {"epsilon": 1e-5}, ("y", "mask_index", "sum"),
                  input_names=names)


def test_embed_layer_norm_fp16():
    inputs = {"ids": IDS, **{k: v.astype(np.float16) for k, v in EMBED.items()},
              "gamma": GAMMA.astype(np.float16), "beta": BETA.astype(np.float16)}
    contrib_check("EmbedLayerNormalization", inputs, outputs=("y", "mask_index", "sum"),
                  input_names=["ids", "", "word", "position", "", "gamma", "beta"], rtol=2e-3, atol=2e-3)


def test_bert_layer_chain():
    """The contrib ops of an ORT-optimized BERT layer wired as the optimizer wires them: the mask
    index of EmbedLayerNormalization feeds Attention, whose output goes through SkipLayerNorm and a
    BiasGelu feed-forward."""
    ffn = 32
    inputs = {"ids": IDS, "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)}
    weights = {**EMBED, "gamma": GAMMA, "beta": BETA, "qkv_w": randn(H, 3 * H) * 0.3, "qkv_b": randn(3 * H),
               "w1": randn(H, ffn) * 0.3, "b1": randn(ffn), "w2": randn(ffn, H) * 0.3}
    nodes = [
        helper.make_node("EmbedLayerNormalization", ["ids", "", "word", "position", "", "gamma", "beta", "mask"],
                         ["emb", "mask_index"], domain=MS),
        helper.make_node("Attention", ["emb", "qkv_w", "qkv_b", "mask_index"], ["att"], domain=MS, num_heads=4),
        helper.make_node("SkipLayerNormalization", ["att", "emb", "gamma", "beta"], ["ln"], domain=MS),
        helper.make_node("MatMul", ["ln", "w1"], ["h1"]),
        helper.make_node("BiasGelu", ["h1", "b1"], ["g"], domain=MS),
        helper.make_node("FusedMatMul", ["g", "w2"], ["y"], domain=MS, alpha=0.5),
    ]
    check_vs_ort(make_model(nodes, inputs, ["y"], weights, extra_opsets={MS: 1}), inputs)
