"""Which matmuls the gpu target may run on the 2:4 sparse tensor cores, decided on the IR alone (no
torch, so CI tests it).

A dot qualifies when its weight is a constant [K, N] in float16 or bfloat16 with at most two nonzeros
in every four consecutive entries along K (fusegraph.is_2_4: what fusegraph.prune_2_4 makes), of the
activations' type, with K and N multiples of 16 (cuSPARSELt's smallest sparse tile for 16-bit types).
Its step then gets a sparse kind, which lower_sparse.py times against the dense kernel at compile:

  a plain dot               -> sparse_dot            (cuSPARSELt, or cuBLAS)
  gemm_bias  (dot + bias)   -> sparse_gemm_bias      (cuSPARSELt's bias epilogue, or cuBLASLt's)
  gemm_epilogue (+ reader)  -> sparse_gemm_epilogue  (cuSPARSELt then the reader's Triton kernel,
                                                      or the dense epilogue GEMM, itself autotuned)
"""

from __future__ import annotations

import numpy as np

from ...ir.module import Instruction, Module
from ...ir.shape import Shape
from ...sparsity import is_2_4

SPARSE_TYPES = ("float16", "bfloat16")  # cuSPARSELt's floating types (float32 has no 2:4 path there)
MIN_TILE = 16  # K and N multiples of this: cuSPARSELt's sparse-operand minimum for 16-bit types
SPARSE_KINDS = {"gemm_bias": "sparse_gemm_bias", "gemm_epilogue": "sparse_gemm_epilogue"}


def sparse_weight(dot: Instruction) -> np.ndarray | None:
    """The 2:4 constant weight [K, N] of `dot` when the sparse kernel can take it, else None."""
    if dot.op.name != "dot" or not isinstance(dot.shape, Shape) or dot.shape.dtype.value not in SPARSE_TYPES:
        return None
    a, w = dot.inputs
    if not w.is_literal or w.shape.ndim != 2 or a.shape.ndim < 2 or a.shape.dtype != w.shape.dtype:
        return None
    if any(x.shape.is_dynamic for x in (dot, a, w)):
        return None
    k, n = w.shape.lens
    if k % MIN_TILE or n % MIN_TILE:
        return None
    value = np.asarray(w.literal)
    if (np.count_nonzero(value[:4], axis=0) > 2).any():
        return None  # dense weights, most of them: told by their first four rows, not a pass over all
    return value if is_2_4(value) else None


def mark_sparse(module: Module, groups: dict) -> None:
    """Give the steps of `module`'s qualifying dots their sparse kinds, in `groups` (patterns.py's
    match: root uid -> Group): a dot no pattern took becomes a sparse_dot group of its own."""
    from .patterns import Group

    member_of = {m.uid: g for g in groups.values() for m in g.members}
    for ins in module.instructions:
        if ins.op.name != "dot" or sparse_weight(ins) is None:
            continue
        g = member_of.get(ins.uid)
        if g is None:
            groups[ins.uid] = Group("sparse_dot", ins, [ins], list(ins.inputs), {})
        elif g.kind in SPARSE_KINDS:
            g.kind = SPARSE_KINDS[g.kind]
