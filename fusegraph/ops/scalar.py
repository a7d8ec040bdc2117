"""Scalar expressions: the single definition of pointwise math.

A pointwise op's body is an `Expr` tree over its inputs (`Var(i)`), constants and scalar functions.
The reference evaluates it with numpy (`evaluate`); code generators walk the same tree and render
each function with their own template. The tree has a text form (`str(expr)`) that `parse_expr`
reads back, so fused bodies travel inside the IR text and compiled files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..errors import IRError
from ..ir.dtypes import DType


class Expr:
    """Base of expression nodes; arithmetic operators build calls."""

    def __add__(self, o): return call("add", self, o)
    def __radd__(self, o): return call("add", o, self)
    def __sub__(self, o): return call("sub", self, o)
    def __rsub__(self, o): return call("sub", o, self)
    def __mul__(self, o): return call("mul", self, o)
    def __rmul__(self, o): return call("mul", o, self)
    def __truediv__(self, o): return call("div", self, o)
    def __rtruediv__(self, o): return call("div", o, self)
    def __neg__(self): return call("neg", self)


@dataclass(frozen=True, eq=True)
class Var(Expr):
    index: int

    def __str__(self) -> str:
        return f"x{self.index}"


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: float | int | bool

    def __str__(self) -> str:
        v = self.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return nonfinite_name(v) or repr(v)
        return str(v)


def nonfinite_name(v: float) -> str | None:
    """"nan", "inf" or "-inf" for a value no decimal literal spells; None for a finite one."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


@dataclass(frozen=True, eq=True)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]

    def __str__(self) -> str:
        return f"{self.fn}({', '.join(map(str, self.args))})"


def const(v) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Const(bool(v))
    if isinstance(v, (int, np.integer)):
        return Const(int(v))
    return Const(float(v))


def call(fn: str, *args) -> Expr:
    if fn not in SCALAR_FUNCS and not fn.startswith(_CONVERT):
        raise IRError(f"unknown scalar function {fn!r}")
    return Call(fn, tuple(const(a) for a in args))


_CONVERT = "convert_"  # a conversion is the function convert_<dtype name>


def convert(x, dtype: DType) -> Expr:
    return call(f"{_CONVERT}{dtype.value}", x)


def converts_to(fn: str) -> DType | None:
    """The dtype the function named `fn` converts to; None when it is not a conversion."""
    return DType(fn[len(_CONVERT):]) if fn.startswith(_CONVERT) else None


# -- numpy implementations --------------------------------------------------------------------------
def _erf(x):
    # Exact (math.erf) on small tensors, a 1.2e-7-accurate Chebyshev form on large ones.
    x = np.asarray(x)
    if x.size <= 4096:
        return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)
    return _erf_fast(x)


def _erf_fast(x):
    # Max abs error ~1.2e-7 (Numerical Recipes erfc, Chebyshev), computed in float64.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    r = t * np.exp(
        -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
            -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
                -0.82215223 + t * 0.17087277))))))))
    )
    return np.where(x >= 0, 1.0 - r, r - 1.0).astype(x.dtype)


def _is_int(v) -> bool:
    # Python scalars stay weak (they take the tensor's dtype), so only their kind is asked for
    return isinstance(v, int) and not isinstance(v, bool) or np.asarray(v).dtype.kind in "iu"


def _div(a, b):
    if _is_int(a) and _is_int(b):
        a, b = np.asarray(a), np.asarray(b)
        with np.errstate(divide="ignore"):
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return (q + fix.astype(q.dtype)).astype(q.dtype)  # C-style truncation toward zero
    return np.divide(a, b)


def _round(x):
    return np.round(x)  # numpy rounds half to even, as ONNX Round requires


def _sigmoid(x):
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _where(c, a, b):
    return np.where(c, a, b)


def _pow(a, b):
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.float64), np.asarray(b).astype(np.float64)).astype(a.dtype)
    return np.power(a, np.asarray(b).astype(a.dtype) if np.ndim(b) else b)


def _fmod(a, b):
    return np.fmod(a, b)


def _mod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mod(a, b)


