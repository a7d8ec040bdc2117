"""Render a scalar expression (ops/scalar.py) as C statements with numpy's types and semantics.

Every node's dtype is found by running the reference itself (`scalar.evaluate`) one node at a time
on one-element arrays of the input dtypes, so weak Python scalars, promotion and each function's own
casts (integer `div` truncating, `pow` on integers through float64, `erf` of an integer cast back)
are numpy's by construction, not re-derived here. Each call node becomes one `const T tN = ...;`
statement; structurally equal nodes share one temporary. Booleans are uint8_t holding 0 or 1.
Subexpressions without variables are folded to literals with the reference's value.

float16 and bfloat16 values live in C floats holding exactly representable values: each operation
computes in float and rounds to the half type, as numpy's (and ml_dtypes') half loops do. Only
loads and stores see the storage types (`storage_type`, `load`, `store`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ....errors import CompileError
from ....ir.dtypes import DType
from ....ops.scalar import Call, Const, Expr, Var, evaluate, variables
from . import cmath


class CodegenUnsupported(CompileError, NotImplementedError):
    """The C generator does not handle this expression, dtype or layout; a target picks another kernel."""


C_TYPES: dict[DType, str] = {
    DType.bool: "uint8_t", DType.int8: "int8_t", DType.int16: "int16_t", DType.int32: "int32_t",
    DType.int64: "int64_t", DType.uint8: "uint8_t", DType.uint16: "uint16_t", DType.uint32: "uint32_t",
    DType.uint64: "uint64_t", DType.float32: "float", DType.float64: "double",
    DType.float16: "float", DType.bfloat16: "float"}  # half types: their values, as floats
HALF = (DType.float16, DType.bfloat16)
_STORAGE = {DType.float16: "uint16_t", DType.bfloat16: "uint16_t"}  # converted by the prelude's helpers
# types whose every value a float holds exactly: rounding them to float16 through float is one rounding
_EXACT_IN_FLOAT = frozenset({DType.float32, DType.float16, DType.bfloat16, DType.bool, DType.int8, DType.uint8,
                             DType.int16, DType.uint16})
_UNSIGNED = {"int8_t": "uint8_t", "int16_t": "uint16_t", "int32_t": "uint32_t", "int64_t": "uint64_t"}
_LIBM = {"exp", "log", "sqrt", "erf", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
         "cosh", "asinh", "acosh", "atanh"}
_FAST32 = {"exp": "fg_expf", "erf": "fg_erff", "tanh": "fg_tanhf", "log": "fg_logf"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_BITWISE = {"bitand": "&", "bitor": "|", "bitxor": "^"}
EXPENSIVE = _LIBM | {"sigmoid", "pow", "fmod", "mod"}


def c_type(dt: DType) -> str:
    try:
        return C_TYPES[dt]
    except KeyError:
        raise CodegenUnsupported(f"C kernels do not handle dtype {dt}") from None


def single(dt: DType) -> bool:
    """Whether float math on dt uses the float (f-suffixed) libm functions."""
    return dt in (DType.float32, *HALF)


def storage_type(dt: DType) -> str:
    """The C type of dt in memory (half types are stored as such, computed as floats)."""
    return _STORAGE.get(dt) or c_type(dt)


def load(code: str, dt: DType) -> str:
    """The value of a stored element `code` of dtype dt."""
    return {DType.float16: f"fg_f16_to_f32({code})", DType.bfloat16: f"fg_bf16_to_f32({code})"}.get(dt, code)


def store(code: str, dt: DType) -> str:
    """A value of dtype dt converted to its storage type (exact: half values are representable)."""
    return {DType.float16: f"fg_f32_to_f16({code})", DType.bfloat16: f"fg_f32_to_bf16({code})"}.get(dt, code)


def literal(value, dt: DType) -> str:
    """A C literal of type `dt` holding `value` as numpy converts it to `dt`."""
    v = np.asarray(value).astype(dt.np).item()
    if dt.is_float:
        v = float(v)
        f = "f" if single(dt) else ""
        if np.isnan(v):
            return "NAN" if f else "((double)NAN)"
        if np.isinf(v):
            inf = "INFINITY" if f else "((double)INFINITY)"
            return inf if v > 0 else f"(-{inf})"
        text = str(np.float32(v)) if f else repr(float(v))  # shortest round-trip text for the type
        return f"({text}{f})" if text.startswith("-") else f"{text}{f}"
    if dt == DType.bool:
        return f"((uint8_t){int(bool(v))})"
    if dt == DType.int64 and v == -(2**63):
        return "INT64_MIN"
    return f"(({c_type(dt)}){v}{'ULL' if dt == DType.uint64 else 'LL'})"


def convert(code: str, src: DType, dst: DType) -> str:
    """C for numpy's `astype(dst)`: floats truncate toward zero into integers, nonzero is true."""
    if src == dst:
        return code
    t = c_type(dst)
    if dst == DType.float16:  # one rounding, from any source type (a double or a wide integer: directly)
        return f"fg_round_f16((float)({code}))" if src in _EXACT_IN_FLOAT else f"((float)(_Float16)({code}))"
    if dst == DType.bfloat16:
        return f"fg_round_bf16((float)({code}))"
    if dst == DType.bool:
        return f"((uint8_t)({code} != 0))"
    if src.is_float and dst.is_int:
        # Through a C-defined range first (int32 for narrow types): numpy's x86 casts wrap the same way.
        via = {1: "int32_t", 2: "int32_t", 4: "int32_t" if dst.is_signed else "int64_t"}.get(dst.itemsize)
        return f"(({t})({via}){code})" if via else f"(({t}){code})"
    return f"(({t}){code})"


