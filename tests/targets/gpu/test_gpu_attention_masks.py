"""Masked attention on the gpu target (issue 23: DistilBERT, GPT-2): the scores forms patterns_attention.py
reads, by rule on scalar bodies, then small ONNX models end to end against ONNX Runtime (float32 and
fp16, interpreted without a GPU), with padded batch rows and query rows whose every key is masked
(the model gives them uniform weights: lower_attention.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.ops.scalar import parse_expr
from fusegraph.targets.gpu.patterns_attention import _form
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(23)
F32_MIN = float(np.finfo(np.float32).min)
B, H, S, D = 2, 2, 8, 16


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- the scores form, rule by rule (x0: the scores, x1: a mask or condition, x2: a constant) -------------
@pytest.mark.parametrize("body, expected", [
    ("mul(x0, x2)", dict(scale=-1e9)),
    ("add(mul(x0, x2), x1)", dict(scale=-1e9, mask=1)),
    ("convert_float32(add(convert_float16(mul(x0, x2)), convert_float32(x1)))", dict(scale=-1e9, mask=1)),
    ("where(x1, x0, x2)", dict(cond=1, fill=-1e9)),
    ("where(x1, x2, x0)", dict(cond=1, keep_if=False, fill=-1e9)),
    ("where(not(x1), x2, x0)", dict(cond=1, fill=-1e9)),
    ("div(where(x1, x0, x2), x3)", dict(scale=0.5, cond=1, fill=-5e8)),
    ("add(where(x1, x0, x2), x4)", dict(mask=4, cond=1, fill=-1e9, fill_first=True)),
    ("where(x1, add(x0, x4), x2)", dict(mask=4, cond=1, fill=-1e9)),
    ("mul(add(x0, x1), x2)", None),        # a mask before the scale would be scaled too
    ("where(x1, x0, x4)", None),           # the fill is data
    ("where(x1, where(x1, x0, x2), x2)", None),
    ("add(add(x0, x1), x4)", None),        # two masks
    ("add(x0, x2)", None),                 # a constant is no mask
    ("sub(x0, x1)", None),
])
def test_scores_form_rules(body, expected):
    got = _form(parse_expr(body), 0, {2: -1e9, 3: 2.0})
    if expected is None:
        assert got is None
    else:
        assert got is not None and {k: v for k, v in vars(got).items() if v != vars(type(got)())[k]} == expected


# -- end to end -------------------------------------------------------------------------------------------
def _attention(scores_nodes, inputs, inits, score_out):
    """q [B, H, S, D] @ k^T -> scores (named "s") -> `scores_nodes` -> `score_out` -> softmax -> @ v."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), *scores_nodes,
             helper.make_node("Softmax", [score_out], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    x = {"q": randn(B, H, S, D), "k": randn(B, H, S, D), "v": randn(B, H, S, D), **inputs}
    return make_model(nodes, x, ["y"], initializers=inits), x


def _hf_eager_model():
    """transformers' eager attention: scores * d^-0.5 + where(padding mask expanded, 0, finfo(float32).min);
    batch row 1 padded (its last 3 keys), batch row 0 all padding (every query row fully masked)."""
    am = np.ones((B, S), np.int64)
    am[0] = 0
    am[1, -3:] = 0
    nodes = [helper.make_node("Cast", ["am"], ["amb"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["amb", "ax"], ["am4"]),
             helper.make_node("Expand", ["am4", "shape"], ["keep"]),
             helper.make_node("Where", ["keep", "zero", "lo"], ["mask"]),
             helper.make_node("Mul", ["s", "c"], ["ss"]), helper.make_node("Add", ["ss", "mask"], ["sm"])]
    inits = {"ax": np.array([1, 2], np.int64), "shape": np.array([B, 1, S, S], np.int64),
             "zero": np.array(0, np.float32), "lo": np.array(F32_MIN, np.float32),
             "c": np.array(D ** -0.5, np.float32)}
    return _attention(nodes, {"am": am}, inits, "sm")


def _where_model(fill_input: bool = False, flipped: bool = False):
    """where(keep, scores, fill) * c (masked_fill's export), keep a causal boolean mask input with
    query row 2 of batch 1 fully masked; the fill a constant -1e9, or data."""
    keep = np.broadcast_to(np.tril(np.ones((S, S), bool)), (B, 1, S, S)).copy()
    keep[1, 0, 2] = False
    args = ["drop", "f", "s"] if flipped else ["keep", "s", "f"]
    nodes = [helper.make_node("Not", ["keep"], ["drop"]), helper.make_node("Where", args, ["w"]),
             helper.make_node("Mul", ["w", "c"], ["ws"])]
    fill = np.array([-1e9], np.float32)
    inputs = {"keep": keep, **({"f": fill} if fill_input else {})}
    inits = {"c": np.array(0.3, np.float32), **({} if fill_input else {"f": fill})}
    return _attention(nodes, inputs, inits, "ws")


def _run(gpu_target, model, x, fp16):
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    kinds = [s.kind for s in p.executable.plan.steps]
    return kinds, p.run(x)


@pytest.mark.parametrize("build", [_hf_eager_model, _where_model, lambda: _where_model(flipped=True)],
                         ids=["additive", "where", "where_flipped"])
@pytest.mark.parametrize("fp16", [False, True])
def test_masked_attention_is_sdpa_and_matches_onnxruntime(gpu_target, build, fp16):
    model, x = build()
    kinds, got = _run(gpu_target, model, x, fp16)
    assert kinds.count("attention") == 1 and "dot" not in kinds, kinds
    want = run_ort(model, x)
    tol = 2e-2 if fp16 else 1e-4
    assert_close(got, want, rtol=tol, atol=tol)


def test_fully_masked_rows_average_v(gpu_target):
    """The float32 model's weights on a row of finfo.min keys are uniform; so are fp16's (-65504 keeps
    the scores apart in SDPA's float32 sums: the lowering zeroes those rows' queries)."""
    model, x = _hf_eager_model()
    _, (got,) = _run(gpu_target, model, x, fp16=True)
    np.testing.assert_allclose(got[0], np.broadcast_to(x["v"][0].mean(-2, keepdims=True), (H, S, D)), atol=2e-2)


def test_a_fill_that_is_data_is_no_mask(gpu_target):
    model, x = _where_model(fill_input=True)
    kinds, got = _run(gpu_target, model, x, fp16=False)
    assert "attention" not in kinds and kinds.count("dot") == 2
    assert_close(got, run_ort(model, x), rtol=1e-4, atol=1e-4)


def test_a_mask_that_grows_the_scores_is_no_mask(gpu_target):
    """scores [1, H, S, S] + mask [B, 1, S, S]: the sum has a batch the scores lack (SDPA's mask
    broadcasts to the scores, never the scores to it)."""
    nodes = [helper.make_node("Add", ["s", "m"], ["sm"])]
    model, x = _attention(nodes, {"m": randn(B, 1, S, S)}, {}, "sm")
    x["q"], x["k"] = x["q"][:1], x["k"][:1]
    model = make_model(list(model.graph.node), x, ["y"])
    kinds, got = _run(gpu_target, model, x, fp16=False)
    assert "attention" not in kinds
    assert_close(got, run_ort(model, x), rtol=1e-4, atol=1e-4)


def test_a_float32_mask_is_clamped_into_float16_not_made_infinite():
    torch = pytest.importorskip("torch")
    from fusegraph.targets.gpu.lower_attention import sdpa_mask

    mask = torch.tensor([[F32_MIN, F32_MIN], [0.0, 1e6], [F32_MIN, -3.0]])
    bias, dead = sdpa_mask(torch.float16, {"has_mask": True}, mask)
    assert bias.dtype == torch.float16 and bias.tolist() == [[-65504.0, -65504.0], [0.0, 65504.0], [-65504.0, -3.0]]
    assert dead.tolist() == [[True], [False], [False]]  # only the row whose every key is masked
    bias, dead = sdpa_mask(torch.float32, {"has_mask": True}, mask)
    # float32: finfo.min raised to -1e30 (times log2(e) it was -inf in the memory-efficient kernel)
    floor = float(torch.tensor(-1e30))  # -1e30 in float32
    assert bias.tolist() == [[floor, floor], [0.0, 1e6], [floor, -3.0]] and dead is None


def test_layers_reading_one_mask_compute_it_once_a_run(gpu_target, monkeypatch):
    """Two attention layers on one padding mask (as a transformer's): one sdpa_mask a run (the first
    layer's, taken by the second), and each run's answer from that run's mask, not a stale one."""
    from fusegraph.targets.gpu import lower_attention

    model, x = _hf_eager_model()
    second = [helper.make_node("MatMul", ["y", "kt"], ["s2"]), helper.make_node("Mul", ["s2", "c"], ["ss2"]),
              helper.make_node("Add", ["ss2", "mask"], ["sm2"]), helper.make_node("Softmax", ["sm2"], ["p2"], axis=-1),
              helper.make_node("MatMul", ["p2", "v"], ["y2"])]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    model = make_model([*model.graph.node, *second], x, ["y2"], initializers=inits)
    import torch

    masks, attentions = [], []  # the calls made while steps run in Python (a CUDA graph replays none)
    sdpa_mask, sdpa = lower_attention.sdpa_mask, torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(lower_attention, "sdpa_mask", lambda *a: masks.append(1) or sdpa_mask(*a))
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: attentions.append(1) or sdpa(*a, **k))
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert [s.kind for s in p.executable.plan.steps].count("attention") == 2
    masks.clear()
    attentions.clear()  # (compiling tried each step's chosen kernel once more: lower_attention.TunedAttention)
    for am in (x["am"], np.ones_like(x["am"]), 1 - x["am"]):
        feeds = {**x, "am": am}
        assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-4)
    if p.executable.graph is not None:  # CUDA: the runs replay the graph, no Python step runs
        assert not masks and not attentions
    else:
        assert attentions and len(attentions) == 2 * len(masks)


