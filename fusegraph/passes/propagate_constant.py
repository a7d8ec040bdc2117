"""Evaluates instructions whose inputs are all constants and replaces them by constants.

Pointwise ops over broadcast constants are evaluated on the small values and broadcast again, so
constants stay as small as their information. Other ops over constants (literals, or literals
broadcast: a constant-of-shape fill, a constant that gained leading 1-axes) are evaluated on the
full values, unless their result is much larger than the literals it comes from: folding those would
trade a few bytes for megabytes of weights. A result that is one value repeated stays a broadcast
scalar. (Swin's shifted-window mask, a fill scattered into and then reshaped, transposed and
compared, is such a chain: folded, its dozens of run-time steps are gone.)
"""

from __future__ import annotations

import numpy as np

from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.shape import Shape
from .constants import expanded, materialize, small_constant

GROWTH_LIMIT_BYTES = 1 << 20   # a result may exceed its inputs' bytes by this much ...
GROWTH_FACTOR = 4              # ... or by this factor, whichever is larger
EXPAND_LIMIT_BYTES = 1 << 26   # broadcast constants are expanded to evaluate an op on them up to this size
NEVER_FOLD = frozenset({"broadcast", "broadcast_like"})


def _foldable(ins: Instruction) -> bool:
    op = ins.op
    # a broadcast of a literal is already the smallest form of that constant
    return (op.kind not in (OpKind.BUILTIN, OpKind.CONTROL) and op.name not in NEVER_FOLD and not ins.module_args and op.deterministic
            and bool(ins.inputs) and bool(ins.users) and isinstance(ins.shape, Shape) and not ins.shape.is_dynamic)


def _fold_pointwise(module: Module, ins: Instruction) -> Instruction | None:
    values = [small_constant(i) for i in ins.inputs]
    if any(v is None for v in values) or all(i.is_literal for i in ins.inputs):
        return None
    small = np.broadcast_arrays(*values)
    result = np.asarray(ins.op.compute([np.array(v, order="C") for v in small]))
    return materialize(module, ins, result, ins.shape)


def _smallest(module: Module, ins: Instruction, value: np.ndarray) -> Instruction:
    """`value` as a literal, or a scalar literal broadcast when every element is the same."""
    flat = value.reshape(-1)
    if flat.size > 1 and bool(np.all(flat == flat[0])):
        return materialize(module, ins, flat[0], ins.shape)
    return module.add_literal(value)


def propagate_constant(module: Module, keep: frozenset[str] = frozenset()) -> bool:
    """Fold what is constant; instructions of the ops named in `keep` stay as they are."""
    changed = False
    for ins in module:
        if not _foldable(ins) or ins.op.name in keep:
            continue
        if ins.op.kind is OpKind.POINTWISE:
            new = _fold_pointwise(module, ins)
            if new is not None:
                module.replace(ins, new)
                changed = True
                continue
        small = [small_constant(i) for i in ins.inputs]
        if any(v is None for v in small):
            continue
        in_bytes = sum(v.nbytes for v in small)
        if ins.shape.bytes > max(GROWTH_FACTOR * in_bytes, in_bytes + GROWTH_LIMIT_BYTES):
            continue
        if sum(i.shape.bytes for i in ins.inputs if not i.is_literal) > EXPAND_LIMIT_BYTES:
            continue
        full = [v if i.is_literal else expanded(v, i.shape.lens) for v, i in zip(small, ins.inputs)]
        value = np.array(ins.op.compute(full), order="C")  # keeps 0-d 0-d
        if value.dtype != ins.shape.dtype.np or value.shape != ins.shape.lens:
            value = value.astype(ins.shape.dtype.np).reshape(ins.shape.lens)
        module.replace(ins, _smallest(module, ins, value))
        changed = True
    return changed
