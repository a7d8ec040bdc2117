"""ONNX Runtime's Attention and MultiHeadAttention -> dot, softmax and pointwise ops.

    Attention(x, W[, b, mask_index, past, attention_bias]):  q | k | v = x @ W + b, then as below;
        present = stack(past_k; k, past_v; v) of shape (2, B, N, P+S, H)
    MultiHeadAttention(q, k, v[, bias, key_padding_mask, attention_bias, past_key, past_value]):
        separate, packed (B, S, N, 3, H) QKV or packed (B, L, N, 2, H) KV, or per-head (B, N, L, H)
        keys and values (which take no bias); -> (Y, present_key, present_value, qk)

    s = scale * q @ k^T + attention_bias + mask  (mask: 0 where a key may be seen, mask_filter_value
                                                   (-10000) where not)
    s = lowest float where unidirectional hides the key;  Y = softmax(s) @ v

The mask is ORT's additive one, not -inf: a query that may see no key averages all of them, as in
ORT. Key masks (`mask_index`, `key_padding_mask`) come as lengths (B), end/start positions (2B), or
1/0 masks (B, T) and (B, S, T), a key hidden where the mask is <= 0. Unidirectional hides key j from
query i when j > past + i -- except on the last query, which ORT's mask loop never reaches (it makes
a difference only when the keys outnumber the queries).
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ...registry import converter
from ..conv import arg
from ..gemm import matmul
from ..movement import reshape_static

MS = "com.microsoft"


def required(ctx, args, names: dict[int, str]) -> None:
    """A ParseError for the first of these required inputs (index: name) the node leaves out."""
    for k, name in names.items():
        if arg(args, k) is None:
            raise ctx.error(f"input {k} ({name}) is required")


def static_lens(ctx, x: Instruction, what: str) -> tuple[int, ...]:
    if x.shape.is_dynamic:
        raise ctx.error(f"{what} {x.shape} must have static dims")
    return x.shape.lens


def split_heads(ctx, x: Instruction, n_heads: int, what: str) -> Instruction:
    """(B, S, N*H) -> (B, N, S, H)."""
    lens = static_lens(ctx, x, what)
    if len(lens) != 3 or lens[2] % n_heads:
        raise ctx.error(f"{what} {x.shape} is not (batch, sequence, hidden) with hidden divisible by {n_heads} heads")
    b, s, hidden = lens
    return ctx.add("transpose", ctx.reshape(x, [b, s, n_heads, hidden // n_heads]), perm=(0, 2, 1, 3))


def last_axis_slices(ctx, x: Instruction, sizes) -> list[Instruction]:
    """x cut along its last axis into consecutive pieces of `sizes`."""
    axis, out, start = x.shape.ndim - 1, [], 0
    for n in sizes:
        out.append(ctx.add("slice", x, axes=(axis,), starts=(start,), ends=(start + n,), steps=(1,)))
        start += n
    return out


# -- masks ------------------------------------------------------------------------------------------
def _key_mask(ctx, mask: Instruction, batch: int, sq: int, total: int) -> Instruction:
    """A may-attend boolean broadcastable to (B, 1, S, T) from any of ORT's key-mask forms."""
    lens = static_lens(ctx, mask, "mask")
    keys = ctx.literal(np.arange(total, dtype=np.int32).reshape(1, total))
    mask = ctx.convert(mask, DType.int32)
    if lens == (batch,):  # right padding: valid lengths
        ok = ctx.pointwise("less", keys, ctx.reshape(mask, [batch, 1]))
    elif lens == (2 * batch,):  # left padding too: exclusive ends, then inclusive starts
        end, start = (ctx.reshape(p, [batch, 1]) for p in last_axis_slices(ctx, mask, (batch, batch)))
        ok = ctx.add("logical_and", *ctx.broadcast(ctx.pointwise("less", keys, end),
                                                   ctx.pointwise("greater_equal", keys, start)))
    elif lens in ((batch, total), (batch, sq, total)):
        ok = ctx.pointwise("greater", mask, ctx.scalar_like(0, mask))
    else:
        raise ctx.error(f"mask {mask.shape} is none of (B), (2B), (B, T) or (B, S, T) for B={batch}, "
                        f"S={sq}, T={total} (ONNX Runtime's CPU kernel has no other forms either)")
    rank = ok.shape.ndim  # (B, T) -> (B, 1, 1, T); (B, S, T) -> (B, 1, S, T)
    return ctx.reshape(ok, [batch, 1] + [1] * (4 - rank - 1) + list(ok.shape.lens[1:]))


