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
from ..ir.symbolic_values import VALUE, Value, dim_sym, reshape_dims, value_of


# -- the rewrites ------------------------------------------------------------------------------------
def _as_literal(m: Module, ins: Instruction, value: Value) -> Instruction | None:
    consts = [None if v is None else v.constant for v in value]
    if ins.is_literal or None in consts:
        return None
    return m.add_literal(np.array(consts, dtype=ins.shape.dtype.np).reshape(ins.shape.lens))


def _reshape(m: Module, ins: Instruction, memo: dict) -> Instruction | None:
    if len(ins.inputs) != 2 or ins.op.allowzero:
        return None
    x, target = ins.inputs[0], value_of(ins.inputs[1], memo)
    dims = None if target is None else reshape_dims(x.shape, target)
    return None if dims is None else m.insert(ins, make_op("reshape_dynamic", dims=dims, allowzero=False), x)


def _slice_all(m: Module, ins: Instruction, memo: dict) -> Instruction | None:
    x, *bounds = ins.inputs
    values = [value_of(b, memo) for b in bounds]
    if any(v is None for v in values):
        return None
    starts, ends, axes, steps = values
    if any(v is None or v.constant is None for v in starts + axes + steps) or None in ends:
        return None
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = a.constant + x.shape.ndim if a.constant < 0 else a.constant
        if not 0 <= a < x.shape.ndim or s.constant != 0 or st.constant != 1:
            return None
        d = x.shape.dims[a]
        if e != dim_sym(d) and (e.constant is None or e.constant < (d.max if d.max is not None else math.inf)):
            return None  # not provably to the end
    return x


REWRITE: dict[str, Callable[[Module, Instruction, dict], Instruction | None]] = {
    "reshape_dynamic": _reshape,    # reshape_dynamic(x, [batch, seq, 12, 64]) -> reshape_dynamic[0,0,12,64](x)
    "slice_dynamic": _slice_all,    # x[0:Shape(x)[k]] -> x
}


def fold_symbolic_shapes(module: Module) -> bool:
    memo: dict = {}
    changed = False
    for ins in list(module):
        if not ins.users:
            continue
        rule = REWRITE.get(ins.op.name)
        if rule is not None:
            new = rule(module, ins, memo)
        else:
            value = value_of(ins, memo) if ins.op.name in VALUE else None
            new = None if value is None else _as_literal(module, ins, value)
        if new is not None and new is not ins:
            module.replace(ins, new)
            changed = True
    return changed
