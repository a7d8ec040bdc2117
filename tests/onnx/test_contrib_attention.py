"""ONNX Runtime's Attention, MultiHeadAttention and RotaryEmbedding against ONNX Runtime's CPU kernels.

MultiHeadAttention's packed QKV and KV layouts, which ORT's CPU kernel lacks, are checked against
ORT running the unpacked layout.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import ParseError
from tests.onnx.contrib_util import MS, contrib_check, contrib_model, randn, rng
from tests.util import assert_close, check_vs_ort, make_model, run_fusegraph, run_ort

# -- Attention ---------------------------------------------------------------------------------------
B, S, DIN, NH = 2, 4, 6, 2


def _attention_inputs(hidden=(8, 8, 8), bias=True):
    inputs = {"x": randn(B, S, DIN), "w": randn(DIN, sum(hidden)) * 0.5}
    if bias:
        inputs["b"] = randn(sum(hidden))
    return inputs


def _with(inputs, names, **extra):
    """inputs plus `extra`, and the node's input list with "" for the absent optional ones."""
    inputs = {**inputs, **extra}
    return inputs, [n if n in inputs else "" for n in names]


ATTENTION_INPUTS = ["x", "w", "b", "mask", "past", "attention_bias"]
MASKS = {  # every row keeps at least one key: a row with none averages values behind -10000s
    "lengths": np.array([3, 1], np.int32),
    "ends_starts": np.array([4, 3, 1, 0], np.int32),
    "2d": np.array([[1, 0, 1, 1], [0, 1, 1, 0]], np.int32),
    "3d": np.concatenate([np.ones((B, S, 1), np.int32), rng.integers(0, 2, (B, S, S - 1)).astype(np.int32)], 2),
}


@pytest.mark.parametrize("mask", [None, *MASKS])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(mask, unidirectional):
    extra = {} if mask is None else {"mask": MASKS[mask]}
    inputs, names = _with(_attention_inputs(), ATTENTION_INPUTS, **extra)
    contrib_check("Attention", inputs, {"num_heads": NH, "unidirectional": unidirectional}, ("y", "present"),
                  input_names=names)


def test_attention_hidden_sizes_scale_bias_and_filter():
    inputs, names = _with(_attention_inputs((8, 8, 4), bias=False), ATTENTION_INPUTS,
                          mask=MASKS["2d"], attention_bias=randn(1, NH, S, S))
    attrs = {"num_heads": NH, "qkv_hidden_sizes": [8, 8, 4], "scale": 0.3, "mask_filter_value": -50.0}
    contrib_check("Attention", inputs, attrs, input_names=names)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_past_present(unidirectional):
    past = randn(2, B, NH, 3, 4)
    inputs, names = _with(_attention_inputs(), ATTENTION_INPUTS, past=past, mask=np.array([6, 7], np.int32))
    contrib_check("Attention", inputs, {"num_heads": NH, "unidirectional": unidirectional}, ("y", "present"),
                  input_names=names)


@pytest.mark.parametrize("extra, attrs, message", [
    ({"mask": np.ones((B, 1, S, S), np.int32)}, {}, "mask"),  # Megatron's 4-D mask: ORT's CPU kernel lacks it too
    ({}, {"do_rotary": 1}, "do_rotary"),
    ({}, {"qkv_hidden_sizes": [8, 8]}, "qkv_hidden_sizes"),
])
def test_attention_unsupported_forms_name_the_node(extra, attrs, message):
    inputs, names = _with(_attention_inputs(), ATTENTION_INPUTS, **extra)
    model = contrib_model("Attention", inputs, {"num_heads": NH, **attrs}, input_names=names)
    model.graph.node[0].name = "attn0"
    with pytest.raises(ParseError, match=f"attn0.*{message}"):
        fusegraph.parse_onnx(model)


# -- MultiHeadAttention ------------------------------------------------------------------------------
L, D = 5, 8
MHA_INPUTS = ["q", "k", "v", "bias", "mask", "attention_bias", "past_key", "past_value"]
MHA_OUTS = ("y", "present_key", "present_value")


def _mha_inputs(sq=S, skv=L):
    return {"q": randn(B, sq, D), "k": randn(B, skv, D), "v": randn(B, skv, D)}


