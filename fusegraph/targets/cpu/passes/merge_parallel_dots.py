"""Merges products of one input with several constant weight matrices into one product with the
matrices side by side (a transformer's Q, K and V projections): one wider matmul keeps both cores
busy where three narrow ones do not (BERT-base: 3 x 128x768x768 in 1.93 ms, merged 1.53 ms; MiniLM
0.65 -> 0.45 ms, 2 threads). Each former product becomes a slice of the merged result's columns.

Merged are `dot`s and `dot_epilogue`s of the same input with 2-D literal weights, no residual and
the same activation chain. Invariant: values unchanged (the same products, bias and activations per
column)."""

from __future__ import annotations

import numpy as np

from ....ir import provenance
from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ops.movement import Reshape, Slice
from ....passes.eliminate_dead_code import eliminate_dead_code
from ..ops import DotEpilogue
from ..shared import computed


def _key(ins: Instruction) -> tuple | None:
    """What products must share to be merged, or None when `ins` is not mergeable."""
    op = ins.op
    if op.name not in ("dot", "dot_epilogue") or ins.shape.dtype != DType.float32 or ins.shape.is_dynamic:
        return None
    a, w = ins.inputs[:2]
    if not w.is_literal or w.shape.ndim != 2 or a.shape.is_dynamic or getattr(op, "n_residual", 0):
        return None
    return a.uid, getattr(op, "activations", ())


def _bias(ins: Instruction) -> np.ndarray:
    n = ins.inputs[1].shape.lens[1]
    has = getattr(ins.op, "has_bias", False)
    return ins.inputs[2].literal.astype(np.float32) if has else np.zeros(n, np.float32)


def _merge(module: Module, group: list[Instruction]) -> None:
    order = {x.uid: k for k, x in enumerate(module.instructions)}
    group.sort(key=lambda i: order[i.uid])
    first, a = group[0], group[0].inputs[0]
    ws = [i.inputs[1].literal for i in group]
    weights = computed("concatenate axis 1", ws, lambda: np.concatenate(ws, axis=1))
    has_bias = any(getattr(i.op, "has_bias", False) for i in group)
    extra = [module.add_literal(np.concatenate([_bias(i) for i in group]))] if has_bias else []
    op = DotEpilogue(has_bias=has_bias, activations=_key(first)[1])
    merged = module.insert(first, op, a, module.add_literal(weights), *extra)
    merged.origin = provenance.merged(*(i.origin for i in group))  # one product computes every node
    offset, last = 0, merged.shape.ndim - 1
    for ins in group:
        n = ins.inputs[1].shape.lens[1]
        part = module.insert(first, Slice(axes=(last,), starts=(offset,), ends=(offset + n,), steps=(1,)), merged)
        if part.shape.lens != ins.shape.lens:  # the reshape a dot_epilogue carried (out_lens)
            part = module.insert(first, Reshape(dims=ins.shape.lens), part)
        module.replace(ins, part)
        offset += n


def merge_parallel_dots(module: Module) -> bool:
    eliminate_dead_code(module)  # products the epilogue fusions left behind must not be merged
    groups: dict[tuple, list[Instruction]] = {}
    for ins in module:
        key = _key(ins)
        if key is not None and ins.users:
            groups.setdefault(key, []).append(ins)
    merged = [g for g in groups.values() if len(g) > 1]
    for group in merged:
        _merge(module, group)
    return bool(merged)
