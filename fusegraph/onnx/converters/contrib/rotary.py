"""ONNX Runtime's RotaryEmbedding -> gathers from the cos/sin caches, slices and pointwise rotation.

For each head, the first `rotary_embedding_dim` (default: twice the caches' width) features are
rotated by the angle of the token's position and the rest pass through. The pairs rotated are
(x[i], x[i + d/2]) (halves), or (x[2i], x[2i + 1]) when `interleaved`:

    (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin),   cos, sin = cos_cache[pos], sin_cache[pos]

Positions are (B, S) ids, or one (1,) offset o meaning o, o+1, ..., o+S-1 for every batch. The input
is (B, S, N*H) or (B, N, S, H); the `scale` attribute has no effect in ORT's kernel, nor here.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ...registry import converter
from ..movement import reshape_static
from .attention import last_axis_slices, static_lens


def _positions(ctx, pos: Instruction, seq: int) -> Instruction:
    """Position ids as (B, S) or (1, S) int64."""
    pos = ctx.convert(pos, DType.int64)
    plens = static_lens(ctx, pos, "position_ids")
    if plens in ((), (1,)):  # an offset into the caches
        steps = ctx.literal(np.arange(seq, dtype=np.int64).reshape(1, seq))
        return ctx.pointwise("add", ctx.reshape(pos, [1, 1]), steps)
    if len(plens) != 2 or plens[1] != seq:
        raise ctx.error(f"position_ids {pos.shape} is neither (1) nor (batch, {seq})")
    return pos


def _rotate(ctx, x: Instruction, cos: Instruction, sin: Instruction, interleaved: bool) -> Instruction:
    """Rotate x (..., d) pairwise by cos, sin (..., d/2) broadcast against it."""
    *lead, d = x.shape.lens
    half = d // 2
    if interleaved:
        pairs = reshape_static(ctx, x, [*lead, half, 2])
        x1, x2 = (ctx.reshape(p, [*lead, half]) for p in last_axis_slices(ctx, pairs, (1, 1)))
    else:
        x1, x2 = last_axis_slices(ctx, x, (half, half))

    def mul(a, b):
        return ctx.pointwise("mul", a, b)

    o1 = ctx.pointwise("sub", mul(x1, cos), mul(x2, sin))
    o2 = ctx.pointwise("add", mul(x2, cos), mul(x1, sin))
    if interleaved:
        both = ctx.add("concat", *(ctx.reshape(o, [*lead, half, 1]) for o in (o1, o2)), axis=len(lead) + 1)
        return ctx.reshape(both, [*lead, d])
    return ctx.add("concat", o1, o2, axis=len(lead))


@converter("RotaryEmbedding", domain="com.microsoft")
def rotary_embedding(ctx, node, args):
    x, pos, cos_cache, sin_cache = args
    if node.attr("is_packed_batching", 0):
        raise ctx.error("is_packed_batching is not supported")
    lens = static_lens(ctx, x, "input")
    half = static_lens(ctx, cos_cache, "cos_cache")[-1]
    rot = int(node.attr("rotary_embedding_dim", 0)) or 2 * half
    if rot != 2 * half:
        raise ctx.error(f"rotary_embedding_dim {rot} is not twice the cache width {half}")
    if len(lens) == 4:  # (B, N, S, H) -> (B, S, N, H)
        b, n, seq, head = lens
        x4 = ctx.add("transpose", x, perm=(0, 2, 1, 3))
    elif len(lens) == 3:
        b, seq, hidden = lens
        n = int(node.attr("num_heads", 0)) or hidden // rot
        if hidden % n:
            raise ctx.error(f"hidden size {hidden} does not split into {n} heads")
        head = hidden // n
        x4 = ctx.reshape(x, [b, seq, n, head])
    else:
        raise ctx.error(f"input {x.shape} is neither (B, S, N*H) nor (B, N, S, H)")
    if rot > head:
        raise ctx.error(f"rotary dim {rot} exceeds the head size {head}")
    ids = _positions(ctx, pos, seq)
    cos, sin = (ctx.reshape(ctx.add("gather", ctx.convert(c, x.shape.dtype), ids, axis=0),
                            [ids.shape.lens[0], seq, 1, half]) for c in (cos_cache, sin_cache))
    x_rot, rest = (x4, None) if rot == head else last_axis_slices(ctx, x4, (rot, head - rot))
    y = _rotate(ctx, x_rot, cos, sin, bool(node.attr("interleaved", 0)))
    if rest is not None:  # features past the rotary dim pass through
        y = ctx.add("concat", y, rest, axis=3)
    if len(lens) == 4:
        return ctx.add("transpose", y, perm=(0, 2, 1, 3))
    return reshape_static(ctx, y, lens)
