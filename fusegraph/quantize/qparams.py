"""Scales and zero points from ranges, computed as ONNX Runtime's quantizer computes them, and the
same quantization applied to numpy arrays (for weights, and for fake-quantized sensitivity runs).

Integer types: the range is widened to contain 0 (zero must be exact, for padding and ReLU), made
[-absmax, absmax] when symmetric, and scale = (rmax - rmin) / (qmax - qmin) in float64 rounded to
float32, zero_point = round(qmin - rmin / scale); a symmetric int8 range is [-127, 127] so that zero
sits at 0 (ORT's quant_utils.compute_scale_zp). A range too small for a float32 scale takes scale 1.
Float8 types: scale = absmax / the largest finite value, zero point 0.
Values are quantized by the IR's own QuantizeLinear op, so a weight rounds as the program would.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from ..errors import ArgumentError
from ..ir.dtypes import DType
from ..ops.quantize import FLOAT_QUANT, INT_RANGES, DequantizeLinear, QuantizeLinear

ACTIVATION_TYPES = {"int8": DType.int8, "uint8": DType.uint8}


@dataclasses.dataclass(frozen=True)
class Scheme:
    """How values are quantized: activation and weight types, symmetric activations, per-channel weights."""

    activation: DType = DType.int8
    weight: DType = DType.int8
    symmetric: bool = False
    per_channel: bool = True

    def __post_init__(self):
        for dt in (self.activation, self.weight):
            if dt not in INT_RANGES and dt not in FLOAT_QUANT:
                raise ArgumentError(f"cannot quantize to {dt}")

    @property
    def label(self) -> str:
        return "fp8" if self.activation in FLOAT_QUANT else "int8"


def _qrange(dtype: DType, symmetric: bool) -> tuple[int, int]:
    lo, hi = INT_RANGES[dtype]
    if symmetric and lo < 0:
        lo = -hi  # int8 symmetric: [-127, 127]
    return lo, hi


def range_qparams(rmin, rmax, dtype: DType, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero point of `dtype`) for ranges `rmin`, `rmax` (scalars or per-channel arrays)."""
    rmin = np.minimum(np.asarray(rmin, np.float32), np.float32(0))
    rmax = np.maximum(np.asarray(rmax, np.float32), np.float32(0))
    if dtype in FLOAT_QUANT:
        top = np.float64(ml_dtypes.finfo(dtype.np).max)
        amax = np.maximum(-rmin, rmax).astype(np.float64)
        scale = np.where(amax > 0, amax / top, 1.0).astype(np.float32)
        return scale, np.zeros(scale.shape, dtype.np)
    qmin, qmax = _qrange(dtype, symmetric)
    if symmetric:
        amax = np.maximum(-rmin, rmax)
        rmin, rmax = -amax, amax
    scale64 = (rmax.astype(np.float64) - rmin.astype(np.float64)) / np.float64(qmax - qmin)
    tiny = scale64 < np.finfo(np.float32).tiny
    scale64 = np.where(tiny, 1.0, scale64)
    if symmetric:
        zp = np.full(scale64.shape, np.round((qmin + qmax) / 2.0))
    else:
        zp = np.round(qmin - rmin.astype(np.float64) / scale64)
    zp = np.where(tiny, 0, zp)
    return scale64.astype(np.float32), np.clip(zp, *INT_RANGES[dtype]).astype(dtype.np)


def channel_shape(ndim: int, axis: int | None, n: int) -> tuple[int, ...]:
    """The shape a per-`axis` vector of length n takes to broadcast against a rank-`ndim` tensor."""
    return () if axis is None else tuple(n if k == axis else 1 for k in range(ndim))


def weight_qparams(w: np.ndarray, dtype: DType, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric scale and zero point of weight `w`, per channel along `axis` (None: per tensor),
    shaped to broadcast against `w`."""
    others = tuple(k for k in range(w.ndim) if k != axis) if axis is not None else None
    wmin = np.min(w, axis=others) if w.size else np.zeros(())
    wmax = np.max(w, axis=others) if w.size else np.zeros(())
    scale, zp = range_qparams(wmin, wmax, dtype, symmetric=True)
    shape = channel_shape(w.ndim, axis, w.shape[axis] if axis is not None else 1)
    return scale.reshape(shape), zp.reshape(shape)


def quantize_array(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, dtype: DType) -> np.ndarray:
    s, z = np.broadcast_to(scale, x.shape), np.broadcast_to(zp, x.shape)
    return QuantizeLinear(to=dtype, saturate=True).compute([np.asarray(x, np.float32), s, z])


def fake_quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, dtype: DType) -> np.ndarray:
    """x through QuantizeLinear then DequantizeLinear, as the quantized program computes it."""
    q = quantize_array(x, scale, zp, dtype)
    s, z = np.broadcast_to(scale, x.shape), np.broadcast_to(zp, x.shape)
    return DequantizeLinear(to=DType.float32).compute([q, s, z])
