"""Shape arithmetic on symbolic dims, folded at compile time.

Invariant established: an integer shape value known in the inputs' named dims (ir/symbolic.py) --
`shape_of` of a tensor whose dims are fixed or named, and gather / slice / concat / unsqueeze /
squeeze / reshape / broadcast / add / sub / mul / floor-div on such values -- no longer decides a
shape at run time: a value that is all numbers becomes a literal; `reshape_dynamic(x, value)`
becomes `reshape_dynamic[dims](x)` (0 where the dim is x's own, -1 for the one dim left, checked by
the element counts' polynomials), whose output dims carry their symbols; `slice_dynamic(x, ...)`
that keeps every element (x[0:Shape(x)[k]]) becomes x. What stays is what only a run can know
(a Range over a symbolic count, data-dependent sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..ir.module import Instruction, Module
from ..ir.op import make_op
from ..ir.shape import Shape
from ..ir.symbolic import Sym

Value = tuple[Sym, ...]  # a shape value's elements in row-major order
SMALL = 64  # shape values are short vectors: longer integer tensors are data


def _dim_sym(d) -> Sym | None:
    return Sym.const(d.min) if d.is_fixed else d.sym


def _literal(ins: Instruction, args: list[Value]) -> Value | None:
    v = ins.literal
    if v.dtype.kind not in "iu" or v.size > SMALL:
        return None
    return tuple(Sym.const(int(n)) for n in v.reshape(-1))


def _shape_of(ins: Instruction, args: list[Value]) -> Value | None:
    dims = [_dim_sym(d) for d in ins.inputs[0].shape.dims[ins.op.start: ins.op.end]]
    return None if any(d is None for d in dims) else tuple(dims)


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
        out = tuple(fn(x, y) for x, y in zip(a, b, strict=True))
        return None if any(v is None for v in out) else out
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


def symbolic_values(module: Module) -> dict[int, Value]:
    """Instruction uid -> its value in symbols, for the integer shape values that have one."""
    known: dict[int, Value] = {}
    for ins in module:
        rule = VALUE.get(ins.op.name)
        s = ins.shape
        if rule is None or not isinstance(s, Shape) or s.dtype.np.kind not in "iu" or s.is_dynamic or s.elements > SMALL:
            continue
        if ins.op.name == "shape_of" or ins.is_literal:
            args = []
        elif ins.op.name == "gather":  # the indices are read as a literal
            if ins.inputs[0].uid not in known:
                continue
            args = [known[ins.inputs[0].uid]]
        elif all(i.uid in known for i in ins.inputs):
            args = [known[i.uid] for i in ins.inputs]
        else:
            continue
        value = rule(ins, args)
        if value is not None and len(value) == s.elements:
            known[ins.uid] = value
    return known


# -- the rewrites ------------------------------------------------------------------------------------
def _as_literal(m: Module, ins: Instruction, value: Value) -> Instruction | None:
    consts = [v.constant for v in value]
    if ins.is_literal or None in consts:
        return None
    return m.add_literal(np.array(consts, dtype=ins.shape.dtype.np).reshape(ins.shape.lens))


def _reshape(m: Module, ins: Instruction, known: dict[int, Value]) -> Instruction | None:
    if len(ins.inputs) != 2 or ins.inputs[1].uid not in known or ins.op.allowzero:
        return None
    x, target = ins.inputs[0], known[ins.inputs[1].uid]
    dims, left = [], []
    for k, v in enumerate(target):
        c = v.constant
        if c is not None:
            dims.append(c)  # 0 copies x's dim and -1 infers, as in the run-time form
        elif k < x.shape.ndim and x.shape.dims[k].sym == v:
            dims.append(0)
        else:
            dims.append(-1)
            left.append(v)
    if dims.count(-1) > 1:
        return None
    if left:  # the inferred dim is the named one only if the element counts agree as polynomials
        have = [_dim_sym(d) for d in x.shape.dims]
        want = [_dim_sym(x.shape.dims[k]) if d == 0 else left[0] if d == -1 else Sym.const(d)
                for k, d in enumerate(dims)]
        if None in have or None in want or _prod(have) != _prod(want):
            return None
    return m.insert(ins, make_op("reshape_dynamic", dims=tuple(dims), allowzero=False), x)


def _prod(values: list[Sym]) -> Sym:
    out = Sym.const(1)
    for v in values:
        out = out * v
    return out


def _slice_all(m: Module, ins: Instruction, known: dict[int, Value]) -> Instruction | None:
    x, *bounds = ins.inputs
    if any(b.uid not in known for b in bounds):
        return None
    starts, ends, axes, steps = (known[b.uid] for b in bounds)
    if any(v.constant is None for v in starts + axes + steps):
        return None
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = a.constant + x.shape.ndim if a.constant < 0 else a.constant
        if not 0 <= a < x.shape.ndim or s.constant != 0 or st.constant != 1:
            return None
        d = x.shape.dims[a]
        if e != _dim_sym(d) and (e.constant is None or e.constant < (d.max if d.max is not None else math.inf)):
            return None  # not provably to the end
    return x


REWRITE: dict[str, Callable[[Module, Instruction, dict[int, Value]], Instruction | None]] = {
    "reshape_dynamic": _reshape,    # reshape_dynamic(x, [batch, seq, 12, 64]) -> reshape_dynamic[0,0,12,64](x)
    "slice_dynamic": _slice_all,    # x[0:Shape(x)[k]] -> x
}


def fold_symbolic_shapes(module: Module) -> bool:
    known = symbolic_values(module)
    changed = False
    for ins in list(module):
        if not ins.users:
            continue
        rule = REWRITE.get(ins.op.name)
        if rule is not None:
            new = rule(module, ins, known)
        elif ins.uid in known:
            new = _as_literal(module, ins, known[ins.uid])
        else:
            new = None
        if new is not None and new is not ins:
            module.replace(ins, new)
            changed = True
    return changed
