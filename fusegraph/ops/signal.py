"""Signal-processing ops: DFT, STFT, cosine-sum windows and the mel filter bank.

Complex tensors are real ones with a trailing dimension of 2 (real, imaginary), as in ONNX; a real
signal has a trailing dimension of 1. References transform in the input's precision (numpy's FFT
in complex64 for float32 and narrower, complex128 for float64), as the ONNX reference does.

Shape rules are written over `Dim`s, so one rule serves static and dynamic inputs: a length read
from an input at run time (a window size, a frame step, a DFT axis) makes the dims it decides
dynamic, bounded where the other inputs bound them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape


class SignalOp(Op):
    kind = OpKind.OPAQUE

    def _fail(self, msg: str, inputs: Sequence[Shape]) -> ShapeError:
        return ShapeError(f"{self.name}: {msg} (inputs {', '.join(map(str, inputs))})")

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs)


def _map_dim(d: Dim, f: Callable[[int], int]) -> Dim:
    """The range of f(n) for n in `d`, f non-decreasing."""
    return Dim(f(d.min), None if d.max is None else f(d.max))


def _scalar(a: np.ndarray, what: str) -> int:
    v = np.asarray(a)
    if v.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


def to_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] real or [..., 2] (real, imaginary) -> a complex array without the last axis, in the
    input's precision (complex64 for float32, float16 and bfloat16)."""
    x = np.asarray(x)
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    z = x[..., 0].astype(ctype)
    if x.shape[-1] == 2:
        z.imag = x[..., 1]
    return z


def from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


