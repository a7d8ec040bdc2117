"""The gpu target's bias add of a 2-D matmul moves after the reshape that splits its rows.

ONNX's Gemm is 2-D, so an exporter that lowers a Linear to Gemm (GPT-2's Conv1D) flattens the rows
first and restores them after the bias: dot [M, N] -> add(bias [N]) -> reshape [B, S, N]. The
reshape stands between the bias add and what reads the layer's output (GELU, the residual add), so
the add cannot join their pointwise group, and the GEMM's epilogue (gemm_epilogue) cannot take the
group: GPT-2's layers ran a bias GEMM, then a GELU kernel, then a residual-add kernel. Moved, the
form is the one a MatMul + Add export has (dot -> reshape -> add), which fuse_pointwise and the
GEMM patterns take:

    dot(A, W) -> add(., bias) -> reshape(B, S, N)     ->     dot(A, W) -> reshape(B, S, N) -> add(., bias)

Legality: the add's only reader is the reshape; the reshape keeps N as its last dim (it splits or
merges rows only), so each element meets the same bias element either way; the other operand is a
constant that varies along the last axis alone (merge_sibling_dots.bias_of). The values are the same
bits: the same additions of the same operands. Runs before merge_sibling_dots (with the dead-code
pass between: the moved-from add still reads the dot until it is removed), whose tails take the
moved form too.
"""

from __future__ import annotations

from ...ir import provenance
from ...ir.module import Module
from ...ir.shape import Shape
from ...ops.movement import Reshape
from ...passes.constants import materialize
from .merge_sibling_dots import bias_of, single_reader


def bias_after_reshape(module: Module) -> bool:
    changed = False
    for r in list(module):
        if r.op.name != "reshape" or not isinstance(r.shape, Shape) or r.shape.is_dynamic:
            continue
        add = r.inputs[0]
        dot = next((x for x in add.inputs if x.op.name == "dot"), None) if add.op.name == "add" else None
        if dot is None or single_reader(add) is not r or not isinstance(dot.shape, Shape) or dot.shape.ndim != 2:
            continue
        n = dot.shape.lens[-1]
        bias = bias_of(add, dot, n) if r.shape.lens[-1] == n else None
        if bias is None:
            continue
        value, first = bias
        rows = module.insert(r, Reshape(dims=r.shape.lens), dot)
        b = materialize(module, r, value.reshape((1,) * (r.shape.ndim - 1) + (n,)), r.shape)
        moved = module.insert(r, add.op, *((b, rows) if first else (rows, b)))
        rows.origin = moved.origin = provenance.merged(add.origin, r.origin)
        module.replace(r, moved)
        changed = True
    return changed