def test_zeroed_query_rows_keep_the_querys_memory_order():
    """zero_rows is where(dead, 0, q) in q's own dim order: with q a [B, L, H, D] projection's view,
    its result transposed back to [B, L, H, D] is contiguous, so the attention's output (cuDNN follows
    its query's order) reaches the next projection without a copy."""
    torch = pytest.importorskip("torch")
    from fusegraph.targets.gpu.lower_attention import zero_rows

    packed = torch.randn(B, S, 3 * H * D)
    q = packed[..., :H * D].reshape(B, S, H, D).transpose(1, 2)
    for dead in (torch.tensor([True, False]).reshape(B, 1, 1, 1), torch.rand(B, 1, S, 1) > 0.5,
                 torch.rand(S, 1) > 0.5):  # per batch row, per query row, a mask of fewer dims
        got = zero_rows(q, dead, torch.zeros(()))
        assert torch.equal(got, torch.where(dead, 0.0, q))
        assert got.transpose(1, 2).is_contiguous()


def _constant_mask_model(dead_row: bool):
    """scores + a constant [1, H, S, S] mask (Swin's relative position bias), every key of one
    query row at finfo(float32).min when `dead_row`."""
    mask = randn(1, H, S, S)
    if dead_row:
        mask[0, 1, 3] = F32_MIN
    return _attention([helper.make_node("Add", ["s", "m"], ["sm"])], {}, {"m": mask}, "sm")


