"""The values of integer shape vectors in symbols (ir/symbolic.py): `shape_of` of a tensor whose dims
are fixed or named, and gather / slice / concat / unsqueeze / squeeze / reshape / broadcast / add /
sub / mul / floor-div on such values. The frontend reads reshape targets with it while parsing,
passes/fold_symbolic_shapes.py folds whole chains with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .module import Instruction
from .shape import Dim, Shape
from .symbolic import Sym

Value = tuple[Sym | None, ...]  # a shape value's elements in row-major order; None: that one is not known
SMALL = 64  # shape values are short vectors: longer integer tensors are data


def dim_sym(d: Dim) -> Sym | None:
    return Sym.const(d.min) if d.is_fixed else d.sym


def _literal(ins: Instruction, args: list[Value]) -> Value | None:
    v = ins.literal
    if v.dtype.kind not in "iu" or v.size > SMALL:
        return None
    return tuple(Sym.const(int(n)) for n in v.reshape(-1))


def _shape_of(ins: Instruction, args: list[Value]) -> Value | None:
    return tuple(dim_sym(d) for d in ins.inputs[0].shape.dims[ins.op.start: ins.op.end])


def _same(ins: Instruction, args: list[Value]) -> Value | None:
    return args[0]  # a view or reshape of the elements: the same values in the same order


def _convert(ins: Instruction, args: list[Value]) -> Value | None:
    return args[0] if ins.shape.dtype.np.kind in "iu" and np.dtype(ins.shape.dtype.np).itemsize >= 4 else None


def _gather(ins: Instruction, args: list[Value]) -> Value | None:
    data, idx = ins.inputs
    if ins.op.axis != 0 or data.shape.ndim != 1 or not idx.is_literal:
        return None
    n = len(args[0])
    picks = [int(i) + n if i < 0 else int(i) for i in idx.literal.reshape(-1)]
    return tuple(args[0][i] for i in picks) if all(0 <= i < n for i in picks) else None


def _slice(ins: Instruction, args: list[Value]) -> Value | None:
    if ins.inputs[0].shape.ndim != 1 or ins.op.axes != (0,):
        return None
    s, e, st = ins.op.starts[0], ins.op.ends[0], ins.op.steps[0]
    return args[0][s: None if e < 0 else e: st]


def _concat(ins: Instruction, args: list[Value]) -> Value | None:
    return sum(args, ()) if ins.op.axis == 0 and all(i.shape.ndim == 1 for i in ins.inputs) else None


def _broadcast(ins: Instruction, args: list[Value]) -> Value | None:
    n = math.prod(ins.shape.lens)
    return args[0] * n if len(args[0]) == 1 else args[0] if len(args[0]) == n else None


def _arith(fn: Callable[[Sym, Sym], Sym | None]) -> Callable[[Instruction, list[Value]], Value | None]:
    def rule(ins: Instruction, args: list[Value]) -> Value | None:
        a, b = args
        if len(a) != len(b):  # pointwise inputs share one shape
            return None
        return tuple(None if x is None or y is None else fn(x, y) for x, y in zip(a, b, strict=True))
    return rule


def _floordiv(a: Sym, b: Sym) -> Sym | None:
    k = b.constant
    if not k or k < 0:
        return None
    c = a.constant
    return Sym.const(c // k) if c is not None else a.exact_div(k)  # dims are non-negative: exact is floor


# op name -> the symbolic value of its output from its inputs' (None: not known)
VALUE: dict[str, Callable[[Instruction, list[Value]], Value | None]] = {
    "@literal": _literal, "shape_of": _shape_of, "gather": _gather, "slice": _slice, "concat": _concat,
    "unsqueeze": _same, "squeeze": _same, "reshape": _same, "flatten": _same, "contiguous": _same,
    "convert": _convert, "broadcast": _broadcast,
    "add": _arith(lambda x, y: x + y), "sub": _arith(lambda x, y: x - y), "mul": _arith(lambda x, y: x * y),
    "div": _arith(_floordiv),
}


def value_of(ins: Instruction, memo: dict[int, Value | None] | None = None) -> Value | None:
    """The elements of the integer shape value `ins` in symbols, or None where one is not known."""
    memo = {} if memo is None else memo
    if ins.uid in memo:
        return memo[ins.uid]
    memo[ins.uid] = None  # (a value never depends on itself; this also bounds the walk)
    rule, s = VALUE.get(ins.op.name), ins.shape
    if rule is None or not isinstance(s, Shape) or s.dtype.np.kind not in "iu" or s.is_dynamic or s.elements > SMALL:
        return None
    sources = [] if ins.op.name == "shape_of" or ins.is_literal else ins.inputs[:1] if ins.op.name == "gather" else ins.inputs
    args = [value_of(i, memo) for i in sources]  # gather's indices are read as a literal
    if any(a is None for a in args):
        return None
    value = rule(ins, args)
    memo[ins.uid] = value if value is not None and len(value) == s.elements else None
    return memo[ins.uid]


def reshape_dims(x: Shape, target: Value) -> tuple[int, ...] | None:
    """`target` as ONNX reshape dims for `x` (allowzero off): numbers as they are, 0 where the
    element is x's own dim at that position, -1 for one element left, which is right only when the
    element counts agree as polynomials. None when that cannot be shown."""
    if None in target:
        return None
    dims, left = [], []
    for k, v in enumerate(target):
        c = v.constant
        if c is not None:
            dims.append(c)  # 0 copies x's dim and -1 infers, as in the run-time form
        elif k < x.ndim and x.dims[k].sym == v:
            dims.append(0)
        else:
            dims.append(-1)
            left.append(v)
    if dims.count(-1) > 1:
        return None
    if left:
        have = [dim_sym(d) for d in x.dims]
        want = [dim_sym(x.dims[k]) if d == 0 else left[0] if d == -1 else Sym.const(d) for k, d in enumerate(dims)]
        if None in have or None in want or product(have) != product(want):
            return None
    return tuple(dims)


def product(values: Sequence[Sym]) -> Sym:
    out = Sym.const(1)
    for v in values:
        out = out * v
    return out


