"""Folds explicit zero padding of the spatial axes into the padding of the convolution (or
count-including average pooling) that consumes it. After it, no such pad feeds those ops."""

from __future__ import annotations

import dataclasses

from ..ir.module import Instruction, Module
from ..ir.shape import Shape


def _spatial_pads(pad: Instruction) -> tuple[list[int], list[int]] | None:
    op = pad.op
    x = pad.inputs[0].shape
    if op.mode != "constant" or op.value != 0 or not isinstance(x, Shape):
        return None
    r = x.ndim
    begins, ends = list(op.pads[:r]), list(op.pads[r:])
    if any(begins[:2]) or any(ends[:2]):
        return None  # only spatial padding can move into the window
    return begins[2:], ends[2:]


def _accepts_padding(ins: Instruction) -> bool:
    if ins.op.name == "convolution":
        return True
    op = ins.op
    return (ins.op.name == "pooling" and op.mode == "average" and op.count_include_pad
            and not op.global_pool and not op.ceil_mode)


def eliminate_pad(module: Module) -> bool:
    changed = False
    for ins in module:
        if not ins.inputs or ins.inputs[0].op.name != "pad" or not _accepts_padding(ins):
            continue
        pad = ins.inputs[0]
        pads = _spatial_pads(pad)
        if pads is None:
            continue
        nsp = len(pads[0])
        old = list(ins.op.padding) or [0] * (2 * nsp)
        padding = tuple([old[k] + pads[0][k] for k in range(nsp)] + [old[nsp + k] + pads[1][k] for k in range(nsp)])
        new = module.insert(ins, dataclasses.replace(ins.op, padding=padding), pad.inputs[0], *ins.inputs[1:])
        module.replace(ins, new)
        changed = True
    return changed
