"""Reading a pointwise body as what oneDNN's post-ops compute after a conv or a product:
act_k(...act_1(t_1 + t_2 + ...)) — a sum of terms, then a chain of eltwise activations, where a
step of the chain may also add a tensor (a residual after the activation: YOLO's and ResNet's
shortcuts are spelled both ways).

Exporters spell the same activation several ways (hard-swish as x * relu6(x + 3) / 6, GELU with its
0.5 outside or its x / sqrt(2), BatchNorm and PP-LCNet's learnable affine block as a scalar scale and shift around it),
and the frontend hands small constants to the body as broadcast inputs. So inputs that hold one
value are substituted into the body first; then activation templates (ops.ACTIVATIONS and the
ALIASES below, commutative calls matched either way round) and scalar affine steps ('linear') are
peeled from the outside in until what is left is a sum. The fusion passes decide what each term is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from ....ir.module import Instruction
from ....ops.scalar import Call, Const, Expr, Var, parse_expr
from ....passes.constants import small_constant
from ..ops import ACTIVATIONS, RESIDUAL, Activation

ALPHA, BETA = 101, 102  # template placeholders for an activation's constants

# other spellings of an activation: body over x0 -> the steps it equals
ALIASES = {
    "mul(x0, min(max(add(x0, 3), 0), 6))": (("hard_swish", 0.0, 0.0), ("linear", 6.0, 0.0)),  # x * relu6(x + 3)
    "mul(x0, add(erf(mul(x0, 0.7071067811865476)), 1))": (("gelu_erf", 0.0, 0.0), ("linear", 2.0, 0.0)),
}
_TEMPLATES: list[tuple[Expr, tuple[Activation, ...]]] = [
    (parse_expr(body.format(alpha=f"x{ALPHA}", beta=f"x{BETA}")), ((name, ALPHA, BETA),))
    for name, body in ACTIVATIONS.items() if name != "linear"
] + [(parse_expr(body), steps) for body, steps in ALIASES.items()]
_COMMUTATIVE = frozenset({"add", "mul", "max", "min"})


@dataclasses.dataclass
class Epilogue:
    terms: list[Expr]                 # summed first: Vars of the inputs, Consts, products
    activations: list[Activation]     # then applied in order; a RESIDUAL step adds the next of...
    residuals: list[Expr] = dataclasses.field(default_factory=list)  # ...these terms


def constant_inputs(body: Expr, inputs: list[Instruction]) -> Expr:
    """`body` with every input that holds a single value (a broadcast scalar) written as a constant."""
    values = {}
    for k, x in enumerate(inputs):
        v = small_constant(x)
        if v is not None and v.size >= 1 and v.dtype.kind == "f" and np.all(v == v.flat[0]):
            values[k] = float(v.flat[0])

    def sub(e: Expr) -> Expr:
        if isinstance(e, Var):
            return Const(values[e.index]) if e.index in values else e
        if isinstance(e, Call):
            return Call(e.fn, tuple(sub(a) for a in e.args))
        return e

    return sub(body)


def _match(t: Expr, e: Expr, b: dict[int, Expr]) -> bool:
    if isinstance(t, Var):
        if t.index in (ALPHA, BETA) and not isinstance(e, Const):
            return False
        if t.index in b:
            return b[t.index] == e
        b[t.index] = e
        return True
    if isinstance(t, Const):
        return isinstance(e, Const) and math.isclose(float(e.value), float(t.value), rel_tol=1e-6, abs_tol=1e-12)
    e = _as_product(t, e)
    if not (isinstance(e, Call) and e.fn == t.fn and len(e.args) == len(t.args)):
        return False
    orders = [e.args, e.args[::-1]] if e.fn in _COMMUTATIVE and len(e.args) == 2 else [e.args]
    for args in orders:
        trial = dict(b)
        if all(_match(ta, ea, trial) for ta, ea in zip(t.args, args)):
            b.update(trial)
            return True
    return False


def _as_product(t: Expr, e: Expr) -> Expr:
    """x / c read as x * (1/c) where the template multiplies by a constant: simplify_algebra keeps
    a division by anything but a power of two (GELU's x / sqrt(2)), and the fused activation is
    computed by its own formula anyway."""
    if (isinstance(t, Call) and t.fn == "mul" and any(isinstance(a, Const) for a in t.args)
            and isinstance(e, Call) and e.fn == "div" and isinstance(e.args[1], Const) and float(e.args[1].value)):
        return Call("mul", (e.args[0], Const(1.0 / float(e.args[1].value))))
    return e


def add_terms(e: Expr) -> list[Expr]:
    if isinstance(e, Call) and e.fn == "add":
        return add_terms(e.args[0]) + add_terms(e.args[1])
    return [e]


def _linear(e: Expr) -> tuple[Activation, Expr] | None:
    """e = inner * a, inner / a, inner + b or inner - b with a constant: (the step, inner)."""
    if not isinstance(e, Call) or len(e.args) != 2:
        return None
    x, y = e.args
    if e.fn in ("mul", "add") and isinstance(x, Const) and not isinstance(y, Const):
        x, y = y, x
    if not isinstance(y, Const) or isinstance(x, Const):
        return None
    c = float(y.value)
    step = {"mul": ("linear", c, 0.0), "add": ("linear", 1.0, c), "sub": ("linear", 1.0, -c),
            "div": ("linear", 1.0 / c, 0.0) if c else None}.get(e.fn)
    return (step, x) if step else None


def _merge(chain: list[Activation]) -> list[Activation]:
    """Consecutive affine steps become one; the identity disappears."""
    out: list[Activation] = []
    for name, a, b in chain:  # (a RESIDUAL step breaks a run: it does not commute with scaling)
        if name == "linear" and out and out[-1][0] == "linear":
            _, a0, b0 = out.pop()
            a, b = a0 * a, b0 * a + b
        if name == "linear" and a == 1.0 and b == 0.0:
            continue
        out.append((name, a, b))
    return out


def read_epilogue(body: Expr, is_term=lambda e: True) -> Epilogue | None:
    """`body` as a chain of activations over a sum whose every term satisfies `is_term`, or None."""
    def read(e: Expr, depth: int) -> Epilogue | None:
        terms = add_terms(e)
        if all(is_term(t) for t in terms):
            return Epilogue(terms, [])
        if depth > 8:
            return None
        inner_exprs = [t for t in terms if not is_term(t)]
        if len(terms) > 1 and len(inner_exprs) == 1:  # act(...) + r + c: r added after the chain
            inner = read(inner_exprs[0], depth + 1)
            if inner is None or inner.residuals:
                return None
            outer = [t for t in terms if is_term(t)]
            shift = sum(float(t.value) for t in outer if isinstance(t, Const))
            residuals = [t for t in outer if not isinstance(t, Const)]
            steps = [(RESIDUAL, 0.0, 0.0)] * len(residuals) + ([("linear", 1.0, shift)] if shift else [])
            return Epilogue(inner.terms, inner.activations + steps, residuals)
        for template, steps in _TEMPLATES:
            b: dict[int, Expr] = {}
            if _match(template, e, b):
                inner = read(b[0], depth + 1)
                if inner is not None:
                    alpha = float(getattr(b.get(ALPHA), "value", 0.0))
                    beta = float(getattr(b.get(BETA), "value", 0.0))
                    resolved = [(n, alpha if a == ALPHA else a, beta if c == BETA else c) for n, a, c in steps]
                    return Epilogue(inner.terms, inner.activations + resolved, inner.residuals)
        lin = _linear(e)
        if lin is not None:
            inner = read(lin[1], depth + 1)
            if inner is not None:
                return Epilogue(inner.terms, inner.activations + [lin[0]], inner.residuals)
        return None

    ep = read(body, 0)
    if ep is not None:
        ep.activations = _merge(ep.activations)
    return ep


@dataclasses.dataclass
class Operands:
    """What surrounds the fused product in an epilogue: summed constants, residual tensors, steps."""

    bias: np.ndarray         # float32, one value per output channel (zeros when has_bias is False)
    has_bias: bool
    residuals: list[Instruction]
    chain: list[Activation]


def split_terms(ins: Instruction, ep: Epilogue, product: Expr, channels: int,
                constant_of: Callable[[Instruction, int], np.ndarray | None], lens: tuple[int, ...],
                exclude: tuple[Instruction | None, ...]) -> Operands | None:
    """Sort the terms of `ep` other than `product` into a per-channel bias (`constant_of` reads one)
    and at most one residual tensor of `lens` (oneDNN sums one in place); None for anything else.
    `exclude` are the product's own instructions, which cannot be its residual."""
    bias = np.zeros(channels, np.float32)
    has_bias, residuals = False, []
    for t in ep.terms:
        if t is product:
            continue
        if isinstance(t, Const):
            bias, has_bias = bias + np.float32(t.value), True
            continue
        x = ins.inputs[t.index] if isinstance(t, Var) else None
        c = constant_of(x, channels) if x is not None else None
        if c is not None:
            bias, has_bias = bias + c, True
        elif x is not None and x.shape.lens == lens and not residuals and not any(x is e for e in exclude):
            residuals.append(x)
        else:
            return None  # a product with something else, or a second residual
    chain = [(RESIDUAL, 0.0, 0.0)] * len(residuals) + ep.activations
    for t in ep.residuals:  # added after some activations: their RESIDUAL steps are in the chain
        x = ins.inputs[t.index] if isinstance(t, Var) else None
        if x is None or x.shape.lens != lens or residuals or any(x is e for e in exclude):
            return None
        residuals.append(x)
    return Operands(bias, has_bias, residuals, chain)
