"""ONNX Runtime contrib ops (com.microsoft) against ONNX Runtime's CPU kernels.

Ops ORT's CPU provider lacks (BiasAdd, BiasSplitGelu, MultiHeadAttention's packed layouts) are
checked against ORT running the same math spelled in standard ops or in the unpacked layout.
"""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import ParseError
from tests.util import assert_close, check_vs_ort, make_model, run_fusegraph, run_ort

MS = "com.microsoft"
rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def contrib_model(op_type, inputs, attrs=None, outputs=("y",), initializers=None, input_names=None, opset=17):
    """One com.microsoft node; `input_names` may hold "" for absent optional inputs, `outputs` ""
    for outputs left unrequested."""
    names = list(input_names) if input_names is not None else list(inputs) + list(initializers or {})
    node = helper.make_node(op_type, names, list(outputs), domain=MS, **(attrs or {}))
    return make_model([node], inputs, [o for o in outputs if o], initializers, opset, {MS: 1})


def contrib_check(op_type, inputs, attrs=None, outputs=("y",), initializers=None, input_names=None, **tol):
    model = contrib_model(op_type, inputs, attrs, outputs, initializers, input_names)
    return check_vs_ort(model, inputs, **tol)


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


# -- quantized ops -----------------------------------------------------------------------------------
QTYPES = [np.uint8, np.int8]


def _every_value(dtype):
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype)


def _qparams(dtype, prefix, n, scale_range=(-5, -1)):
    """n (scale, zero point) pairs named prefix0, prefix0_zp, ..."""
    info = np.iinfo(dtype)
    out = {}
    for k in range(n):
        out[f"{prefix}{k}"] = np.array(np.exp(rng.uniform(*scale_range)), np.float32)
        out[f"{prefix}{k}_zp"] = np.array(rng.integers(info.min, info.max), dtype)
    return out


def _within_one_lsb(got, expected, max_fraction):
    """ORT's x86 QLinearAdd kernel fuses its multiply-adds (FMA; NEON uses fixed point), so a sum
    within float rounding of a .5 tie may land one step away from any unfused float32 evaluation."""
    (got,), (expected,) = got, expected
    assert got.dtype == expected.dtype and got.shape == expected.shape
    diff = np.abs(got.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1 and np.count_nonzero(diff) <= max_fraction * diff.size, np.count_nonzero(diff)


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_every_pair(op_type, dtype):
    """All 65536 (a, b) pairs; the scales make half-way ties common (0.05 + 0.05 over 0.1)."""
    a, b = (t.reshape(-1).copy() for t in np.meshgrid(_every_value(dtype), _every_value(dtype)))
    for params in [_qparams(dtype, "s", 3), {**_qparams(dtype, "s", 3), "s0": np.float32(0.05),
                                            "s1": np.float32(0.05), "s2": np.float32(0.1)}]:
        params = {k: np.asarray(v) for k, v in params.items()}
        names = ["a", "s0", "s0_zp", "b", "s1", "s1_zp", "s2", "s2_zp"]
        model = contrib_model(op_type, {"a": a, "b": b}, initializers=params, input_names=names)
        got, expected = run_fusegraph(model, {"a": a, "b": b}), run_ort(model, {"a": a, "b": b})
        if op_type == "QLinearMul":
            assert_close(got, expected)  # exact
        else:
            _within_one_lsb(got, expected, max_fraction=1e-4)


@pytest.mark.parametrize("b_shape", [(4,), (1,), (3, 1)])
def test_qlinear_binary_broadcast_and_default_zero_points(b_shape):
    """Absent zero points are 0. ORT's type inference rejects an absent A or B zero point, so that
    model is checked against ORT running explicit zeros."""
    inputs = {"a": rng.integers(0, 256, (2, 3, 4)).astype(np.uint8), "b": rng.integers(0, 256, b_shape).astype(np.uint8)}
    params = {"sa": np.array(0.02, np.float32), "sb": np.array(0.03, np.float32), "sc": np.array(0.07, np.float32),
              "zero": np.array(0, np.uint8)}
    for op_type in ("QLinearAdd", "QLinearMul"):
        contrib_check(op_type, inputs, initializers=params, input_names=["a", "sa", "zero", "b", "sb", "zero", "sc"])
        absent = contrib_model(op_type, inputs, initializers=params, input_names=["a", "sa", "", "b", "sb", "", "sc"])
        zeros = contrib_model(op_type, inputs, initializers=params,
                              input_names=["a", "sa", "zero", "b", "sb", "zero", "sc", "zero"])
        assert_close(run_fusegraph(absent, inputs), run_ort(zeros, inputs))


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("op_type, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13}),
                                            ("QLinearLeakyRelu", {})])
def test_qlinear_lookup_ops_every_value(op_type, attrs, dtype):
    x = _every_value(dtype)
    for _ in range(3):
        params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 2).items()}
        if op_type == "QLinearSigmoid":  # a sigmoid in (0, 1) wants a small output scale
            params["s1"] = np.array(1 / 256, np.float32)
        contrib_check(op_type, {"x": x}, attrs, initializers=params, input_names=["x", "s0", "s0_zp", "s1", "s1_zp"])


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("channels_last, shape", [(0, (2, 5, 7, 9)), (1, (2, 7, 9, 5)), (0, (3, 4, 10)),
                                                  (1, (1, 2, 3, 4, 6))])
def test_qlinear_global_average_pool(dtype, channels_last, shape):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 2).items()}
    contrib_check("QLinearGlobalAveragePool", {"x": x}, {"channels_last": channels_last}, initializers=params,
                  input_names=["x", "s0", "s0_zp", "s1", "s1_zp"])


@pytest.mark.parametrize("dtype", QTYPES)
def test_qlinear_concat(dtype):
    info = np.iinfo(dtype)
    xs = {f"x{k}": rng.integers(info.min, info.max + 1, (2, n, 3)).astype(dtype) for k, n in enumerate((1, 4, 2))}
    params = {k: np.asarray(v) for k, v in _qparams(dtype, "s", 3).items()}
    params.update(ys=params["s1"], ys_zp=params["s1_zp"])  # x1 is already in the output's scale
    names = ["ys", "ys_zp"] + [n for k in range(3) for n in (f"x{k}", f"s{k}", f"s{k}_zp")]
    contrib_check("QLinearConcat", xs, {"axis": -2}, initializers=params, input_names=names)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_contrib(dtype):
    x = randn(2, 3, 4) * 20
    per_tensor = {"s": np.array(0.25, np.float32), "zp": np.array(3, dtype)}
    contrib_check("QuantizeLinear", {"x": x}, initializers=per_tensor)
    per_axis = {"s": rng.uniform(0.1, 1, 3).astype(np.float32), "zp": rng.integers(0, 9, 3).astype(dtype)}
    contrib_check("QuantizeLinear", {"x": x}, {"axis": 1}, initializers=per_axis)
    q = rng.integers(0, 100, (2, 3, 4)).astype(dtype)
    contrib_check("DequantizeLinear", {"q": q}, initializers=per_tensor)
    contrib_check("DequantizeLinear", {"q": q}, {"axis": 1}, initializers=per_axis)


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
