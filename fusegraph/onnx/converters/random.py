"""Random ONNX ops: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial.

Normalized here: the *Like ops take the input's dtype unless `dtype` says otherwise; the others
default to float32 (Multinomial to int32); `seed` stays a float, absent meaning "unseeded".
"""

from __future__ import annotations

from ...ir.dtypes import DType
from ..registry import converter


def _dtype(ctx, node, default: DType) -> DType:
    code = node.attr("dtype", 0)
    if not code:
        return default
    try:
        return DType.from_onnx(code)
    except TypeError as e:
        raise ctx.error(str(e)) from None


def _seed(node) -> float | None:
    return node.attr("seed", None)


def _lens(ctx, node) -> tuple[int, ...]:
    lens = tuple(node.attr("shape"))
    if any(n < 0 for n in lens):
        raise ctx.error(f"shape must be non-negative, got {list(lens)}")
    return lens


@converter("RandomUniform")
def random_uniform(ctx, node, args):
    return ctx.add("random_uniform", dtype=_dtype(ctx, node, DType.float32), seed=_seed(node),
                   low=node.attr("low", 0.0), high=node.attr("high", 1.0), lens=_lens(ctx, node))


@converter("RandomUniformLike")
def random_uniform_like(ctx, node, args):
    return ctx.add("random_uniform", args[0], dtype=_dtype(ctx, node, args[0].shape.dtype), seed=_seed(node),
                   low=node.attr("low", 0.0), high=node.attr("high", 1.0))


@converter("RandomNormal")
def random_normal(ctx, node, args):
    return ctx.add("random_normal", dtype=_dtype(ctx, node, DType.float32), seed=_seed(node),
                   mean=node.attr("mean", 0.0), scale=node.attr("scale", 1.0), lens=_lens(ctx, node))


@converter("RandomNormalLike")
def random_normal_like(ctx, node, args):
    return ctx.add("random_normal", args[0], dtype=_dtype(ctx, node, args[0].shape.dtype), seed=_seed(node),
                   mean=node.attr("mean", 0.0), scale=node.attr("scale", 1.0))


@converter("Bernoulli", since=15)
def bernoulli(ctx, node, args):
    return ctx.add("bernoulli", args[0], dtype=_dtype(ctx, node, args[0].shape.dtype), seed=_seed(node))


@converter("Multinomial", since=7)
def multinomial(ctx, node, args):
    return ctx.add("multinomial", args[0], sample_size=node.attr("sample_size", 1),
                   dtype=_dtype(ctx, node, DType.int32), seed=_seed(node))
