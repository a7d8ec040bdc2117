"""Scalar expressions (ops/scalar.py) rendered as Triton code: the same trees the reference evaluates
with numpy, one template per scalar function.

Types follow numpy's rules over the tree (constants are weak). Half-precision floats are computed in
float32 and rounded where the tree converts explicitly and at the store, as Inductor does: results
are as close to the fp32 math as the format allows, within half-precision tolerances of the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.dtypes import DType
from ...ops.scalar import Call, Const, Expr, Var, converts_to, fold, nonfinite_name
from ...passes.constants import small_constant
from .device import TRITON_TYPES

LIB = "libdevice"  # from triton.language.extra import libdevice
COMPARES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
BOOL_RESULT = frozenset({*COMPARES, "and", "or", "xor", "not", "isnan", "isinf"})
UNARY = {"neg": "(-({0}))", "abs": "tl.abs({0})", "not": "(({0}) == 0)", "bitnot": "(~({0}))"}
HALF = (DType.float16, DType.bfloat16)


def compute_type(dt: DType) -> DType:
    """The type a value of `dt` is held in inside a kernel."""
    return DType.float32 if dt in HALF else dt


def tl_type(dt: DType) -> str:
    try:
        return TRITON_TYPES[dt]
    except KeyError:
        raise CompileError(f"no Triton type for {dt}") from None


def result_type(e: Expr, var_types: Sequence[DType]) -> DType | None:
    """The dtype numpy would give `e` over inputs of `var_types` (None: a bare, weak constant)."""
    if isinstance(e, Var):
        return var_types[e.index]
    if isinstance(e, Const):
        return None
    assert isinstance(e, Call)
    to = converts_to(e.fn)
    if to is not None:
        return to
    if e.fn in BOOL_RESULT:
        return DType.bool
    args = [result_type(a, var_types) for a in e.args]
    if e.fn == "where":
        args = args[1:]
    if e.fn == "pow":
        args = args[:1]
    known = [a for a in args if a is not None]
    if not known:
        return None
    if len(set(known)) == 1:
        return known[0]
    return DType.from_numpy(np.result_type(*[k.np for k in known]))


def render_const(c: Const, dt: DType | None) -> str:
    v = c.value
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        special = nonfinite_name(v)
        if special:
            return f'float("{special}")'
        if dt is not None and not dt.is_float:
            return str(int(v))
        return repr(v)
    if dt is not None and dt.is_float:
        return repr(float(v))
    return str(v)


class TritonExprRenderer:
    """Renders expression trees into lines of Triton code, one temporary per call node.

    `emit(expr, inputs)` takes the Triton names of the tree's variables (already held in their
    compute types) and returns the name of the result, in the compute type of the result's dtype."""

    def __init__(self, lines: list[str], indent: str, prefix: str = "t"):
        self.lines = lines
        self.indent = indent
        self.prefix = prefix
        self.count = 0

    def emit(self, expr: Expr, inputs: Sequence[str], var_types: Sequence[DType]) -> tuple[str, DType]:
        def leaf(e: Expr) -> tuple[str, DType | None]:
            if isinstance(e, Var):
                return inputs[e.index], var_types[e.index]
            return render_const(e, None), None  # type: ignore[arg-type]

        def node(e: Call, vals: list[tuple[str, DType | None]]) -> tuple[str, DType | None]:
            dt = result_type(e, var_types)
            power = small_power(e)
            if power and _is_float(dt):  # x*x, x*x*x: powf's general path costs ~20x more
                return self._tmp(" * ".join([f"({vals[0][0]})"] * power)), dt
            arg_types = [result_type(a, var_types) for a in e.args]
            args = []
            for a, (code, _) in zip(e.args, vals):
                if isinstance(a, Const):  # weak constants take their neighbours' type
                    other = dt if e.fn not in BOOL_RESULT else next((t for t in arg_types if t is not None), None)
                    code = render_const(a, other)
                args.append(code)
            return self._tmp(render_call(e.fn, args, arg_types, dt)), dt

        name, dt = fold(expr, leaf, node)
        if dt is None:  # a constant body: give it the type numpy would (float for floats)
            dt = DType.bool if isinstance(expr, Const) and isinstance(expr.value, bool) else (
                DType.int64 if isinstance(expr, Const) and isinstance(expr.value, int) else DType.float32)
        return name, dt

    def _tmp(self, code: str) -> str:
        name = f"{self.prefix}{self.count}"
        self.count += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        return name


def small_power(e: Call) -> int:
    """2 or 3 for pow(x, 2) and pow(x, 3) (a literal exponent), else 0. GPT-2's tanh GELU has
    x ** 3: as powf with the exponent a run-time value it made the GEMM's epilogue kernel 57 us
    against Inductor's 15 (x * x * x) on an H200 at batch 32. x * x is powf's exact result; x * x * x
    rounds twice, within an ulp of it."""
    if e.fn != "pow" or not isinstance(e.args[1], Const):
        return 0
    v = e.args[1].value
    return int(v) if not isinstance(v, bool) and v in (2, 3) else 0


def literal_exponents(body: Expr, inputs: Sequence[Any]) -> Expr:
    """`body` (over `inputs`, instructions) with each pow's exponent that is a one-element literal
    input, or the broadcast of one, written in as a constant (an exporter's `x ** 3` reaches the
    fused body as an input: in GPT-2's GELU a broadcast of the literal 3), so `small_power` sees it."""
    types = [x.shape.dtype for x in inputs]

    def leaf(e: Expr) -> Expr:
        return e

    def node(e: Call, args: list[Expr]) -> Expr:
        if e.fn == "pow" and isinstance(args[1], Var) and _is_float(result_type(e, types)):
            c = small_constant(inputs[args[1].index])
            if c is not None and c.size == 1:
                v = c.reshape(-1)[0].item()
                if not isinstance(v, bool) and v in (2, 3):
                    args = [args[0], Const(v)]
        return Call(e.fn, tuple(args))
    return fold(body, leaf, node)