@dataclass(frozen=True)
class ScalarFunc:
    name: str
    arity: int
    numpy: Callable


_F = ScalarFunc
SCALAR_FUNCS: dict[str, ScalarFunc] = {f.name: f for f in [
    _F("add", 2, np.add), _F("sub", 2, np.subtract), _F("mul", 2, np.multiply), _F("div", 2, _div),
    _F("fmod", 2, _fmod), _F("mod", 2, _mod), _F("pow", 2, _pow),
    _F("max", 2, np.maximum), _F("min", 2, np.minimum),
    _F("neg", 1, np.negative), _F("abs", 1, np.abs), _F("sign", 1, np.sign),
    _F("exp", 1, np.exp), _F("log", 1, np.log), _F("sqrt", 1, np.sqrt), _F("erf", 1, _erf),
    _F("tanh", 1, np.tanh), _F("sigmoid", 1, _sigmoid),
    _F("sin", 1, np.sin), _F("cos", 1, np.cos), _F("tan", 1, np.tan),
    _F("asin", 1, np.arcsin), _F("acos", 1, np.arccos), _F("atan", 1, np.arctan),
    _F("sinh", 1, np.sinh), _F("cosh", 1, np.cosh), _F("asinh", 1, np.arcsinh),
    _F("acosh", 1, np.arccosh), _F("atanh", 1, np.arctanh),
    _F("floor", 1, np.floor), _F("ceil", 1, np.ceil), _F("round", 1, _round),
    _F("isnan", 1, np.isnan), _F("isinf", 1, np.isinf),
    _F("lt", 2, np.less), _F("le", 2, np.less_equal), _F("gt", 2, np.greater),
    _F("ge", 2, np.greater_equal), _F("eq", 2, np.equal), _F("ne", 2, np.not_equal),
    _F("and", 2, np.logical_and), _F("or", 2, np.logical_or), _F("xor", 2, np.logical_xor),
    _F("not", 1, np.logical_not),
    _F("bitand", 2, np.bitwise_and), _F("bitor", 2, np.bitwise_or), _F("bitxor", 2, np.bitwise_xor),
    _F("bitnot", 1, np.invert), _F("shl", 2, np.left_shift), _F("shr", 2, np.right_shift),
    _F("where", 3, _where),
]}


# -- evaluation -------------------------------------------------------------------------------------
T = TypeVar("T")


def fold(expr: Expr, leaf: Callable[[Expr], T], node: Callable[[Call, list[T]], T]) -> T:
    """`expr` evaluated bottom-up: `leaf(e)` for a variable or a constant, `node(e, values)` for a call
    over its arguments' values. A subtree shared by several parents is evaluated once."""
    memo: dict[int, T] = {}

    def ev(e: Expr) -> T:
        key = id(e)
        if key not in memo:
            memo[key] = node(e, [ev(a) for a in e.args]) if isinstance(e, Call) else leaf(e)
        return memo[key]

    return ev(expr)


def evaluate(expr: Expr, args: list[np.ndarray]):
    """Evaluate `expr` over equally shaped numpy arrays (numpy's dtype rules, weak scalars)."""

    def leaf(e: Expr):
        return args[e.index] if isinstance(e, Var) else e.value  # type: ignore[attr-defined]

    def node(e: Call, vals: list):
        to = converts_to(e.fn)
        if to is not None:
            return _convert(vals[0], to)
        with np.errstate(all="ignore"):
            return SCALAR_FUNCS[e.fn].numpy(*vals)

    return fold(expr, leaf, node)


def _convert(x, dtype: DType):
    x = np.asarray(x)
    if dtype is DType.string:
        return _to_strings(x)
    if x.dtype == object:
        return _from_strings(x, dtype)
    if dtype is DType.float8_e8m0fnu:
        return _to_e8m0(x)
    target = dtype.np
    if dtype.is_int and x.dtype.kind == "f" and x.dtype.isbuiltin == 1:
        # Saturating casts are not ONNX semantics; truncate toward zero like C (as ml_dtypes'
        # own float types do when they convert themselves).
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(target)
    try:
        return x.astype(target)
    except TypeError:
        # ml_dtypes types convert only to and from numpy's own: go through float32 or int64, which
        # hold every value of the narrow types exactly, so the result is still rounded once.
        via = np.float32 if DType.from_numpy(x.dtype).is_float else np.int64
        return x.astype(via).astype(target)


