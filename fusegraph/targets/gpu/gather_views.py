"""The gpu target's gathers at literal, evenly stepped indices become slices: views.

torch's MultiheadAttention export splits its packed q, k, v in-projection with three Gathers of the
scalar indices 0, 1, 2 on a leading axis, and a ViT takes its class token with Gather index 0. Each
gather is a copy (an index_select, a wrap of the index, a copy into the arena: 37 steps and a
quarter of ViT-B/16's time on an H200, issue 23), while `data[i]` is a slice the plan makes a view
of its input, free, or folded into the reader's copy when a reshape after it needs one.

    gather(x, i, axis)              -> squeeze(slice(x, i:i+1), axis)      (a scalar index)
    gather(x, [i, i+s, ...], axis)  -> [reshape](slice(x, i:...:s))        (s >= 1)

Legality: float data (integer gathers are mostly shape arithmetic, which fold_symbolic_shapes reads
as gathers), the index a literal (negative entries count from the end), every entry in range (else
the gather keeps its run-time error), its entries stepping by one constant s >= 1.
"""

from __future__ import annotations

import numpy as np

from ...ir.module import Module
from ...ir.shape import Shape
from ...ops.indexing import wrap
from ...ops.movement import Reshape, Slice, Squeeze


def evenly_stepped(idx: np.ndarray, n: int) -> tuple[int, int, int] | None:
    """(start, end, step) of a slice taking exactly the wrapped `idx` (flattened), or None."""
    flat = wrap(idx, n).reshape(-1)
    if flat.size == 0 or (flat < 0).any() or (flat >= n).any():
        return None
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if step < 1 or not np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        return None
    start = int(flat[0])
    return start, start + step * (flat.size - 1) + 1, step


def gather_views(module: Module) -> bool:
    changed = False
    for ins in list(module):
        if ins.op.name != "gather" or not ins.inputs[1].is_literal:
            continue
        data, index = ins.inputs
        if not (isinstance(data.shape, Shape) and isinstance(ins.shape, Shape)) or data.shape.is_dynamic:
            continue
        if not data.shape.dtype.is_float:  # integer gathers are shape arithmetic: fold_symbolic_shapes' form
            continue
        axis = ins.op.axis
        idx = np.asarray(index.literal)
        bounds = evenly_stepped(idx, data.shape.lens[axis])
        if bounds is None:
            continue
        start, end, step = bounds
        new = module.insert(ins, Slice(axes=(axis,), starts=(start,), ends=(end,), steps=(step,)), data)
        if idx.ndim == 0:
            new = module.insert(ins, Squeeze(axes=(axis,)), new)
        elif idx.ndim > 1:
            new = module.insert(ins, Reshape(dims=tuple(ins.shape.lens)), new)
        module.replace(ins, new)
        changed = True
    return changed
