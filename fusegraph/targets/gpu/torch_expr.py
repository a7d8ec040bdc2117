"""Scalar expressions evaluated with torch tensor ops on the device: the pointwise path for dtypes
generated Triton code does not take (float8 conversions, complex). The same trees as the reference,
one torch function per scalar function."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.dtypes import DType
from ...ops.scalar import Call, Expr, Var, converts_to, fold
from .device import has_torch_dtype, torch, torch_dtype


def _div(t, a, b):
    if not a.dtype.is_floating_point and not b.dtype.is_floating_point:
        return t.div(a, b, rounding_mode="trunc")
    return a / b


def _mod(t, a, b):
    return t.remainder(a, b)


def _sign(t, a):
    return t.where(a != a, a, t.sign(a))


def _round(t, a):
    return t.round(a) if a.dtype.is_floating_point else a


_FUNCS = {
    "add": lambda t, a, b: a + b, "sub": lambda t, a, b: a - b, "mul": lambda t, a, b: a * b, "div": _div,
    "fmod": lambda t, a, b: t.fmod(a, b), "mod": _mod, "pow": lambda t, a, b: t.pow(a, b),
    "max": lambda t, a, b: t.maximum(a, b), "min": lambda t, a, b: t.minimum(a, b),
    "neg": lambda t, a: -a, "abs": lambda t, a: t.abs(a), "sign": _sign,
    "exp": lambda t, a: t.exp(a), "log": lambda t, a: t.log(a), "sqrt": lambda t, a: t.sqrt(a),
    "erf": lambda t, a: t.erf(a), "tanh": lambda t, a: t.tanh(a), "sigmoid": lambda t, a: t.sigmoid(a),
    "sin": lambda t, a: t.sin(a), "cos": lambda t, a: t.cos(a), "tan": lambda t, a: t.tan(a),
    "asin": lambda t, a: t.asin(a), "acos": lambda t, a: t.acos(a), "atan": lambda t, a: t.atan(a),
    "sinh": lambda t, a: t.sinh(a), "cosh": lambda t, a: t.cosh(a), "asinh": lambda t, a: t.asinh(a),
    "acosh": lambda t, a: t.acosh(a), "atanh": lambda t, a: t.atanh(a),
    "floor": lambda t, a: t.floor(a) if a.dtype.is_floating_point else a,
    "ceil": lambda t, a: t.ceil(a) if a.dtype.is_floating_point else a, "round": _round,
    "isnan": lambda t, a: t.isnan(a), "isinf": lambda t, a: t.isinf(a),
    "lt": lambda t, a, b: a < b, "le": lambda t, a, b: a <= b, "gt": lambda t, a, b: a > b,
    "ge": lambda t, a, b: a >= b, "eq": lambda t, a, b: a == b, "ne": lambda t, a, b: a != b,
    "and": lambda t, a, b: t.logical_and(a, b), "or": lambda t, a, b: t.logical_or(a, b),
    "xor": lambda t, a, b: t.logical_xor(a, b), "not": lambda t, a: t.logical_not(a),
    "bitand": lambda t, a, b: a & b, "bitor": lambda t, a, b: a | b, "bitxor": lambda t, a, b: a ^ b,
    "bitnot": lambda t, a: ~a, "shl": lambda t, a, b: a << b, "shr": lambda t, a, b: a >> b,
    "where": lambda t, c, a, b: t.where(c, a, b),
}


def _scalar_type(t, v, ref):
    if isinstance(v, bool):
        return t.bool
    if isinstance(v, int) and not ref.dtype.is_floating_point:
        return ref.dtype if ref.dtype != t.bool else t.int64
    return ref.dtype if ref.dtype.is_floating_point else t.float32


def check_expr(expr: Expr) -> None:
    """CompileError unless every function and conversion of `expr` has a torch form."""
    if isinstance(expr, Call):
        dt = converts_to(expr.fn)
        if dt is not None:
            if not has_torch_dtype(dt):
                raise CompileError(f"target 'gpu' cannot convert to {dt}: torch has no such tensor type")
        elif expr.fn not in _FUNCS:
            raise CompileError(f"target 'gpu' has no torch form of scalar function {expr.fn}")
        for a in expr.args:
            check_expr(a)


def evaluate(expr: Expr, args: list[Any], consts: dict | None = None) -> Any:
    """`expr` over equally shaped device tensors (constants are weak scalars, as in numpy). `consts`
    caches the constants' device tensors across calls: made on the first (warm-up) call, none is
    created during CUDA-graph capture (a host-to-device copy is not allowed there)."""
    t = torch()
    consts = {} if consts is None else consts

    def const(v, dtype, device):
        key = (repr(v), dtype, device)
        if key not in consts:
            consts[key] = t.tensor(v, dtype=dtype, device=device)
        return consts[key]

    def leaf(e: Expr):
        return args[e.index] if isinstance(e, Var) else e.value  # type: ignore[attr-defined]

    def node(e: Call, vals: list):
        ref = next((v for v in vals if isinstance(v, t.Tensor)), None)
        if ref is None:  # constants only: fold with a tensor
            v0 = vals[0]
            ref = vals[0] = const(v0, t.bool if isinstance(v0, bool) else t.int64 if isinstance(v0, int)
                                  else t.float32, args[0].device if args else None)
        # scalars as 0-d tensors (weak in torch's type promotion, as in numpy's)
        vals = [v if isinstance(v, t.Tensor) else const(v, _scalar_type(t, v, ref), ref.device) for v in vals]
        dt = converts_to(e.fn)
        if dt is None:
            return _FUNCS[e.fn](t, *vals)
        x = vals[0]
        if dt.is_int and x.dtype.is_floating_point:
            x = t.trunc(x)
        overflow = nan_past(dt) if x.dtype.is_floating_point else None
        if overflow is not None:  # torch's cast saturates there; ONNX's (the reference's) gives NaN
            bound, inclusive = overflow
            over = x.abs() >= bound if inclusive else x.abs() > bound
            x = t.where(over, const(float("nan"), x.dtype, x.device), x)
        return x.to(torch_dtype(dt))

    return fold(expr, leaf, node)


@functools.cache
def nan_past(dt: DType) -> tuple[float, bool] | None:
    """For a float type with NaN but no infinity (float8 e4m3fn, the fnuz types): the magnitude past
    which a value converts to NaN, and whether the magnitude itself does (the half-way point between
    the largest finite value and the next power of its step rounds to even: to the largest value, or
    past it). None for other types."""
    import ml_dtypes

    if not dt.is_float or dt.np.itemsize != 1 or ml_dtypes.finfo(dt.np).max is None:
        return None
    top = float(ml_dtypes.finfo(dt.np).max)
    if not np.isnan(np.array(np.inf, np.float32).astype(dt.np).astype(np.float32)):
        return None  # it has infinities: torch's cast overflows to them, as the reference does
    below = float(np.nextafter(np.array(top, dt.np), np.array(0, dt.np)).astype(np.float32))
    half = top + (top - below) / 2
    return half, bool(np.isnan(np.array(half, np.float32).astype(dt.np).astype(np.float32)))
