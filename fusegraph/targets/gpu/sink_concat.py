"""The gpu target's pointwise ops over a concat become a concat of pointwise ops over its pieces.

Rotary embeddings (RoPE: LLaMA, Mistral, Qwen, GPT-NeoX...) compute q * cos + cat(-q2, q1) * sin.
Step by step that is three kernels per q and per k: the negation (written into the concat's buffer),
the copy of q1 into it, then the fused multiply-adds reading the concat. Split along the concat axis,
each half is one pointwise body over views, q1 * cos1 - q2 * sin1 and q2 * cos2 + q1 * sin2, which
fuse_pointwise makes one kernel each, written into the result's concat in place: two kernels.

    P(concat(I1, I2, ...), O, ...)  ->  concat(P(I1, O[piece 1], ...), P(I2, O[piece 2], ...), ...)
    slice(Q(A, B, ...))             ->  Q(slice(A), slice(B), ...)   when every reader of Q is a slice

Legality. Both are exact: the same scalar ops on the same elements. The first applies when the
concat's only reader is a pointwise op P of the concat's lens (not a model output) and every piece is
a pointwise op or a view whose only reader is the concat: each piece then fuses into its P, so a
program has one kernel fewer (pieces computed by a GEMM or a convolution are written into the concat
in place today, and splitting P over them would add kernels: DenseNet's concat -> batch-norm -> ReLU
stays whole). Each other operand of P is read through a slice of the piece's range (a view; the
frontend's explicit broadcasts make every operand P's lens). The second takes a pointwise op whose
readers are all slices (the first leaves the other operands so) into each slice's range, so the
pieces fuse with it rather than read its whole result from memory.
"""

from __future__ import annotations

from ...ir.module import Instruction, Module
from ...ir.shape import Shape
from ...ops.movement import Slice
from ...passes.fuse_pointwise import fusible
from .matching import is_output
from .view_chain import CHAIN_OPS


def _same_lens(x: Instruction) -> bool:
    """Every operand of `x` has its lens (the frontend broadcasts explicitly), so a slice of each
    takes the same elements as the slice of `x`."""
    return all(isinstance(a.shape, Shape) and a.shape.lens == x.shape.lens for a in x.inputs)


def _only_reader(x: Instruction, reader: Instruction) -> bool:
    return all(u is reader for u in x.users) and not is_output(x)


def _sinkable(concat: Instruction) -> Instruction | None:
    """The pointwise reader `concat` can sink below, or None."""
    if concat.op.name != "concat" or len(concat.users) != 1:
        return None
    reader = concat.users[0]  # static when fusible, so is the concat of its lens
    if not (fusible(reader) and _same_lens(reader) and _only_reader(concat, reader)):
        return None
    pieces_fuse = all((fusible(x) or x.op.name in CHAIN_OPS) and _only_reader(x, concat) for x in concat.inputs)
    return reader if pieces_fuse and len(set(concat.inputs)) == len(concat.inputs) else None


def _slice(module: Module, before: Instruction, x: Instruction, axis: int, start: int, end: int) -> Instruction:
    return module.insert(before, Slice(axes=(axis,), starts=(start,), ends=(end,), steps=(1,)), x)


def _sink(module: Module, concat: Instruction, reader: Instruction) -> None:
    axis, start, parts = concat.op.axis, 0, []
    for piece in concat.inputs:
        end = start + piece.shape.lens[axis]
        args = [piece if x is concat else _slice(module, reader, x, axis, start, end) for x in reader.inputs]
        parts.append(module.insert(reader, reader.op, *args))
        start = end
    module.replace(reader, module.insert(reader, concat.op, *parts))
    module.remove(reader)
    module.remove(concat)


def _hoistable(x: Instruction) -> bool:
    """A pointwise op whose readers are all unit-step slices, each read by one pointwise op (which the
    slice of it then fuses into: a slice read by a GEMM or a convolution would be a kernel of its own,
    as YOLO's split of one activation into three convolutions' inputs)."""
    if not (fusible(x) and _same_lens(x) and x.users and not is_output(x)):
        return False
    return all(u.op.name == "slice" and all(s == 1 for s in u.op.steps) and len(u.users) == 1
               and fusible(u.users[0]) and not is_output(u) for u in x.users)


def _hoist(module: Module, x: Instruction) -> None:
    for s in list(dict.fromkeys(x.users)):
        args = [module.insert(s, s.op, a) for a in x.inputs]
        module.replace(s, module.insert(s, x.op, *args))
        module.remove(s)
    module.remove(x)


def sink_concat(module: Module) -> bool:
    changed = False
    progress = True
    while progress:  # a sunk concat may meet the next pointwise reader; its slices, pointwise producers
        progress = False
        for ins in list(module):
            if ins.module is None:  # removed by an earlier rewrite of this round
                continue
            reader = _sinkable(ins)
            if reader is not None:
                _sink(module, ins, reader)
                progress = True
            elif _hoistable(ins):
                _hoist(module, ins)
                progress = True
        changed |= progress
    return changed