def _is_float(dt: DType | None) -> bool:
    return dt is None or dt.is_float


def render_call(fn: str, a: list[str], types: list[DType | None], dt: DType | None) -> str:
    """Triton code for one scalar function over rendered arguments."""
    known = next((t for t in types if t is not None), None)
    target = converts_to(fn)
    if target is not None:
        src = types[0]
        if target in HALF:  # round to the half format, then hold it in float32 again
            return f"({a[0]}).to({tl_type(target)}).to(tl.float32)"
        if target is DType.bool:
            return f"(({a[0]}) != 0)"
        if src is DType.bool and target.is_float:
            return f"({a[0]}).to(tl.int8).to({tl_type(compute_type(target))})"
        return f"({a[0]}).to({tl_type(compute_type(target))})"
    if fn in COMPARES:
        return f"(({a[0]}) {COMPARES[fn]} ({a[1]}))"
    binary = {"add": "+", "sub": "-", "mul": "*", "bitand": "&", "bitor": "|", "bitxor": "^",
              "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
    if fn in binary:
        return f"(({a[0]}) {binary[fn]} ({a[1]}))"
    if fn == "div":  # float32 division correctly rounded (Triton's `/` may be approximate), as numpy's
        if dt is DType.float32 or dt in HALF:
            return f"{LIB}.div_rn(({a[0]}), ({a[1]}))"
        return f"(({a[0]}) / ({a[1]}))" if _is_float(dt) else f"(({a[0]}) // ({a[1]}))"
    if fn == "fmod":
        return f"{LIB}.fmod({a[0]}, {a[1]})" if _is_float(dt) else f"(({a[0]}) % ({a[1]}))"
    if fn == "mod":  # the sign of the divisor (Python's %), from the C remainder
        r = f"{LIB}.fmod({a[0]}, {a[1]})" if _is_float(dt) else f"(({a[0]}) % ({a[1]}))"
        return f"tl.where((({r}) != 0) & ((({r}) < 0) != (({a[1]}) < 0)), ({r}) + ({a[1]}), {r})"
    if fn == "pow":
        if _is_float(dt):
            exponent = a[1]
            if dt is not None and types[1] is not None and not types[1].is_float:  # libdevice wants one type
                exponent = f"({a[1]}).to({tl_type(compute_type(dt))})"
            return f"{LIB}.pow(({a[0]}), ({exponent}))"
        return f"{LIB}.pow(({a[0]}).to(tl.float64), ({a[1]}).to(tl.float64)).to({tl_type(dt)})"
    if fn in ("max", "min"):
        op = "maximum" if fn == "max" else "minimum"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if _is_float(dt) else ""
        return f"tl.{op}({a[0]}, {a[1]}{nan})"
    if fn in UNARY:
        return UNARY[fn].format(a[0])
    if fn == "sign":
        zero = "0.0" if _is_float(dt) else "0"
        one = "1.0" if _is_float(dt) else "1"
        return f"tl.where(({a[0]}) > {zero}, {one}, tl.where(({a[0]}) < {zero}, -{one}, ({a[0]}) * {zero}))"
    if fn == "isnan":  # NaN alone differs from itself (never for integers)
        return f"(({a[0]}) != ({a[0]}))"
    if fn == "isinf":
        return f"(tl.abs({a[0]}) == float(\"inf\"))" if _is_float(known) else f"(({a[0]}) != ({a[0]}))"
    if fn == "where":
        return f"tl.where({a[0]}, {a[1]}, {a[2]})"
    if fn in ("floor", "ceil", "round") and not _is_float(dt):
        return a[0]  # integers are already whole
    if not _is_float(dt):
        raise CompileError(f"scalar function {fn} of {dt} has no Triton template")
    unary = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt_rn" if dt != DType.float64 else "tl.sqrt",
             "erf": "tl.math.erf", "sigmoid": "tl.sigmoid", "floor": "tl.floor", "ceil": "tl.ceil",
             "round": f"{LIB}.rint", "tanh": f"{LIB}.tanh", "sin": f"{LIB}.sin", "cos": f"{LIB}.cos",
             "tan": f"{LIB}.tan", "asin": f"{LIB}.asin", "acos": f"{LIB}.acos", "atan": f"{LIB}.atan",
             "sinh": f"{LIB}.sinh", "cosh": f"{LIB}.cosh", "asinh": f"{LIB}.asinh", "acosh": f"{LIB}.acosh",
             "atanh": f"{LIB}.atanh"}
    if fn in unary:
        return f"{unary[fn]}({a[0]})"
    raise CompileError(f"scalar function {fn} has no Triton template")


def triton_types_ok(dtypes: Sequence[DType]) -> bool:
    """Whether generated Triton code can compute over values of these dtypes."""
    return all(d in TRITON_TYPES for d in dtypes)


def expr_types(expr: Expr, var_types: Sequence[DType]) -> set[DType]:
    """Every dtype a node of `expr` has (inputs, intermediates, converts)."""
    out: set[DType] = set()

    def go(e: Expr) -> None:
        t = result_type(e, var_types)
        if t is not None:
            out.add(t)
        if isinstance(e, Call):
            for x in e.args:
                go(x)

    go(expr)
    return out
