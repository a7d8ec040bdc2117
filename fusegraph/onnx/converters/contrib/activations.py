"""ONNX Runtime's fused activations -> the `gelu` / `gelu_tanh` / `sigmoid` pointwise ops plus adds.

    Gelu(x)            = x/2 * (1 + erf(x / sqrt 2))
    BiasGelu(a, b)     = Gelu(a + b)
    FastGelu(x[, b])   = (x + b)/2 * (1 + tanh(sqrt(2/pi) * ((x + b) + 0.044715 (x + b)^3)))
    QuickGelu(x)       = x * sigmoid(alpha x)
    BiasAdd(x, b, s)   = x + b + s
    BiasSplitGelu(x, b): (x + b) cut in halves l | r on the last axis -> l * Gelu(r)

fp16/bf16 math runs in float32 and rounds once at the end, as ORT's kernels do.
"""

from __future__ import annotations

from ...registry import converter
from ..conv import compute_type

MS = "com.microsoft"


def _in_compute_type(ctx, x, fn):
    """fn(x) evaluated in float32 for half-precision x, the result in x's dtype."""
    ct = compute_type(x)
    return ctx.convert(fn(ctx.convert(x, ct)), x.shape.dtype)


def _biased(ctx, x, bias):
    return x if bias is None else ctx.pointwise("add", x, ctx.convert(bias, x.shape.dtype))


@converter("Gelu", domain=MS)
def gelu(ctx, node, args):
    return _in_compute_type(ctx, args[0], lambda x: ctx.add("gelu", x))


@converter("BiasGelu", domain=MS)
def bias_gelu(ctx, node, args):
    a, b = args
    return _in_compute_type(ctx, a, lambda x: ctx.add("gelu", _biased(ctx, x, b)))


@converter("FastGelu", domain=MS)
def fast_gelu(ctx, node, args):
    x, bias = args[0], args[1] if len(args) > 1 else None
    return _in_compute_type(ctx, x, lambda v: ctx.add("gelu_tanh", _biased(ctx, v, bias)))


@converter("QuickGelu", domain=MS)
def quick_gelu(ctx, node, args):
    alpha = float(node.attr("alpha", 1.702))

    def body(x):
        if alpha == 1.0:
            return ctx.add("silu", x)
        return ctx.add("mul", x, ctx.add("sigmoid", ctx.pointwise("mul", x, ctx.scalar_like(alpha, x))))

    return _in_compute_type(ctx, args[0], body)


@converter("BiasAdd", domain=MS)
def bias_add(ctx, node, args):
    x, bias, skip = args
    return ctx.pointwise("add", _biased(ctx, x, bias), skip)


@converter("BiasSplitGelu", domain=MS)
def bias_split_gelu(ctx, node, args):
    x, bias = args
    if x.shape.is_dynamic or x.shape.ndim < 1 or x.shape.lens[-1] % 2:
        raise ctx.error(f"input {x.shape} needs a static, even last dim to split in halves")
    axis, half = x.shape.ndim - 1, x.shape.lens[-1] // 2

    def body(v):
        v = _biased(ctx, v, bias)
        left, right = (ctx.add("slice", v, axes=(axis,), starts=(s,), ends=(s + half,), steps=(1,))
                       for s in (0, half))
        return ctx.add("mul", left, ctx.add("gelu", right))

    return _in_compute_type(ctx, x, body)
