"""The gpu target's pointwise op before a transpose into a reduction moves after the transpose, so it
joins the reduction's kernel:

    x -> add(., bias) -> transpose -> layer norm     ->     x -> transpose -> add(., bias') -> layer norm

ConvNeXt's blocks run a depthwise convolution (its bias an add in the IR), permute to NHWC and layer
norm over the channels. The permute stood between the bias add and the norm, so fuse_reduce could not
take the add into the norm's prologue: the add ran as its own kernel, a write and a read of the whole
activation (22 kernels, 89 us a call at batch 32 on an H200). Moved, the add reads the transposed view
of the convolution's output, which is a view on the gpu target (no copy).

Legality: a pointwise op computes each element from the same-index elements of its operands, so it
commutes with any permutation of the index: transpose(f(a, c)) == f(transpose(a), transpose(c)). The
op's only reader is the transpose; its operands all have its lens (the IR's broadcasts are explicit);
constants are laid out anew in the transposed order. The values are the same bits. Only where the
transpose feeds a reduction, directly or through one pointwise op (the move's purpose); repeated, so a chain of such ops moves whole.
"""

from __future__ import annotations

import numpy as np

from ...ir import provenance
from ...ir.module import Instruction, Module
from ...ir.op import OpKind
from ...ir.shape import Shape
from ...ops.movement import Transpose
from ...passes.constants import materialize, small_constant
from ...passes.fuse_reduce import NORMALIZATIONS, REDUCTIONS
from .merge_sibling_dots import single_reader


def pointwise_after_transpose(module: Module) -> bool:
    changed = False
    for t in list(module):
        work, chained = [t], False
        while work:
            t = work.pop()
            if _movable(t, chained):
                work += _move(module, t)
                changed = True
            chained = True
    return changed


def _movable(t: Instruction, chained: bool) -> bool:
    """`chained`: t is the transpose a move just made, read by the moved op."""
    if t.module is None or t.op.name != "transpose" or not isinstance(t.shape, Shape) or t.shape.is_dynamic:
        return False
    f = t.inputs[0]
    if f.op.kind is not OpKind.POINTWISE or single_reader(f) is not t or f.module_args:
        return False
    if not chained and not _feeds_reduction(t):
        return False
    return all(isinstance(x.shape, Shape) and x.shape.lens == f.shape.lens for x in f.inputs)


def _feeds_reduction(t: Instruction) -> bool:
    """A reduction reads `t`, directly or through one pointwise op (the fp16 program's conversion
    to float32 before a layer norm's moments)."""
    def reduces(u: Instruction) -> bool:
        return u.op.name in REDUCTIONS or u.op.name in NORMALIZATIONS
    return any(reduces(u) or (u.op.kind is OpKind.POINTWISE and any(reduces(v) for v in u.users)) for u in t.users)


def _move(module: Module, t: Instruction) -> list[Instruction]:
    """Rewrites transpose(f(..)) as f(transpose(..)); returns the new transposes of f's data operands
    (where the ops of a chain may move after them in turn)."""
    f, perm = t.inputs[0], t.op.perm
    operands: list[Instruction] = []
    moved: list[Instruction] = []
    for x in f.inputs:
        value = small_constant(x)
        if value is not None:
            operands.append(materialize(module, t, np.transpose(value, perm), Shape.of(x.shape.dtype, t.shape.lens)))
            continue
        moved.append(module.insert(t, Transpose(perm=perm), x))
        moved[-1].origin = t.origin
        operands.append(moved[-1])
    new = module.insert(t, f.op, *operands)
    new.origin = provenance.merged(f.origin, t.origin)
    module.replace(t, new)
    module.remove(t)  # at once: f's operands must show their true readers to the next move
    module.remove(f)
    return moved
