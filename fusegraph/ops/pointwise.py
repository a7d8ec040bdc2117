"""Pointwise ops: each is its scalar body, written once (see `scalar.py`).

Inputs of a pointwise op all have the same lens (the frontend inserts explicit `broadcast`s), so a
pointwise op never broadcasts by itself: code generators see one index space.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import ClassVar

import ml_dtypes
import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape
from .scalar import Expr, Var, call, const, convert, evaluate, parse_expr

_HALF = (np.dtype(np.float16), DType.bfloat16.np)


class PointwiseOp(Op):
    kind: ClassVar[OpKind] = OpKind.POINTWISE
    arity: ClassVar[int] = 1
    # None: the output dtype is the first input's; otherwise a fixed dtype (e.g. bool for compares)
    result_dtype: ClassVar[DType | None] = None
    # whether float16/bfloat16 inputs are computed in float32 (False for exact conversions)
    half_in_float32: ClassVar[bool] = True

    def body(self, *xs: Expr) -> Expr:
        raise NotImplementedError

    @functools.cached_property
    def expr(self) -> Expr:
        return self.body(*[Var(i) for i in range(self.arity)])

    def output_dtype(self, dtypes: Sequence[DType]) -> DType:
        return self.result_dtype or dtypes[0]

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) != self.arity:
            raise ShapeError(f"{self.name}: expects {self.arity} inputs, got {len(inputs)}")
        lens = inputs[0].lens
        for s in inputs[1:]:
            if s.lens != lens:
                raise ShapeError(f"{self.name}: inputs must have equal lens, got {[str(i) for i in inputs]}")
        return Shape.of(self.output_dtype([s.dtype for s in inputs]), lens)

    def compute_dynamic_shape(self, inputs):
        # the inputs have one shape (the frontend broadcasts first): a dim one input names, all have
        dims = tuple(next((d for d in ds if d.sym is not None), ds[0]) for ds in zip(*(s.dims for s in inputs)))
        return Shape(self.output_dtype([s.dtype for s in inputs]), dims)

    def compute(self, args: list[np.ndarray]) -> np.ndarray:
        dt = self.output_dtype([DType.from_numpy(np.asarray(a).dtype) for a in args]).np
        # half-precision math runs in float32 and rounds once at the end, as ONNX Runtime's kernels do
        if self.half_in_float32:
            args = [a.astype(np.float32) if getattr(a, "dtype", None) in _HALF else a for a in args]
        return np.asarray(evaluate(self.expr, args)).astype(dt, copy=False)


def pointwise(name: str, fn: Callable[..., Expr], result_dtype: DType | None = None) -> type[PointwiseOp]:
    """Define and register an attribute-free pointwise op from a body function."""
    arity = len(inspect.signature(fn).parameters)
    cls = type(
        "".join(p.capitalize() for p in name.split("_")),
        (PointwiseOp,),
        {"name": name, "arity": arity, "result_dtype": result_dtype,
         "body": lambda self, *xs: fn(*xs), "__module__": __name__},
    )
    return register_op(cls)


c = call
# -- the table: name, body ---------------------------------------------------------------------------
for _name, _fn in [
    ("add", lambda a, b: a + b),            # a+b
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("pow", lambda a, b: c("pow", a, b)),
    ("max", lambda a, b: c("max", a, b)),
    ("min", lambda a, b: c("min", a, b)),
    ("fmod", lambda a, b: c("fmod", a, b)),
    ("mod", lambda a, b: c("mod", a, b)),
    ("bitand", lambda a, b: c("bitand", a, b)),
    ("bitor", lambda a, b: c("bitor", a, b)),
    ("bitxor", lambda a, b: c("bitxor", a, b)),
    ("shl", lambda a, b: c("shl", a, b)),
    ("shr", lambda a, b: c("shr", a, b)),
    ("neg", lambda x: -x),
    ("abs", lambda x: c("abs", x)),
    ("sign", lambda x: c("sign", x)),
    ("exp", lambda x: c("exp", x)),
    ("log", lambda x: c("log", x)),
    ("sqrt", lambda x: c("sqrt", x)),
    ("rsqrt", lambda x: 1.0 / c("sqrt", x)),
    ("reciprocal", lambda x: 1.0 / x),
    ("erf", lambda x: c("erf", x)),
    ("tanh", lambda x: c("tanh", x)),
    ("sigmoid", lambda x: c("sigmoid", x)),
    ("relu", lambda x: c("max", x, 0)),     # max(x, 0)
    ("sin", lambda x: c("sin", x)), ("cos", lambda x: c("cos", x)), ("tan", lambda x: c("tan", x)),
    ("asin", lambda x: c("asin", x)), ("acos", lambda x: c("acos", x)), ("atan", lambda x: c("atan", x)),
    ("sinh", lambda x: c("sinh", x)), ("cosh", lambda x: c("cosh", x)),
    ("asinh", lambda x: c("asinh", x)), ("acosh", lambda x: c("acosh", x)),
    ("atanh", lambda x: c("atanh", x)),
    ("floor", lambda x: c("floor", x)), ("ceil", lambda x: c("ceil", x)), ("round", lambda x: c("round", x)),
    ("bitnot", lambda x: c("bitnot", x)),
    ("softplus", lambda x: c("log", c("exp", x) + 1)),
    ("softsign", lambda x: x / (c("abs", x) + 1)),
    ("gelu", lambda x: x * 0.5 * (c("erf", x * 0.7071067811865476) + 1)),
    ("gelu_tanh", lambda x: x * 0.5 * (c("tanh", (x + x * x * x * 0.044715) * 0.7978845608028654) + 1)),
    ("silu", lambda x: x * c("sigmoid", x)),
    ("mish", lambda x: x * c("tanh", c("log", c("exp", x) + 1))),
    ("identity", lambda x: x),
]:
    pointwise(_name, _fn)

for _name, _fn in [
    ("less", lambda a, b: c("lt", a, b)), ("less_equal", lambda a, b: c("le", a, b)),
    ("greater", lambda a, b: c("gt", a, b)), ("greater_equal", lambda a, b: c("ge", a, b)),
    ("equal", lambda a, b: c("eq", a, b)), ("not_equal", lambda a, b: c("ne", a, b)),
    ("logical_and", lambda a, b: c("and", a, b)), ("logical_or", lambda a, b: c("or", a, b)),
    ("logical_xor", lambda a, b: c("xor", a, b)), ("logical_not", lambda x: c("not", x)),
    ("isnan", lambda x: c("isnan", x)),
]:
    pointwise(_name, _fn, result_dtype=DType.bool)


# -- pointwise ops with attributes --------------------------------------------------------------------
# float8 types whose conversion can saturate: out-of-range values (and infinities) clamp to the
# largest finite value instead of becoming inf or nan (ONNX Cast's `saturate`, on by default).
SATURATING = (DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2, DType.float8_e5m2fnuz)


@register_op
class Convert(PointwiseOp):
    """x as dtype `to`: floats round to nearest even, floats to ints truncate toward zero.

    With `saturate`, conversions to a float8 type clamp to its finite range first (nan stays nan);
    without it, out-of-range values follow the format (inf where it has one, else nan)."""

    name = "convert"
    half_in_float32 = False  # a conversion reads its input exactly as it is
    to: DType = DType.float32
    saturate: bool = True

    def body(self, x):
        if self.saturate and self.to in SATURATING:
            top = float(ml_dtypes.finfo(self.to.np).max)
            x = c("min", c("max", x, -top), top)
        return convert(x, self.to)

    def output_dtype(self, dtypes):
        return self.to

    def compute(self, args):
        x = np.asarray(args[0])
        src = DType.from_numpy(x.dtype)
        if self.saturate and self.to in SATURATING and src.is_float and src.itemsize < 4:
            # Narrow floats take the clamp's Python bounds as weak scalars of their own type (numpy 2
            # with ml_dtypes 0.7), where e5m2's 57344 is nan in e4m3fn; float32 holds each of their
            # values exactly, so the conversion still rounds once.
            x = x.astype(np.float32)
        return super().compute([x])


@register_op
class Where(PointwiseOp):
    name = "where"
    arity = 3

    def body(self, cond, a, b):
        return c("where", cond, a, b)

    def output_dtype(self, dtypes):
        return dtypes[1]


@register_op
class IsInf(PointwiseOp):
    name = "isinf"
    result_dtype = DType.bool
    detect_positive: bool = True
    detect_negative: bool = True

    def body(self, x):
        pos = c("and", c("isinf", x), c("gt", x, 0)) if self.detect_positive else const(False)
        neg = c("and", c("isinf", x), c("lt", x, 0)) if self.detect_negative else const(False)
        return c("or", pos, neg)


@register_op
class Clip(PointwiseOp):
    """min(max(x, lo), hi) with lo and hi as inputs (they may be computed)."""

    name = "clip"
    arity = 3

    def body(self, x, lo, hi):
        return c("min", c("max", x, lo), hi)


@register_op
class LeakyRelu(PointwiseOp):
    name = "leaky_relu"
    alpha: float = 0.01

    def body(self, x):
        return c("where", c("ge", x, 0), x, x * self.alpha)


@register_op
class Elu(PointwiseOp):
    name = "elu"
    alpha: float = 1.0

    def body(self, x):
        return c("where", c("ge", x, 0), x, (c("exp", x) - 1) * self.alpha)


@register_op
class Celu(PointwiseOp):
    name = "celu"
    alpha: float = 1.0

    def body(self, x):
        return c("max", x, 0) + c("min", (c("exp", x / self.alpha) - 1) * self.alpha, 0)


@register_op
class Selu(PointwiseOp):
    name = "selu"
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875

    def body(self, x):
        return c("where", c("gt", x, 0), x * self.gamma, (c("exp", x) * self.alpha - self.alpha) * self.gamma)


@register_op
class HardSigmoid(PointwiseOp):
    name = "hard_sigmoid"
    alpha: float = 0.2
    beta: float = 0.5

    def body(self, x):
        return c("max", c("min", x * self.alpha + self.beta, 1), 0)


@register_op
class HardSwish(PointwiseOp):
    name = "hard_swish"

    def body(self, x):
        return x * c("max", c("min", x * (1 / 6) + 0.5, 1), 0)


@register_op
class ThresholdedRelu(PointwiseOp):
    name = "thresholded_relu"
    alpha: float = 1.0

    def body(self, x):
        return c("where", c("gt", x, self.alpha), x, 0)


@register_op
class Shrink(PointwiseOp):
    name = "shrink"
    bias: float = 0.0
    lambd: float = 0.5

    def body(self, x):
        return c("where", c("lt", x, -self.lambd), x + self.bias,
                 c("where", c("gt", x, self.lambd), x - self.bias, 0))


@register_op
class FusedPointwise(PointwiseOp):
    """A chain of pointwise ops fused into one kernel; its body travels as expression text."""

    name = "fused_pointwise"
    body_text: str = "x0"
    n_inputs: int = 1
    out_type: DType | None = None

    @functools.cached_property
    def expr(self) -> Expr:
        return parse_expr(self.body_text)

    @property
    def arity(self) -> int:  # type: ignore[override]
        return self.n_inputs

    def output_dtype(self, dtypes):
        return self.out_type or dtypes[0]
