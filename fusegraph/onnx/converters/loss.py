"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, built from gathers, pointwise ops and
reductions (the arithmetic of their ONNX function bodies).

input [N, C, d1..dk] holds log-probabilities, target [N, d1..dk] class indices:
    loss = -input[n, target, d...] * weight[target], 0 where target == ignore_index
    none: loss; sum: sum(loss); mean: sum(loss) / sum(applied weights), which is mean(loss) when
    there are neither weights nor an ignore_index.
"""

from __future__ import annotations

from ...ir.dtypes import DType
from ..registry import converter
from .reduce import drop_axes

_REDUCTIONS = ("none", "sum", "mean")


def nll_loss(ctx, node, log_prob, target, weight):
    reduction = node.attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise ctx.error(f"unknown reduction {reduction!r} (expected one of {', '.join(_REDUCTIONS)})")
    if log_prob.shape.ndim < 2 or target.shape.ndim != log_prob.shape.ndim - 1:
        raise ctx.error(f"input must be [N, C, d...] and target [N, d...], got {log_prob.shape} and {target.shape}")
    if target.shape.dtype not in (DType.int32, DType.int64):
        raise ctx.error(f"target must be int32 or int64, got {target.shape.dtype}")
    keep = None  # where the target is not ignore_index
    if node.has("ignore_index"):
        ignored = ctx.scalar_like(node.attr("ignore_index"), target)
        keep = ctx.pointwise("not_equal", target, ignored)
        # ignored targets may lie outside [0, C): gather class 0 there, masked out below
        target = ctx.pointwise("where", keep, target, ctx.scalar_like(0, target))
    picked = ctx.add("gather_elements", log_prob, ctx.add("unsqueeze", target, axes=(1,)), axis=1)
    loss = ctx.add("neg", drop_axes(ctx, picked, (1,)))
    applied = None  # the weight each sample carries, for the weighted mean
    if weight is not None:
        applied = ctx.add("gather", weight, target, axis=0)
        loss = ctx.add("mul", loss, applied)
    if keep is not None:
        zero = ctx.scalar_like(0, loss)
        loss = ctx.pointwise("where", keep, loss, zero)  # a select, so an ignored -inf gives 0 too
        applied = ctx.convert(keep, loss.shape.dtype) if applied is None else ctx.pointwise("where", keep, applied, zero)
    if reduction == "none":
        return loss
    every = tuple(range(loss.shape.ndim))
    total = drop_axes(ctx, ctx.add("reduce_sum", loss, axes=every), every)
    if reduction == "sum":
        return total
    if applied is None:
        return drop_axes(ctx, ctx.add("reduce_mean", loss, axes=every), every)
    return ctx.add("div", total, drop_axes(ctx, ctx.add("reduce_sum", applied, axes=every), every))


@converter("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx, node, args):
    x, target, weight = (list(args) + [None])[:3]
    return nll_loss(ctx, node, x, target, weight)


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx, node, args):
    scores, labels, weights = (list(args) + [None])[:3]
    if scores.shape.ndim < 2:
        raise ctx.error(f"scores must be [N, C, d...], got {scores.shape}")
    log_prob = ctx.add("log_softmax", scores, axis=1)
    return [nll_loss(ctx, node, log_prob, labels, weights), log_prob]
