"""ONNX Runtime's normalizations -> `moments` + pointwise (nn.normalize), gathers for embeddings.

    SkipLayerNormalization(x, skip, gamma[, beta, bias]) -> LayerNorm(x + skip + bias) * gamma + beta,
        mean, inv_std_var, and the sum x + skip + bias itself
    SkipSimplifiedLayerNormalization: the same with RMS normalization (no mean, no beta)
    LayerNormalization / SimplifiedLayerNormalization (default domain, opset 1): ORT's versions from
        before ONNX had them (ai.onnx LayerNormalization is opset 17)
    EmbedLayerNormalization: LayerNorm(word[ids] + position[pos] + segment[seg]) and a mask index

Half-precision inputs are summed and normalized in float32 (the statistics stay float32, ORT's `U`);
results are rounded back once.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ...registry import converter
from ..conv import arg, compute_type
from ..nn import layer_norm, normalize

MS = "com.microsoft"

# ORT registered LayerNormalization in the default domain from opset 1; ai.onnx's opset-17 definition
# is the same op (axis, epsilon, stash_type; Y, Mean, InvStdDev), so the same converter serves both.
converter("LayerNormalization", since=1)(layer_norm)


def _eps(node) -> float:
    return float(node.attr("epsilon", 1e-12))


def _scale_shift(ctx, y, gamma, beta):
    y = ctx.pointwise("mul", y, ctx.convert(gamma, y.shape.dtype))
    return y if beta is None else ctx.pointwise("add", y, ctx.convert(beta, y.shape.dtype))


def _skip_norm(ctx, node, x, skip, gamma, beta, bias, centered: bool):
    """The four outputs of the Skip*LayerNormalization ops; the sum keeps x's dtype."""
    if x.shape.ndim not in (2, 3) or gamma.shape.ndim != 1:
        raise ctx.error(f"input {x.shape} must be 2-D or 3-D and gamma {gamma.shape} 1-D")
    ct = compute_type(x)
    total = ctx.pointwise("add", ctx.convert(x, ct), ctx.convert(skip, ct))  # skip broadcasts: (1,S,H), (S,H)
    if bias is not None:
        total = ctx.pointwise("add", total, ctx.convert(bias, ct))
    y, mean, _, inv_std = normalize(ctx, total, (x.shape.ndim - 1,), _eps(node), centered)
    y = ctx.convert(_scale_shift(ctx, y, gamma, beta), x.shape.dtype)
    if not centered:  # ORT leaves the mean of an RMS norm unwritten; ours is a defined 0
        mean = ctx.broadcast(ctx.scalar_like(0, inv_std), inv_std)[0]
    return [y, mean, inv_std, ctx.convert(total, x.shape.dtype)]


@converter("SkipLayerNormalization", domain=MS)
def skip_layer_norm(ctx, node, args):
    x, skip, gamma = args[:3]
    return _skip_norm(ctx, node, x, skip, gamma, arg(args, 3), arg(args, 4), centered=True)


@converter("SkipSimplifiedLayerNormalization", domain=MS)
def skip_simplified_layer_norm(ctx, node, args):
    x, skip, gamma = args[:3]
    return _skip_norm(ctx, node, x, skip, gamma, None, arg(args, 3), centered=False)


@converter("SimplifiedLayerNormalization", since=1)
def simplified_layer_norm(ctx, node, args):
    """RMS normalization over dims axis..rank-1 -> (Y, inv_std_var), the statistic in stash_type."""
    x, scale = args
    rank = x.shape.ndim
    axis = int(node.attr("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    stash = DType.from_onnx(int(node.attr("stash_type", 1)))
    work = stash if stash.is_float and stash.itemsize >= x.shape.dtype.itemsize else x.shape.dtype
    y, _, _, inv_std = normalize(ctx, ctx.convert(x, work), range(axis % rank, rank),
                                 float(node.attr("epsilon", 1e-5)), centered=False)
    return [ctx.convert(_scale_shift(ctx, y, scale, None), x.shape.dtype), inv_std]


# -- EmbedLayerNormalization ----------------------------------------------------------------------
def _lookup(ctx, table, ids):
    return ctx.add("gather", table, ctx.convert(ids, DType.int64), axis=0)


@converter("EmbedLayerNormalization", domain=MS)
def embed_layer_norm(ctx, node, args):
    """(output, mask_index, embedding_sum). Position ids default to 0..S-1; a (1, S) position_ids
    serves every batch. mask_index[b] counts the 1s of mask row b (0 without a mask), as ORT does."""
    ids, segment_ids, word, position, segment, gamma, beta = (arg(args, k) for k in range(7))
    mask, position_ids = arg(args, 7), arg(args, 8)
    if ids.shape.ndim != 2 or ids.shape.is_dynamic:
        raise ctx.error(f"input_ids {ids.shape} must be a static (batch, sequence) tensor")
    batch, seq = ids.shape.lens
    ct = compute_type(word)
    if position_ids is None:
        position_ids = ctx.literal(np.arange(seq, dtype=np.int64))
    total = ctx.pointwise("add", ctx.convert(_lookup(ctx, word, ids), ct),
                          ctx.convert(_lookup(ctx, position, position_ids), ct))
    if segment_ids is not None and segment is not None:
        total = ctx.pointwise("add", total, ctx.convert(_lookup(ctx, segment, segment_ids), ct))
    y, *_ = normalize(ctx, total, (2,), _eps(node))
    y = ctx.convert(_scale_shift(ctx, y, gamma, beta), word.shape.dtype)
    if mask is None:
        mask_index = ctx.literal(np.zeros(batch, np.int32))
    else:
        ones = ctx.convert(ctx.pointwise("equal", mask, ctx.scalar_like(1, mask)), DType.int32)
        mask_index = ctx.reshape(ctx.add("reduce_sum", ones, axes=(1,)), [batch])
    return [y, mask_index, ctx.convert(total, word.shape.dtype)]
