"""Rewrites a GatherElements whose indices vary only along its axis into a Gather of one index
vector: a detector picking its top-k boxes (`gather_elements(boxes [1, N, 4], broadcast(idx [1, k,
1]) [1, k, 4], axis=1)`) or their labels (`[1, N]` by `[1, k]`). Gather by run-time indices is a
native-program record (native_program.gather: the indices range-checked in C); GatherElements was a
numpy step with an index grid (ssd_detector: two such steps, ~50 us of its 0.22 ms). Invariant:
values and errors unchanged: out[..., j, ...] = data[..., idx[j], ...] either way, and an index out
of range is an error in both."""

from __future__ import annotations

from ....ir.module import Instruction, Module
from ....ir.op import make_op
from ....ir.shape import Shape
from ....passes.manager import rewrite_each


def _index_line(idx: Instruction, axis: int, rank: int) -> Instruction | None:
    """The instruction holding `idx`'s values with every axis but `axis` of length 1 (`idx` itself,
    or what a broadcast expanded), or None."""
    src = idx.inputs[0] if idx.op.name == "broadcast" else idx
    if not isinstance(src.shape, Shape) or src.shape.is_dynamic:
        return None
    lens = (1,) * (rank - src.shape.ndim) + tuple(src.shape.lens)  # a broadcast aligns from the right
    if len(lens) != rank or any(n != 1 for d, n in enumerate(lens) if d != axis):
        return None
    return src


def _rewrite(module: Module, ins: Instruction) -> bool:
    if ins.op.name != "gather_elements":
        return False
    data, idx = ins.inputs
    if not all(isinstance(v.shape, Shape) and not v.shape.is_dynamic for v in (data, idx)):
        return False
    axis, rank = ins.op.axis, data.shape.ndim
    if any(a != b for d, (a, b) in enumerate(zip(data.shape.lens, idx.shape.lens)) if d != axis):
        return False  # the indices cover part of another axis: not a take
    src = _index_line(idx, axis, rank)
    if src is None:
        return False
    line = module.insert(ins, make_op("reshape", dims=(idx.shape.lens[axis],)), src)
    module.replace(ins, module.insert(ins, make_op("gather", axis=axis), data, line))
    return True


def gather_elements_as_gather(module: Module) -> bool:
    return rewrite_each(module, _rewrite)