def _to_e8m0(x: np.ndarray) -> np.ndarray:
    """ONNX's default conversion to float8e8m0 (round_mode "up", saturating), bit for bit as its
    reference: the float32 exponent, one more when any mantissa bit is set unless that passes 2^127;
    the sign is dropped; inf and nan become nan."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exp == 0xFF
    up = ((bits & 0x7FFFFF) != 0) & ~special & (exp < 0xFE)
    return np.where(special, 0xFF, exp + up).astype(np.uint8).view(DType.float8_e8m0fnu.np)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as ONNX's reference prints them (numpy's str: '0.1', '1e+10', 'nan', 'inf', 'True')."""
    if x.dtype == object:
        return x
    if x.dtype.isbuiltin != 1:  # ml_dtypes (bf16, fp8, int4, ...) have no numpy string cast
        return np.array([str(v) for v in x.reshape(-1).tolist()], dtype=object).reshape(x.shape)
    return x.astype(np.str_).astype(object)


def _from_strings(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Strings parsed as ONNX Cast specifies: plain or scientific notation, 'INF'/'+INF'/'-INF'/'NaN'
    in any case; a fractional string read as an integer truncates."""
    flat = x.reshape(-1).tolist()
    if dtype.is_int:
        vals = [_parse_int(s) for s in flat]
        return np.array(vals, dtype=np.int64 if dtype.is_signed else np.uint64).reshape(x.shape).astype(dtype.np)
    nums = np.array([_parse_float(s) for s in flat], dtype=np.float64).reshape(x.shape)
    if dtype is DType.bool:
        return nums != 0
    with np.errstate(over="ignore"):  # out of range becomes inf, as for any float narrowing
        return _convert(nums, dtype)


def _parse_float(s) -> float:
    t = str(s).strip()
    if t.lower() in ("true", "false"):
        return float(t.lower() == "true")
    try:
        return float(t)  # also reads inf, +INF, -Infinity, nan in any case
    except ValueError:
        # A value error: the interpreter reports it with the instruction that met it.
        raise ValueError(f"cannot cast string {s!r} to a number") from None


def _parse_int(s) -> int:
    try:
        return int(str(s).strip())
    except ValueError:
        return int(math.trunc(_parse_float(s)))


def variables(expr: Expr) -> set[int]:
    if isinstance(expr, Var):
        return {expr.index}
    if isinstance(expr, Call):
        return set().union(*(variables(a) for a in expr.args)) if expr.args else set()
    return set()


# -- text form --------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(-?inf|nan|true|false)|(x\d+)|([A-Za-z_][A-Za-z_0-9]*)\(|"
                    r"(-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+|-?\d+)|(\))|(,))")


def parse_expr(text: str) -> Expr:
    pos = 0

    def err(msg: str) -> IRError:
        return IRError(f"bad scalar expression at {pos}: {msg} in {text!r}")

    def next_token():
        nonlocal pos
        m = _TOKEN.match(text, pos)
        if not m:
            raise err("unexpected character")
        pos = m.end()
        return m

    def parse() -> Expr:
        m = next_token()
        word, var, fn, num = m.group(1), m.group(2), m.group(3), m.group(4)
        if word:
            return Const({"inf": math.inf, "-inf": -math.inf, "nan": math.nan,
                          "true": True, "false": False}[word])
        if var:
            return Var(int(var[1:]))
        if num:
            return Const(float(num) if any(c in num for c in ".e") else int(num))
        if fn:
            args = []
            while True:
                save = pos
                m2 = next_token()
                if m2.group(5):
                    break
                if m2.group(6):
                    continue
                _rewind(save)  # not a separator: parse an argument from there
                args.append(parse())
            return call(fn, *args)
        raise err("expected an expression")

    def _rewind(p: int) -> None:
        nonlocal pos
        pos = p

    e = parse()
    if text[pos:].strip():
        raise err("trailing text")
    return e
