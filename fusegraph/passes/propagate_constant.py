"""Evaluates instructions whose inputs are all literals and replaces them by literals.

Results much larger than their inputs (broadcasts of a scalar, constant-of-shape fills) stay
unevaluated: folding them would trade a few bytes for megabytes of weights.
"""

from __future__ import annotations

import numpy as np

from ..ir.module import Module
from ..ir.op import OpKind
from ..ir.shape import Shape

GROWTH_LIMIT_BYTES = 1 << 20   # a result may exceed its inputs' bytes by this much ...
GROWTH_FACTOR = 4              # ... or by this factor, whichever is larger


def propagate_constant(module: Module) -> bool:
    changed = False
    for ins in module:
        op = ins.op
        if (op.kind in (OpKind.BUILTIN, OpKind.CONTROL) or ins.module_args or not op.deterministic
                or not ins.inputs or not ins.users or not all(i.is_literal for i in ins.inputs)
                or not isinstance(ins.shape, Shape) or ins.shape.is_dynamic):
            continue
        in_bytes = sum(i.literal.nbytes for i in ins.inputs)
        if ins.shape.bytes > max(GROWTH_FACTOR * in_bytes, in_bytes + GROWTH_LIMIT_BYTES):
            continue
        value = np.ascontiguousarray(op.compute([i.literal for i in ins.inputs]))
        if value.dtype != ins.shape.dtype.np or value.shape != ins.shape.lens:
            value = value.astype(ins.shape.dtype.np).reshape(ins.shape.lens)
        lit = module.add_literal(value)
        module.replace(ins, lit)
        changed = True
    return changed