@pytest.mark.parametrize("dead_row", [False, True])
@pytest.mark.parametrize("fp16", [False, True])
def test_a_constant_mask_is_made_once_and_q_zeroed_only_for_its_dead_rows(gpu_target, monkeypatch, dead_row, fp16):
    from fusegraph.targets.gpu import lower_attention

    made, zeroed = [], []
    sdpa_mask, zero_rows = lower_attention.sdpa_mask, lower_attention.zero_rows
    monkeypatch.setattr(lower_attention, "sdpa_mask", lambda *a: made.append(1) or sdpa_mask(*a))
    monkeypatch.setattr(lower_attention, "zero_rows", lambda *a: zeroed.append(1) or zero_rows(*a))
    model, x = _constant_mask_model(dead_row)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    assert [s.kind for s in p.executable.plan.steps].count("attention") == 1
    want = run_ort(model, x)
    tol = 2e-2 if fp16 else 1e-4
    for _ in range(3):
        assert_close(p.run(x), want, rtol=tol, atol=tol)
    assert len(made) == 1  # not once a run
    # float16 zeroes the rows whose keys are all at the lowest (float32 keeps them apart: no zeroing),
    # before SDPA; the small kernel, when the tuner timed it fastest, zeroes them in its registers (and
    # SDPA's zeroing may then have run only while the tuner timed it)
    chosen = [c["name"] for key, c in p.executable.tuning.items() if key.startswith("attention")]
    if chosen != ["small"]:
        assert bool(zeroed) == (dead_row and fp16)
    elif not (dead_row and fp16):
        assert not zeroed
