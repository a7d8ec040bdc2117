"""Splits a convolution whose result is only read in channel slices into one convolution per slice
(its weights' and bias's rows): YOLOv8's C2f blocks split their first conv's output in halves,
silero-vad its STFT conv's into real and imaginary parts. Each slice was a copy of a strided view;
now each part is a convolution's own dense output. Invariant: values unchanged; no output channel is
computed twice (the slices do not overlap). Runs before choose_layout, on N, C, *spatial."""

from __future__ import annotations

from ....ir.module import Instruction, Module
from ....ops.movement import slice_len
from ....passes.manager import rewrite_each

SPLITTABLE = frozenset({"convolution", "conv_epilogue"})


def _channel_range(u: Instruction, channels: int) -> tuple[int, int] | None:
    """(start, end) when `u` slices axis 1 with step 1 and nothing else."""
    op = u.op
    if u.op.name != "slice" or op.axes != (1,) or op.steps != (1,):
        return None
    start, end = op.starts[0], op.ends[0]
    return (start, end) if 0 <= start < end <= channels and slice_len(start, end, 1) == end - start else None


def _split(module: Module, conv: Instruction) -> bool:
    op = conv.op
    if op.name not in SPLITTABLE or op.group != 1 or not conv.inputs[1].is_literal or getattr(op, "n_residual", 0):
        return False
    w = conv.inputs[1]
    channels = conv.shape.dims[1].max  # (the output channels: fixed, its spatial dims may not be)
    ranges = [_channel_range(u, channels) for u in conv.users]
    if not ranges or None in ranges or len(conv.users) < 2:
        return False
    covered = sorted(ranges)
    if any(a[1] > b[0] for a, b in zip(covered, covered[1:])):
        return False  # overlapping slices would compute channels twice
    has_bias = getattr(op, "has_bias", False)
    if has_bias and not conv.inputs[2].is_literal:
        return False
    for u, (start, end) in zip(list(conv.users), ranges):
        parts = [module.add_literal(w.literal[start:end].copy())]
        if has_bias:
            parts.append(module.add_literal(conv.inputs[2].literal[start:end].copy()))
        module.replace(u, module.insert(u, op, conv.inputs[0], *parts))
    return True


def split_sliced_conv(module: Module) -> bool:
    return rewrite_each(module, _split)