def _causal(sq: int, total: int, past: int) -> np.ndarray:
    ok = np.arange(total)[None, :] <= past + np.arange(sq)[:, None]
    ok[-1, :] = True  # ORT's loop stops before the last query
    return ok


def attend(ctx, node, q, k, v, *, mask=None, attention_bias=None, past: int = 0):
    """Multi-head attention over q (B, N, S, H), k (B, N, T, H), v (B, N, T, Hv) -> (Y (B, S, N*Hv),
    the softmax input (B, N, S, T))."""
    batch, n_heads, sq, head = q.shape.lens
    total, hv = k.shape.lens[2], v.shape.lens[3]
    dtype = q.shape.dtype
    scale = float(node.attr("scale", 0.0)) or 1.0 / np.sqrt(head)
    s = ctx.pointwise("mul", ctx.add("dot", q, ctx.add("transpose", k, perm=(0, 1, 3, 2))), ctx.scalar_like(scale, q))
    if attention_bias is not None:
        s = ctx.pointwise("add", s, ctx.convert(attention_bias, dtype))
    if mask is not None:
        fill = ctx.scalar_like(float(node.attr("mask_filter_value", -10000.0)), s)
        s = ctx.pointwise("add", s, ctx.pointwise("where", _key_mask(ctx, mask, batch, sq, total),
                                                  ctx.scalar_like(0, s), fill))
    if node.attr("unidirectional", 0):
        lowest = ctx.scalar_like(np.finfo(dtype.np).min, s)
        s = ctx.pointwise("where", ctx.literal(_causal(sq, total, past)), s, lowest)
    y = ctx.add("dot", ctx.add("softmax", s, axis=3), v)
    y = reshape_static(ctx, ctx.add("transpose", y, perm=(0, 2, 1, 3)), [batch, sq, n_heads * hv])
    return y, s


def _num_heads(ctx, node) -> int:
    n = int(node.attr("num_heads"))
    if n <= 0:
        raise ctx.error(f"num_heads {n} must be positive")
    return n


def _reject(ctx, node, args, attrs=(), inputs=()):
    """A typed error for the set attributes in `attrs` and present inputs (index, name) in `inputs`
    that this converter does not implement."""
    for a in attrs:
        if node.attr(a, 0):
            raise ctx.error(f"attribute {a} is not supported")
    for k, what in inputs:
        if arg(args, k) is not None:
            raise ctx.error(f"input {what} is not supported")