# -- DFT --------------------------------------------------------------------------------------------
@register_op
class DFT(SignalOp):
    """The DFT of a real ([..., 1]) or complex ([..., 2]) signal along `axis`.

    `length` is the transform size (the signal is cut or zero-padded to it); None is the signal's
    own: n, or 2(n-1) for the inverse of a one-sided spectrum. Forward + `onesided` keeps the
    n//2+1 non-redundant bins; inverse + `onesided` reads a one-sided spectrum and returns a real
    signal ([..., 1]). axis None: the second input holds it (at run time, ONNX's range
    [-r, -2] or [0, r-2])."""

    name = "dft"
    axis: int | None = 1
    length: int | None = None
    inverse: bool = False
    onesided: bool = False

    def out_len(self, n: int) -> int:
        """The transformed axis' output length for an input length n."""
        if self.inverse and self.onesided:
            return self.length if self.length is not None else 2 * max(n - 1, 0)
        size = self.length if self.length is not None else n
        return size // 2 + 1 if self.onesided and not self.inverse else size

    def compute_shape(self, inputs):
        x = inputs[0]
        if len(inputs) != 1 + (self.axis is None):
            raise self._fail("expects the axis as an input exactly when the axis attribute is None", inputs)
        if x.ndim < 2 or x.dims[-1] not in (Dim.fixed(1), Dim.fixed(2)) or not x.dtype.is_float:
            raise self._fail("expects floats whose last dim is 1 (real) or 2 (complex)", inputs)
        if self.axis is not None and not 0 <= self.axis < x.ndim - 1:
            raise self._fail(f"axis {self.axis} out of range", inputs)
        dims = list(x.dims[:-1])
        for i, d in enumerate(dims):
            out = _map_dim(d, self.out_len)
            if self.axis is None:  # any signal axis may be the transformed one
                out = Dim(min(d.min, out.min), None if None in (d.max, out.max) else max(d.max, out.max))
            if self.axis is None or i == self.axis:
                dims[i] = out
        last = 1 if self.inverse and self.onesided else 2
        return Shape.dynamic(x.dtype, dims + [Dim.fixed(last)])

    def compute(self, args):
        x = np.asarray(args[0])
        rank = x.ndim
        axis = self.axis if self.axis is not None else _scalar(args[1], "axis")
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise ValueError(f"DFT axis {axis} out of range for rank {rank}")
        axis %= rank
        z = to_complex(x)
        n = self.out_len(z.shape[axis]) if self.inverse and self.onesided else self.length
        if self.inverse and self.onesided:
            return np.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
        if self.inverse:
            return from_complex(np.fft.ifft(z, n=n, axis=axis), x.dtype)
        out = np.fft.fft(z, n=n, axis=axis)
        if self.onesided:
            out = np.take(out, np.arange(out.shape[axis] // 2 + 1), axis=axis)
        return from_complex(out, x.dtype)


# -- STFT -------------------------------------------------------------------------------------------
@register_op
class STFT(SignalOp):
    """Short-time Fourier transform of a [batch, length, 1|2] signal: frames of the window's length,
    `frame_step` apart, each multiplied by the window (a 1-D real tensor) and transformed.
    Output [batch, frames, bins, 2], frames = (length - window) // frame_step + 1, bins =
    window // 2 + 1 when `onesided`. frame_step None: the third input holds it (at run time)."""

    name = "stft"
    frame_step: int | None = None
    onesided: bool = True

    def compute_shape(self, inputs):
        if len(inputs) != 2 + (self.frame_step is None):
            raise self._fail("expects the frame step as an input exactly when frame_step is None", inputs)
        x, w = inputs[:2]
        if x.ndim != 3 or x.dims[-1] not in (Dim.fixed(1), Dim.fixed(2)) or w.ndim != 1 or not x.dtype.is_float:
            raise self._fail("expects a float [batch, length, 1|2] signal and a 1-D window", inputs)
        if self.frame_step is not None and self.frame_step < 1:
            raise self._fail(f"frame_step {self.frame_step} must be positive", inputs)
        length, width = x.dims[1], w.dims[0]
        if length.is_fixed and width.is_fixed and self.frame_step is not None:
            n_frames = Dim.fixed(max((length.min - width.min) // self.frame_step + 1, 0))
        else:  # at most one frame per sample past the first window (a step of 1)
            upper = None if length.max is None else max(length.max - width.min + 1, 0)
            n_frames = Dim(0, upper)
        bins = _map_dim(width, lambda n: n // 2 + 1) if self.onesided else width
        return Shape.dynamic(x.dtype, [x.dims[0], n_frames, bins, Dim.fixed(2)])

    def compute(self, args):
        x, w = np.asarray(args[0]), np.asarray(args[1])
        step = self.frame_step if self.frame_step is not None else _scalar(args[2], "frame_step")
        width = w.shape[0]
        n_frames = (x.shape[1] - width) // step + 1
        if step < 1 or n_frames < 1:
            raise ValueError(f"STFT: no frame of {width} fits a signal of {x.shape[1]} (step {step})")
        starts = np.arange(n_frames) * step
        frames = to_complex(x)[:, starts[:, None] + np.arange(width)]  # [batch, frames, width]
        out = np.fft.fft(frames * w.astype(frames.real.dtype), axis=-1)
        if self.onesided:
            out = out[..., : width // 2 + 1]
        return from_complex(out, x.dtype)


# -- windows and filter banks -------------------------------------------------------------------------
@register_op
class CosineWindow(SignalOp):
    """w[n] = sum_k (-1)^k a_k cos(2 pi k n / N) for n < size, the size a run-time scalar input;
    N = size when `periodic`, else size - 1. Hann, Hamming and Blackman are such sums."""

    name = "cosine_window"
    coefficients: tuple[float, ...] = (0.5, 0.5)
    periodic: bool = True
    dtype: DType = DType.float32

    def compute_shape(self, inputs):
        if len(inputs) != 1 or inputs[0].ndim != 0 or not inputs[0].dtype.is_int:
            raise self._fail("expects one integer scalar (the size)", inputs)
        return Shape.dynamic(self.dtype, [Dim(0, None)])

    def compute(self, args):
        size = _scalar(args[0], "size")
        n = np.arange(size, dtype=np.float64)
        period = size if self.periodic else size - 1
        with np.errstate(divide="ignore", invalid="ignore"):  # a symmetric window of 1: 0/0, as in ONNX
            w = sum((-1) ** k * a * np.cos(2 * math.pi * k * n / period) for k, a in enumerate(self.coefficients))
        return np.asarray(w, dtype=np.float64).astype(self.dtype.np)


@register_op
class MelWeightMatrix(SignalOp):
    """The [dft_length // 2 + 1, num_mel_bins] matrix of triangular mel filters (peak 1) over the
    one-sided spectrum's bins. Inputs: num_mel_bins, dft_length, sample_rate (integer scalars),
    lower_edge_hertz, upper_edge_hertz (float scalars). mel(f) = 2595 log10(1 + f / 700)."""

    name = "mel_weight_matrix"
    dtype: DType = DType.float32

    def compute_shape(self, inputs):
        if len(inputs) != 5 or any(s.ndim != 0 for s in inputs):
            raise self._fail("expects five scalars", inputs)
        return Shape.dynamic(self.dtype, [Dim(0, None), Dim(0, None)])

    def compute(self, args):
        n_mel, n_dft, rate = (_scalar(a, w) for a, w in zip(args[:3], ("num_mel_bins", "dft_length", "sample_rate")))
        lo_hz, hi_hz = (np.asarray(a).reshape(()) for a in args[3:])
        # The edges' mels in their own float type, the rest in float64: the bin edges are floored,
        # so this follows the ONNX reference's arithmetic step by step.
        lo_mel = (2595 * np.log1p(lo_hz / 700)) / np.log(10)
        hi_mel = (2595 * np.log1p(hi_hz / 700)) / np.log(10)
        mels = np.arange(n_mel + 2) * ((hi_mel - lo_mel) / (n_mel + 2)) + lo_mel
        hz = 700 * np.expm1(mels / 2595 * np.log(10))
        edges = (((n_dft + 1) * hz) // rate).astype(np.int64)
        left, center, right = edges[:-2], edges[1:-1], edges[2:]  # one filter per column
        j = np.arange(n_dft // 2 + 1)[:, None].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rising = np.where((j >= left) & (j <= center) & (center > left), (j - left) / (center - left), 0.0)
            falling = (right - j) / (right - center)
        out = np.where((center == left) & (j == center), 1.0, rising)
        out = np.where((j >= center) & (j < right), falling, out)
        return out.astype(self.dtype.np)
