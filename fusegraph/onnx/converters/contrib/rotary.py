"""ONNX Runtime's RotaryEmbedding -> ai.onnx RotaryEmbedding's decomposition (misc.py).

The math is ai.onnx's (opset 23): per head, the first `rotary_embedding_dim` features rotate by the
angle of the token's position, in halves or `interleaved` pairs, and the rest pass through. ORT's
op differs only in its inputs, which this converter normalizes before delegating:

    inputs (input, position_ids, cos_cache, sin_cache) -- position_ids comes second and is required;
        a (1,) position_ids is an offset o meaning positions o, o+1, ..., o+S-1 for every batch
    a 3-D (B, S, N*H) input without num_heads has heads of twice the caches' width
    the `scale` attribute has no effect in ORT's kernel, nor here
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ...registry import converter
from ..misc import rotary_embedding as onnx_rotary_embedding
from ..movement import reshape_static
from .attention import static_lens


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


@converter("RotaryEmbedding", domain="com.microsoft")
def rotary_embedding(ctx, node, args):
    x, pos, cos_cache, sin_cache = args
    if node.attr("is_packed_batching", 0):
        raise ctx.error("is_packed_batching is not supported")
    lens = static_lens(ctx, x, "input")
    half = static_lens(ctx, cos_cache, "cos_cache")[-1]
    cos_cache, sin_cache = (ctx.convert(c, x.shape.dtype) for c in (cos_cache, sin_cache))
    if len(lens) == 4:  # (B, N, S, H): ai.onnx's layout
        return onnx_rotary_embedding(ctx, node, [x, cos_cache, sin_cache, _positions(ctx, pos, lens[2])])
    if len(lens) != 3:
        raise ctx.error(f"input {x.shape} is neither (B, S, N*H) nor (B, N, S, H)")
    b, seq, hidden = lens
    heads = int(node.attr("num_heads", 0)) or hidden // (2 * half)
    if not heads or hidden % heads:
        raise ctx.error(f"hidden size {hidden} does not split into heads (num_heads {heads})")
    x4 = ctx.add("transpose", ctx.reshape(x, [b, seq, heads, hidden // heads]), perm=(0, 2, 1, 3))
    y4 = onnx_rotary_embedding(ctx, node, [x4, cos_cache, sin_cache, _positions(ctx, pos, seq)])
    return reshape_static(ctx, ctx.add("transpose", y4, perm=(0, 2, 1, 3)), lens)