# -- Attention --------------------------------------------------------------------------------------
@converter("Attention", domain=MS)
def attention(ctx, node, args):
    required(ctx, args, {0: "input", 1: "weights"})
    x, weights, bias, mask, past, attention_bias = (arg(args, k) for k in range(6))
    _reject(ctx, node, args, ("do_rotary", "past_present_share_buffer"), [(6, "past_sequence_length")])
    n = _num_heads(ctx, node)
    width = static_lens(ctx, weights, "weights")[-1]
    sizes = node.attr("qkv_hidden_sizes", None) or [width // 3] * 3
    if len(sizes) != 3 or sum(sizes) != width or any(h <= 0 or h % n for h in sizes):
        raise ctx.error(f"qkv_hidden_sizes {list(sizes)} do not split weights {weights.shape} into "
                        f"q, k, v widths divisible by {n} heads")
    qkv = matmul(ctx, x, weights)
    if bias is not None:
        qkv = ctx.pointwise("add", qkv, bias)
    q, k, v = (split_heads(ctx, t, n, "projection") for t in last_axis_slices(ctx, qkv, sizes))
    past_len = 0
    if past is not None:
        plens = static_lens(ctx, past, "past")
        if sizes[1] != sizes[2] or len(plens) != 5 or plens[0] != 2:
            raise ctx.error(f"past {past.shape} needs k and v of equal widths and shape (2, B, N, P, H)")
        past_len = plens[3]
        past_k, past_v = (ctx.reshape(t, plens[1:]) for t in (
            ctx.add("slice", past, axes=(0,), starts=(i,), ends=(i + 1,), steps=(1,)) for i in (0, 1)))
        k, v = ctx.add("concat", past_k, k, axis=2), ctx.add("concat", past_v, v, axis=2)
    y, _ = attend(ctx, node, q, k, v, mask=mask, attention_bias=attention_bias, past=past_len)
    if sizes[1] != sizes[2]:  # no present: k and v cannot stack
        return [y]
    stacked = [ctx.reshape(t, [1, *t.shape.lens]) for t in (k, v)]
    return [y, ctx.add("concat", *stacked, axis=0)]


# -- MultiHeadAttention -----------------------------------------------------------------------------
def _packed(ctx, x: Instruction, index: int, bias: Instruction | None) -> Instruction:
    """Part `index` of a packed (B, L, N, parts, H) tensor as (B, N, L, H), plus its bias (N*H)."""
    b, seq, n, _, head = x.shape.lens
    part = ctx.reshape(ctx.add("slice", x, axes=(3,), starts=(index,), ends=(index + 1,), steps=(1,)),
                       [b, seq, n, head])
    if bias is not None:
        part = ctx.pointwise("add", part, ctx.reshape(bias, [n, head]))
    return ctx.add("transpose", part, perm=(0, 2, 1, 3))


def _projected(ctx, x: Instruction, bias, n: int, what: str) -> Instruction:
    return split_heads(ctx, x if bias is None else ctx.pointwise("add", x, bias), n, what)


@converter("MultiHeadAttention", domain=MS)
def multi_head_attention(ctx, node, args):
    required(ctx, args, {0: "query"})
    query, key, value, bias, mask, attention_bias, past_k, past_v = (arg(args, i) for i in range(8))
    _reject(ctx, node, args, inputs=[(8, "past_sequence_length"), (9, "cache_indirection")])
    n = _num_heads(ctx, node)
    qlens = static_lens(ctx, query, "query")
    if len(qlens) == 5:  # packed QKV: (B, S, N, 3, H)
        if qlens[2:4] != (n, 3):
            raise ctx.error(f"packed query {query.shape} is not (B, S, {n}, 3, H)")
        d = n * qlens[4]
        biases = [None] * 3 if bias is None else last_axis_slices(ctx, bias, (d, d, d))
        q, k, v = (_packed(ctx, query, i, biases[i]) for i in range(3))
    else:
        d = qlens[-1]
        krank = 0 if key is None else len(static_lens(ctx, key, "key"))
        if krank not in (3, 4, 5) or (krank != 5 and value is None):
            raise ctx.error("needs key and value (3-D, or 4-D per head), a packed (B, L, N, 2, H) key, "
                            "or a packed (B, S, N, 3, H) query")
        v_width = static_lens(ctx, value, "value")[-1] if krank == 3 else d
        biases = [None] * 3 if bias is None else last_axis_slices(ctx, bias, (d, d, v_width))
        q = _projected(ctx, query, biases[0], n, "query")
        if krank == 5:  # packed KV: (B, L, N, 2, H)
            k, v = (_packed(ctx, key, i, biases[1 + i]) for i in range(2))
        elif krank == 4:  # keys and values already per head: (B, N, L, H); ORT adds no bias to them
            k, v = key, value
        else:
            k, v = _projected(ctx, key, biases[1], n, "key"), _projected(ctx, value, biases[2], n, "value")
    past_len = 0
    if (past_k is None) != (past_v is None):
        raise ctx.error("past_key and past_value must be given together")
    if past_k is not None:
        past_len = static_lens(ctx, past_k, "past_key")[2]
        k, v = ctx.add("concat", past_k, k, axis=2), ctx.add("concat", past_v, v, axis=2)
    y, scores = attend(ctx, node, q, k, v, mask=mask, attention_bias=attention_bias, past=past_len)
    return [y, k, v, scores]
