"""DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix -> ops/signal.py.

Windows and mel matrices whose inputs are constants become literals, computed here by the op's own
reference; otherwise the op computes them at run time. Lengths that decide output shapes (the DFT
axis, the STFT frame step) become attributes when they are constants.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ir.op import make_op
from ..registry import converter
from .misc import scalar_const


def fold(ctx, op, *inputs):
    """`op` over `inputs`: a literal when every input is a constant, else an instruction."""
    values = [ctx.const(i) for i in inputs]
    if all(v is not None for v in values):
        return ctx.literal(op.compute(values))
    return ctx.add(op, *inputs)


def _positive(ctx, value, what: str) -> int:
    if value is None or int(value) < 1:
        raise ctx.error(f"{what} must be a positive constant, got {value}")
    return int(value)


def _is_complex(x) -> bool:
    return x.shape.dims[-1].min == 2


# -- DFT --------------------------------------------------------------------------------------------
def _dft(ctx, node, x, length_in, axis: int | None, axis_in=None):
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if x.shape.ndim < 2:
        raise ctx.error(f"input must be [..., 1|2], got {x.shape}")
    if onesided and not inverse and _is_complex(x):
        raise ctx.error("a one-sided forward DFT needs a real input ([..., 1])")
    length = None
    if length_in is not None:  # the transform size decides the output shape
        length = _positive(ctx, scalar_const(ctx, length_in, "dft_length"), "dft_length")
    flags = {"length": length, "inverse": inverse, "onesided": onesided}
    if axis is None:  # an axis computed at run time: the op reads it
        return ctx.add("dft", x, ctx.convert(axis_in, DType.int64), axis=None, **flags)
    rank = x.shape.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ctx.error(f"axis {axis} out of range for rank {rank} (the last axis holds real/imaginary)")
    return ctx.add("dft", x, axis=axis % rank, **flags)


@converter("DFT", since=17)
def dft_v17(ctx, node, args):
    x, length_in = (list(args) + [None])[:2]
    return _dft(ctx, node, x, length_in, int(node.attr("axis", 1)))


@converter("DFT", since=20)
def dft_v20(ctx, node, args):
    x, length_in, axis_in = (list(args) + [None, None])[:3]
    if axis_in is None:
        return _dft(ctx, node, x, length_in, -2)
    axis = scalar_const(ctx, axis_in, "axis")
    return _dft(ctx, node, x, length_in, None if axis is None else int(axis), axis_in)


# -- STFT -------------------------------------------------------------------------------------------
def _ones_window(ctx, node, signal, frame_length_in):
    """The rectangular window STFT uses when none is given: frame_length long, or the signal's."""
    if frame_length_in is None:
        n = signal.shape.dims[1]
        if not n.is_fixed:
            raise ctx.error("without a window or frame_length the signal length must be static")
        return ctx.literal(np.ones(n.min, signal.shape.dtype.np))
    n = scalar_const(ctx, frame_length_in, "frame_length")
    if n is not None:
        return ctx.literal(np.ones(_positive(ctx, n, "frame_length"), signal.shape.dtype.np))
    lens = ctx.reshape(ctx.convert(frame_length_in, DType.int64), [1])  # known at run time
    return ctx.add("constant_of_shape", lens, value=1.0, dtype=signal.shape.dtype)


@converter("STFT", since=17)
def stft(ctx, node, args):
    signal, step_in, window, length_in = (list(args) + [None, None])[:4]
    onesided = bool(node.attr("onesided", 1))
    if signal.shape.ndim == 2:  # [batch, length]: real, as torch.stft exports it and ONNX Runtime reads it
        signal = ctx.add("unsqueeze", signal, axes=(2,))
    if signal.shape.ndim != 3:
        raise ctx.error(f"signal must be [batch, length] or [batch, length, 1|2], got {signal.shape}")
    if onesided and _is_complex(signal):
        raise ctx.error("a one-sided STFT needs a real signal ([batch, length, 1])")
    if window is None:
        window = _ones_window(ctx, node, signal, length_in)
    elif length_in is not None:
        n = scalar_const(ctx, length_in, "frame_length")
        if n is not None and window.shape.dims[0].is_fixed and window.shape.dims[0].min != int(n):
            raise ctx.error(f"frame_length {int(n)} differs from the window's length {window.shape.dims[0]}")
    step = scalar_const(ctx, step_in, "frame_step")
    if step is None:  # a step computed at run time: the op reads it
        return ctx.add("stft", signal, window, ctx.convert(step_in, DType.int64), frame_step=None, onesided=onesided)
    return ctx.add("stft", signal, window, frame_step=_positive(ctx, step, "frame_step"), onesided=onesided)


# -- windows and filter banks -------------------------------------------------------------------------
# ONNX window -> its cosine-sum coefficients a_k: w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)
_WINDOWS = {
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 21 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def _window(coefficients):
    def convert(ctx, node, args):
        op = make_op("cosine_window", coefficients=coefficients, periodic=bool(node.attr("periodic", 1)),
                     dtype=DType.from_onnx(node.attr("output_datatype", 1)))
        return fold(ctx, op, args[0])

    return convert


for _onnx, _coefficients in _WINDOWS.items():
    converter(_onnx, since=17)(_window(_coefficients))


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx, node, args):
    op = make_op("mel_weight_matrix", dtype=DType.from_onnx(node.attr("output_datatype", 1)))
    return fold(ctx, op, *args)
