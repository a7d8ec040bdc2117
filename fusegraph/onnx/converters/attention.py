"""Attention (opset 23+) -> dot, softmax and pointwise ops, the way the ONNX function body spells it.

    q = Q * sqrt(scale), k = [past_key; K] * sqrt(scale)   (GQA: each kv head repeated for its q heads)
    s = softcap(q @ k^T) + bias                            bias: mask, causal/window frontier, padding
    Y = softmax(s) @ [past_value; V]                       rows whose bias is all -inf give 0

The bias is additive (0 = attend, -inf = masked). Positional masks (causal, sliding window) are
constants unless the frontier moves per batch (nonpad_kv_seqlen), so fusion sees the plain
dot -> pointwise -> softmax -> dot chain that attention kernels match.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ..registry import converter
from .gemm import broadcast_to


def _heads(ctx, x: Instruction, n_heads: int | None, what: str) -> Instruction:
    """[B, S, H*D] -> [B, H, S, D]; 4-D inputs are already split into heads."""
    if x.shape.ndim == 4:
        return x
    if x.shape.ndim != 3 or not n_heads or x.shape.lens[2] % n_heads:
        raise ctx.error(f"{what} {x.shape} is not 4-D nor 3-D with a hidden size divisible by "
                        f"its num_heads attribute ({n_heads})")
    b, s, hidden = x.shape.lens
    return ctx.add("transpose", ctx.reshape(x, [b, s, n_heads, hidden // n_heads]), perm=(0, 2, 1, 3))


def _repeat_heads(ctx, x: Instruction, reps: int) -> Instruction:
    """[B, H, S, D] -> [B, H*reps, S, D] with each head repeated `reps` times in place (GQA)."""
    if reps == 1:
        return x
    b, h, s, d = x.shape.lens
    spread = broadcast_to(ctx, ctx.reshape(x, [b, h, 1, s, d]), [b, h, reps, s, d])
    return ctx.reshape(spread, [b, h * reps, s, d])


def _additive(ctx, allowed: Instruction, dtype: DType) -> Instruction:
    """A boolean may-attend tensor as a bias: 0 where allowed, -inf where not."""
    zero, ninf = ctx.literal(np.zeros((), dtype.np)), ctx.literal(np.array(-np.inf, dtype.np))
    return ctx.pointwise("where", allowed, zero, ninf)


def _positional(ctx, sq: int, skv: int, offset, causal: bool, left: int, right: int):
    """May query i attend key j? With d = i + offset - j, causal needs d >= 0 and a sliding window
    needs d <= left and -d <= right (a bound of -1 is no bound). `offset` is an int, or a per-batch
    [B] instruction (external cache); the result is [Sq, Skv] or [B, 1, Sq, Skv] (None: no rule)."""
    rules = [(causal, "greater_equal", 0), (left >= 0, "less_equal", left), (right >= 0, "greater_equal", -right)]
    rules = [(name, bound) for on, name, bound in rules if on]
    if not rules:
        return None
    d = np.arange(sq)[:, None] - np.arange(skv)[None, :]
    if isinstance(offset, int):
        ops = {"greater_equal": np.greater_equal, "less_equal": np.less_equal}
        return ctx.literal(np.logical_and.reduce([ops[n](d + offset, b) for n, b in rules]))
    diff = ctx.pointwise("add", ctx.literal(d.reshape(1, 1, sq, skv)),
                         ctx.reshape(offset, [offset.shape.lens[0], 1, 1, 1]))
    allowed = None
    for name, bound in rules:
        ok = ctx.pointwise(name, diff, ctx.literal(np.array(bound, np.int64)))
        allowed = ok if allowed is None else ctx.add("logical_and", allowed, ok)
    return allowed


def _mask_bias(ctx, mask: Instruction, skv: int, dtype: DType) -> Instruction:
    """attn_mask as an additive bias over all `skv` keys; a shorter mask masks the keys it lacks."""
    short = skv - mask.shape.lens[-1]
    is_bool = mask.shape.dtype == DType.bool
    if short > 0:
        pads = (0,) * (2 * mask.shape.ndim - 1) + (short,)
        mask = ctx.add("pad", mask, pads=pads, value=False if is_bool else -math.inf)
    return _additive(ctx, mask, dtype) if is_bool else ctx.convert(mask, dtype)


def _bias(ctx, node, args, sq: int, skv: int, past: int, dtype: DType) -> Instruction | None:
    mask, nonpad = (args[3] if len(args) > 3 else None), (args[6] if len(args) > 6 else None)
    parts = [] if mask is None else [_mask_bias(ctx, mask, skv, dtype)]
    if nonpad is not None:
        if past:
            raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
        nonpad = ctx.convert(nonpad, DType.int64)
        keys = ctx.literal(np.arange(skv, dtype=np.int64).reshape(1, 1, 1, skv))
        lens = ctx.reshape(nonpad, [nonpad.shape.lens[0], 1, 1, 1])
        parts.append(_additive(ctx, ctx.pointwise("less", keys, lens), dtype))
        # External cache: the frontier of batch b sits nonpad[b] - sq keys in.
        offset = ctx.pointwise("sub", nonpad, ctx.literal(np.array(sq, np.int64)))
    else:
        offset = past
    allowed = _positional(ctx, sq, skv, offset, bool(node.attr("is_causal", 0)),
                          node.attr("left_window_size", -1), node.attr("right_window_size", -1))
    if allowed is not None:
        parts.append(_additive(ctx, allowed, dtype))
    if not parts:
        return None
    bias = parts[0]
    for p in parts[1:]:
        bias = ctx.pointwise("add", bias, p)
    return bias


@converter("Attention", since=23)
def attention(ctx, node, args):
    Q, K, V = args[0], args[1], args[2]
    past_k, past_v = (args[4] if len(args) > 4 else None), (args[5] if len(args) > 5 else None)
    if (past_k is None) != (past_v is None):
        raise ctx.error("past_key and past_value must be given together")
    rank, dtype = Q.shape.ndim, Q.shape.dtype
    q = _heads(ctx, Q, node.attr("q_num_heads", None), "Q")
    k = _heads(ctx, K, node.attr("kv_num_heads", None), "K")
    v = _heads(ctx, V, node.attr("kv_num_heads", None), "V")
    past = 0
    if past_k is not None:
        past = past_k.shape.lens[2]
        k, v = ctx.add("concat", past_k, k, axis=2), ctx.add("concat", past_v, v, axis=2)
    present_k, present_v = k, v
    (b, hq, sq, d), hkv, skv = q.shape.lens, k.shape.lens[1], k.shape.lens[2]
    if hq % hkv:
        raise ctx.error(f"q heads ({hq}) are not a multiple of kv heads ({hkv})")
    k, v = _repeat_heads(ctx, k, hq // hkv), _repeat_heads(ctx, v, hq // hkv)

    # Scale q and k by sqrt(scale) each, as the spec does, to keep q @ k^T in range.
    root = ctx.scalar_like(math.sqrt(node.attr("scale", 1.0 / math.sqrt(d))), q)
    k_t = ctx.add("transpose", ctx.pointwise("mul", k, root), perm=(0, 1, 3, 2))
    raw = ctx.add("dot", ctx.pointwise("mul", q, root), k_t)
    scores = capped = raw
    softcap = node.attr("softcap", 0.0)
    if softcap > 0:  # softcap * tanh(s / softcap), before the bias so -inf stays -inf
        cap = ctx.scalar_like(softcap, raw)
        scores = capped = ctx.pointwise("mul", ctx.add("tanh", ctx.pointwise("div", raw, cap)), cap)
    bias = _bias(ctx, node, args, sq, skv, past, dtype)
    if bias is not None:
        scores = ctx.pointwise("add", scores, bias)

    precision = node.attr("softmax_precision", 0)
    work = DType.from_onnx(precision) if precision else dtype
    probs = ctx.convert(ctx.add("softmax", ctx.convert(scores, work), axis=3), dtype)
    if bias is not None:  # a row with no key to attend (all -inf bias) is 0, not nan
        row_max = ctx.add("reduce_max", bias, axes=(bias.shape.ndim - 1,))
        empty = ctx.add("isinf", row_max, detect_positive=False)
        probs = ctx.pointwise("where", empty, ctx.scalar_like(0, probs), probs)
    y = ctx.add("dot", probs, v)
    if rank == 3:
        y = ctx.reshape(ctx.add("transpose", y, perm=(0, 2, 1, 3)), [b, sq, hq * v.shape.lens[3]])
    mode = node.attr("qk_matmul_output_mode", 0)
    qk_out = {0: raw, 1: capped, 2: scores, 3: probs}.get(mode)
    if qk_out is None:
        raise ctx.error(f"qk_matmul_output_mode {mode} is not 0, 1, 2 or 3")
    return [y, present_k, present_v, qk_out]


# -- FlexAttention (ai.onnx.preview) ---------------------------------------------------------------
@converter("FlexAttention", domain="ai.onnx.preview", since=1)
def flex_attention(ctx, node, args):
    """softmax(score_mod(q @ k^T * scale)) -> prob_mod -> @ v, the modifier graphs inlined in place."""
    q, k, v = args[0], args[1], args[2]
    if any(x.shape.ndim != 4 for x in (q, k, v)):
        raise ctx.error(f"FlexAttention takes rank-4 Q, K, V, got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape.lens[1], k.shape.lens[1]
    if hq % hkv:
        raise ctx.error(f"q heads ({hq}) are not a multiple of kv heads ({hkv})")
    k, v = _repeat_heads(ctx, k, hq // hkv), _repeat_heads(ctx, v, hq // hkv)
    # sqrt(scale) on each of q and k, taken in float32 and cast to the input type (as the spec does)
    root = ctx.scalar_like(np.sqrt(np.float32(node.attr("scale", 1.0 / math.sqrt(q.shape.lens[3])))), q)
    scores = ctx.add("dot", ctx.pointwise("mul", q, root),
                     ctx.add("transpose", ctx.pointwise("mul", k, root), perm=(0, 1, 3, 2)))
    precision = node.attr("softmax_precision", 0)
    work = DType.from_onnx(precision) if precision else (
        DType.float32 if q.shape.dtype.itemsize < 4 else q.shape.dtype)
    scores = ctx.convert(scores, work)
    if node.has("score_mod"):
        scores = ctx.convert(ctx.inline_subgraph(node.attr("score_mod"), [scores])[0], work)
    probs = ctx.add("softmax", scores, axis=3)
    if node.has("prob_mod"):
        probs = ctx.convert(ctx.inline_subgraph(node.attr("prob_mod"), [probs])[0], work)
    return ctx.convert(ctx.add("dot", probs, ctx.convert(v, work)), v.shape.dtype)


# -- LinearAttention --------------------------------------------------------------------------------
_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def _per_step(ctx, x: Instruction, n_heads: int, what: str) -> Instruction:
    """A (B, T, n) or (B, T, n*d) gate as (B, n, T, 1) or (B, n, T, d)."""
    b, t, width = x.shape.lens
    if width % n_heads:
        raise ctx.error(f"{what} {x.shape} does not split into {n_heads} heads")
    return ctx.add("transpose", ctx.reshape(x, [b, t, n_heads, width // n_heads]), perm=(0, 2, 1, 3))


@converter("LinearAttention", since=27)
def linear_attention(ctx, node, args):
    query, key, value = args[0], args[1], args[2]
    past, decay, beta = (args[k] if len(args) > k else None for k in (3, 4, 5))
    rule = node.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise ctx.error(f"update_rule {rule!r} is not one of {sorted(_RULES)}")
    gated, delta = _RULES[rule]
    if gated != (decay is not None) or delta != (beta is not None):
        raise ctx.error(f"update_rule {rule!r} takes {'a' if gated else 'no'} decay and {'a' if delta else 'no'} beta")
    hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
    q, k, v = _heads(ctx, query, hq, "query"), _heads(ctx, key, hkv, "key"), _heads(ctx, value, hkv, "value")
    b, _, t, dk = q.shape.lens
    dv = v.shape.lens[3]
    if past is None:  # no past: a zero state, returned in the query's dtype
        past = ctx.literal(np.zeros((b, hkv, dk, dv), query.shape.dtype.np))
    extras = []
    if gated:  # per-head (B, T, Hkv) or per-key-dim (B, T, Hkv*dk) log decay
        extras.append(_per_step(ctx, decay, hkv, "decay"))
    if delta:  # (B, T, Hkv) or (B, T, 1)
        extras.append(_per_step(ctx, beta, beta.shape.lens[2], "beta"))
    scale = node.attr("scale", 0.0) or 1.0 / math.sqrt(dk)
    out = ctx.add("linear_attention", q, k, v, past, *extras, gated=gated, delta=delta, scale=scale)
    o, state = ctx.tuple_elems(out, 2)
    o = ctx.reshape(ctx.add("transpose", o, perm=(0, 2, 1, 3)), [b, t, hq * dv])
    return [o, state]