@dataclass(frozen=True)
class CValue:
    """A C expression (usually a variable name) holding a value of `dtype`."""

    code: str
    dtype: DType


@dataclass(frozen=True)
class _Weak:
    value: object  # a Python scalar: takes the other operand's type, as in numpy


class CRenderer:
    """Renders expressions into statements; collects the helper functions they call (in order)."""

    def __init__(self, fast_math: bool = True, prefix: str = "t"):
        self.fast_math = fast_math
        self.prefix = prefix
        self.helpers: dict[str, str] = {}
        self._count = 0

    def render(self, expr: Expr, inputs: Sequence[CValue], out_dtype: DType) -> tuple[list[str], str]:
        """Statements computing `expr` over `inputs` (Var(i) is inputs[i]) and the C expression of its
        value converted to `out_dtype`."""
        c_type(out_dtype)
        for v in inputs:
            c_type(v.dtype)
        if any(i >= len(inputs) for i in variables(expr)):
            raise CodegenUnsupported(f"expression {expr} uses more than its {len(inputs)} inputs")
        lines: list[str] = []
        names: dict[str, str] = {}  # right-hand side -> temporary, for common subexpressions
        probes = [np.ones(1, v.dtype.np) for v in inputs]
        done: dict[int, tuple[object, CValue | _Weak]] = {}

        def walk(e: Expr) -> tuple[object, CValue | _Weak]:
            if id(e) in done:
                return done[id(e)]
            if isinstance(e, Var):
                r = (probes[e.index], inputs[e.index])
            elif isinstance(e, Const):
                r = (e.value, _Weak(e.value))
            else:
                assert isinstance(e, Call)
                args = [walk(a) for a in e.args]
                # The reference on this one node, its operands as probes (constants stay weak).
                shallow = Call(e.fn, tuple(a if isinstance(a, Const) else Var(k) for k, a in enumerate(e.args)))
                try:
                    value = evaluate(shallow, [p for p, _ in args])
                except (TypeError, OverflowError, ValueError) as err:
                    raise CodegenUnsupported(f"{e.fn} of {[_dtype_name(p) for p, _ in args]}: {err}") from None
                rt = DType.from_numpy(np.asarray(value).dtype)
                c_type(rt)
                if not variables(e):
                    r = (value, CValue(literal(value, rt), rt))
                else:
                    rhs = self._call(e.fn, [c for _, c in args], [p for p, _ in args], rt)
                    if rt in HALF and not e.fn.startswith("convert_"):  # numpy's half ops round each result
                        rhs = convert(rhs, DType.float32, rt)
                    if rhs not in names:
                        names[rhs] = f"{self.prefix}{self._count}"
                        self._count += 1
                        lines.append(f"const {c_type(rt)} {names[rhs]} = {rhs};")
                    r = (value, CValue(names[rhs], rt))
            done[id(e)] = r
            return r

        _, root = walk(expr)
        if isinstance(root, _Weak):
            return lines, literal(root.value, out_dtype)
        return lines, convert(root.code, root.dtype, out_dtype)

    # -- one call --------------------------------------------------------------------------------
    def need(self, name: str, code: str | None = None) -> str:
        for dep in cmath.DEPENDS.get(name, ()):
            self.need(dep)
        if name not in self.helpers:
            self.helpers[name] = code if code is not None else cmath.fast_helper(name)
        return name

    def _call(self, fn: str, args: list, probes: list, rt: DType) -> str:
        def as_(a, dt: DType) -> str:
            return literal(a.value, dt) if isinstance(a, _Weak) else convert(a.code, a.dtype, dt)

        def src(a) -> DType:
            return a.dtype if isinstance(a, CValue) else rt

        t = c_type(rt)
        if fn.startswith("convert_"):
            return as_(args[0], rt)
        if fn in _COMPARE:
            ct = DType.from_numpy(np.result_type(*[a.value if isinstance(a, _Weak) else a.dtype.np for a in args]))
            return f"((uint8_t)({as_(args[0], ct)} {_COMPARE[fn]} {as_(args[1], ct)}))"
        if fn in ("and", "or", "xor"):
            a, b = (f"({as_(x, src(x))} != 0)" for x in args)
            return f"((uint8_t)({a} {dict(zip(('and', 'or', 'xor'), '&|^'))[fn]} {b}))"
        if fn == "not":
            return f"((uint8_t)({as_(args[0], src(args[0]))} == 0))"
        if fn == "where":
            return f"({as_(args[0], src(args[0]))} != 0 ? {as_(args[1], rt)} : {as_(args[2], rt)})"
        if fn in ("isnan", "isinf"):
            a = args[0]
            if not a.dtype.is_float:
                return "((uint8_t)0)"
            x = a.code
            return f"((uint8_t)({x} != {x}))" if fn == "isnan" else \
                f"((uint8_t)({'fabsf' if single(a.dtype) else 'fabs'}({x}) == INFINITY))"
        if fn in _LIBM or fn in ("sigmoid", "floor", "ceil", "round"):
            return self._unary_float(fn, as_, args[0], rt)
        if fn == "pow":
            if rt.is_float:
                fn_c = self.need("fg_powf") if single(rt) else "pow"
                return f"{fn_c}({as_(args[0], rt)}, {as_(args[1], rt)})"
            return convert(f"pow({as_(args[0], DType.float64)}, {as_(args[1], DType.float64)})",
                           DType.float64, rt)
        xs = [as_(a, rt) for a in args]
        return self._arith(fn, xs, rt, t)

    def _unary_float(self, fn: str, as_, arg, rt: DType) -> str:
        if fn in ("floor", "ceil", "round") and not rt.is_float:
            return as_(arg, rt)  # integers are already whole
        ct = rt if rt.is_float else DType.float64  # e.g. erf of an int32 computes in float64
        x = as_(arg, ct)
        f32 = single(ct)
        if fn == "sigmoid" and isinstance(arg, CValue) and not arg.dtype.is_float:
            # The reference's formula, 1 / (1 + exp(-x)), negating in the integer type (INT_MIN wraps).
            neg = convert(f"(-{arg.code})", arg.dtype, DType.float64)
            code = f"(1.0 / (1.0 + exp({neg})))"
        elif fn == "sigmoid":
            name = ("fg_sigmoidf" if self.fast_math else "fg_sigmoidf_libm") if f32 else "fg_sigmoid"
            code = f"{self.need(name)}({x})"
        elif fn == "round":  # rint rounds half to even in the default rounding mode, as numpy
            code = f"rint{'f' if f32 else ''}({x})"
        elif f32 and self.fast_math and fn in _FAST32:
            code = f"{self.need(_FAST32[fn])}({x})"
        else:
            code = f"{fn}{'f' if f32 else ''}({x})"
        return convert(code, ct, rt)

    def _arith(self, fn: str, xs: list[str], rt: DType, t: str) -> str:
        f32 = single(rt)
        if rt == DType.bool and fn in ("add", "mul"):  # numpy: logical or / and
            return f"((uint8_t)({xs[0]} {'|' if fn == 'add' else '&'} {xs[1]}))"
        if fn in ("add", "sub", "mul"):
            return f"(({t})({xs[0]} {dict(add='+', sub='-', mul='*')[fn]} {xs[1]}))"
        if fn == "div":
            if rt.is_float:
                return f"({xs[0]} / {xs[1]})"
            return f"{self.need(*cmath.int_helper('div', rt, t))}({xs[0]}, {xs[1]})"
        if fn in ("fmod", "mod"):
            if rt.is_float:
                if fn == "fmod":
                    return f"fmod{'f' if f32 else ''}({xs[0]}, {xs[1]})"
                return f"{self.need(*cmath.float_mod_helper(rt, t))}({xs[0]}, {xs[1]})"
            return f"{self.need(*cmath.int_helper(fn, rt, t))}({xs[0]}, {xs[1]})"
        if fn in ("max", "min"):
            op = ">=" if fn == "max" else "<="
            a, b = xs
            if rt.is_float:  # NaN in either operand wins, as np.maximum / np.minimum
                return f"(({a} {op} {b} || {a} != {a}) ? {a} : {b})"
            return f"({a} {op} {b} ? {a} : {b})"
        if fn == "neg":
            return f"(-{xs[0]})" if rt.is_float else f"(({t})(-{xs[0]}))"
        if fn == "abs":
            if rt.is_float:
                return f"fabs{'f' if f32 else ''}({xs[0]})"
            return f"(({t})({xs[0]} < 0 ? -{xs[0]} : {xs[0]}))" if rt.is_signed else xs[0]
        if fn == "sign":
            s = f"(({t})(({xs[0]} > 0) - ({xs[0]} < 0)))"
            return f"({xs[0]} != {xs[0]} ? {xs[0]} : {s})" if rt.is_float else s
        if fn in _BITWISE:
            return f"(({t})({xs[0]} {_BITWISE[fn]} {xs[1]}))"
        if fn == "bitnot":
            return f"((uint8_t)({xs[0]} ^ 1))" if rt == DType.bool else f"(({t})(~{xs[0]}))"
        if fn in ("shl", "shr"):
            # numpy: a shift by the width or more (or negative) gives 0, or -1 for a negative `>>`.
            a, b = xs
            bits = 8 * rt.itemsize
            if fn == "shl":
                u = _UNSIGNED.get(t, t)
                return f"((uint64_t){b} < {bits} ? ({t})(({u}){a} << {b}) : ({t})0)"
            rest = f"({t})({a} < 0 ? -1 : 0)" if rt.is_signed else f"({t})0"
            return f"((uint64_t){b} < {bits} ? ({t})({a} >> {b}) : {rest})"
        raise CodegenUnsupported(f"no C rendering of scalar function {fn!r} for {rt}")


def _dtype_name(p) -> str:
    return type(p).__name__ if isinstance(p, (bool, int, float)) else str(np.asarray(p).dtype)
