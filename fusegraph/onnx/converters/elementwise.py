"""Elementwise ONNX ops -> pointwise ops (with explicit broadcasting)."""

from __future__ import annotations

import numpy as np

from ..registry import converter

# ONNX op type -> fusegraph pointwise op, for ops whose attributes map by name (or have none)
_SIMPLE = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
    "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal",
    "Equal": "equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor", "Not": "logical_not",
    "BitwiseAnd": "bitand", "BitwiseOr": "bitor", "BitwiseXor": "bitxor", "BitwiseNot": "bitnot",
    "Where": "where", "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Erf": "erf", "Abs": "abs", "Neg": "neg", "Floor": "floor", "Ceil": "ceil",
    "Round": "round", "Reciprocal": "reciprocal", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan",
    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh", "Softplus": "softplus", "Softsign": "softsign", "Mish": "mish",
    "HardSwish": "hard_swish", "IsNaN": "isnan",
}


def _simple(name):
    def convert(ctx, node, args):
        return ctx.pointwise(name, *args)

    return convert


for _onnx, _fg in _SIMPLE.items():
    converter(_onnx)(_simple(_fg))


# ONNX op type -> (fusegraph op, {onnx attribute: default})
_WITH_ATTRS = {
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "Elu": ("elu", {"alpha": 1.0}),
    "Celu": ("celu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Shrink": ("shrink", {"bias": 0.0, "lambd": 0.5}),
}


def _with_attrs(name, defaults):
    def convert(ctx, node, args):
        return ctx.pointwise(name, *args, **{k: node.attr(k, v) for k, v in defaults.items()})

    return convert


for _onnx, (_fg, _defaults) in _WITH_ATTRS.items():
    converter(_onnx)(_with_attrs(_fg, _defaults))


@converter("Gelu", since=20)
def gelu(ctx, node, args):
    approx = node.attr("approximate", "none")
    return ctx.add("gelu_tanh" if approx == "tanh" else "gelu", args[0])


@converter("PRelu")
def prelu(ctx, node, args):
    x, slope = args
    s, xs = slope.shape, x.shape
    if node.opset < 7 and s.ndim == 1 and xs.ndim > 2 and s.lens[0] == xs.lens[1] != xs.lens[-1]:
        # before opset 7 a 1-D slope is per channel (axis 1), not numpy-broadcast on the last axis
        slope = ctx.reshape(slope, (s.lens[0],) + (1,) * (xs.ndim - 2))
    zero = ctx.scalar_like(0, x)
    xb, sb, zb = ctx.broadcast(x, slope, zero)
    return ctx.add("where", ctx.add("greater_equal", xb, zb), xb, ctx.add("mul", xb, sb))


@converter("Max", "Min", "Sum", "Mean")
def variadic(ctx, node, args):
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[node.op_type]
    acc = args[0]
    for a in args[1:]:
        acc = ctx.pointwise(op, acc, a)
    if node.op_type == "Mean" and len(args) > 1:
        acc = ctx.pointwise("div", acc, ctx.scalar_like(len(args), acc))
    return acc if len(args) > 1 else ctx.add("identity", acc)


@converter("Mod")
def mod(ctx, node, args):
    return ctx.pointwise("fmod" if node.attr("fmod", 0) else "mod", *args)


@converter("BitShift")
def bitshift(ctx, node, args):
    return ctx.pointwise("shl" if node.attr("direction") == "LEFT" else "shr", *args)


@converter("IsInf")
def isinf(ctx, node, args):
    return ctx.add("isinf", args[0], detect_positive=bool(node.attr("detect_positive", 1)),
                   detect_negative=bool(node.attr("detect_negative", 1)))


@converter("Clip")
def clip_v6(ctx, node, args):
    x = args[0]
    lo = ctx.scalar_like(node.attr("min", -3.4028234663852886e38), x)
    hi = ctx.scalar_like(node.attr("max", 3.4028234663852886e38), x)
    return ctx.pointwise("clip", x, lo, hi)


@converter("Clip", since=11)
def clip_v11(ctx, node, args):
    x = args[0]
    info = np.finfo(x.shape.dtype.np) if x.shape.dtype.is_float else np.iinfo(x.shape.dtype.np)
    lo = args[1] if len(args) > 1 and args[1] is not None else ctx.scalar_like(info.min, x)
    hi = args[2] if len(args) > 2 and args[2] is not None else ctx.scalar_like(info.max, x)
    ctx.require_scalar(lo, "min")
    ctx.require_scalar(hi, "max")
    return ctx.pointwise("clip", x, lo, hi)


@converter("Identity")
def identity(ctx, node, args):
    return args[0]