@pytest.mark.parametrize("mask", [None, "lengths", "2d", "3d"])
def test_mha_masks_and_bias(mask):
    masks = {"lengths": np.array([2, 5], np.int32), "2d": np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], np.int32),
             "3d": np.concatenate([np.ones((B, S, 1), np.int32), rng.integers(0, 2, (B, S, L - 1))], 2)}
    extra = {"bias": randn(3 * D), "attention_bias": randn(B, 1, S, L)}
    if mask:
        extra["mask"] = masks[mask].astype(np.int32)
    inputs, names = _with(_mha_inputs(), MHA_INPUTS, **extra)
    contrib_check("MultiHeadAttention", inputs, {"num_heads": NH, "scale": 0.4}, MHA_OUTS, input_names=names)


@pytest.mark.parametrize("sq, skv", [(4, 4), (4, 3), (3, 5)])
def test_mha_unidirectional(sq, skv):
    """With more keys than queries ORT hides keys after i for query i, but not for the last query."""
    inputs, names = _with(_mha_inputs(sq, skv), MHA_INPUTS)
    contrib_check("MultiHeadAttention", inputs, {"num_heads": NH, "unidirectional": 1}, input_names=names)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_mha_past_present(unidirectional):
    inputs, names = _with(_mha_inputs(S, S), MHA_INPUTS, past_key=randn(B, NH, 3, D // NH),
                          past_value=randn(B, NH, 3, D // NH), mask=np.array([[1] * 6 + [0], [0] + [1] * 6], np.int32))
    contrib_check("MultiHeadAttention", inputs, {"num_heads": NH, "unidirectional": unidirectional}, MHA_OUTS,
                  input_names=names)


def test_mha_per_head_keys_take_no_bias():
    per_head = {"k": randn(B, NH, L, D // NH), "v": randn(B, NH, L, D // NH)}
    inputs, names = _with(_mha_inputs(), MHA_INPUTS, bias=randn(3 * D), **per_head)
    contrib_check("MultiHeadAttention", inputs, {"num_heads": NH}, input_names=names)


def test_mha_qk_output():
    inputs, names = _with(_mha_inputs(), MHA_INPUTS, mask=np.array([[1, 1, 0, 1, 1], [1, 0, 1, 1, 1]], np.int32),
                          attention_bias=randn(1, NH, S, L))
    model = contrib_model("MultiHeadAttention", inputs, {"num_heads": NH}, ("y", "", "", "qk"), input_names=names)
    # ORT cannot infer qk's element type (it has a type variable of its own): declare it
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("qk", TensorProto.FLOAT, None))
    check_vs_ort(model, inputs)


def _heads_last(t):
    """(B, L, N*H) -> (B, L, N, 1, H), a slot of a packed layout."""
    return t.reshape(B, t.shape[1], NH, 1, D // NH)


def test_mha_packed_layouts_match_unpacked():
    """ORT's CPU kernel has no packed QKV or KV; the packed forms must equal the unpacked ones."""
    q, k, v = (randn(B, S, D) for _ in range(3))
    bias = randn(3 * D)

    def model(names, inputs):
        node = helper.make_node("MultiHeadAttention", names, ["y"], domain=MS, num_heads=NH)
        return make_model([node], inputs, ["y"], extra_opsets={MS: 1})

    plain = {"q": q, "k": k, "v": v, "bias": bias}
    expected = run_ort(model(["q", "k", "v", "bias"], plain), plain)
    kv = {"q": q, "kv": np.concatenate([_heads_last(k), _heads_last(v)], 3), "bias": bias}
    assert_close(run_fusegraph(model(["q", "kv", "", "bias"], kv), kv), expected)
    qkv = {"qkv": np.concatenate([_heads_last(q), _heads_last(k), _heads_last(v)], 3), "bias": bias}
    assert_close(run_fusegraph(model(["qkv", "", "", "bias"], qkv), qkv), expected)


# -- RotaryEmbedding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("offset", [False, True])
def test_rotary_embedding(rank, interleaved, rotary_dim, offset):
    heads, head, seq, max_seq = 2, 8, 3, 10
    half = (rotary_dim or head) // 2
    x = randn(B, seq, heads * head) if rank == 3 else randn(B, heads, seq, head)
    pos = np.array([4], np.int64) if offset else rng.integers(0, max_seq, (B, seq)).astype(np.int64)
    inputs = {"x": x, "pos": pos, "cos": randn(max_seq, half), "sin": randn(max_seq, half)}
    attrs = {"interleaved": interleaved}
    if rotary_dim:
        attrs.update(rotary_embedding_dim=rotary_dim, num_heads=heads)
    contrib_check("RotaryEmbedding", inputs, attrs)
