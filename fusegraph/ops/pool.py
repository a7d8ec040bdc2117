"""Pooling: average / max / Lp windows over the spatial axes, MaxPool's indices, MaxUnpool, and ROI
pooling (MaxRoiPool, RoiAlign).

Window geometry follows ops/conv.py: `padding` is begins then ends, empty tuples mean defaults.
Averages and Lp norms of low-precision floats accumulate in float32.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape
from .conv import compute_dtype, tap_slices, window_attrs, window_out_len

POOL_MODES = ("average", "max", "lpnorm")


class Geometry(NamedTuple):
    """One pooling window along every spatial axis, and the output lens it gives."""

    lengths: Sequence[int]
    begins: Sequence[int]
    ends: Sequence[int]
    strides: Sequence[int]
    dilations: Sequence[int]
    out: Sequence[int]


@dataclasses.dataclass(frozen=True)
class _Window(Op):
    """Shared geometry of the pooling ops: window lengths, strides, pads, dilations, ceil mode."""

    lengths: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    ceil_mode: bool = False

    def geometry(self, sp: Sequence[int]) -> Geometry:
        pb, pe, strides, dils = window_attrs(self, len(sp))
        ks = self.lengths
        if len(ks) != len(sp) or min(ks, default=1) < 1:
            raise ShapeError(f"{self}: window lengths do not match {len(sp)} spatial dims")
        out = [window_out_len(n, k, b, e, s, d, self.ceil_mode)
               for n, k, b, e, s, d in zip(sp, ks, pb, pe, strides, dils, strict=True)]
        if min(out) < 1:
            raise ShapeError(f"{self}: window does not fit input lens {list(sp)}")
        return Geometry(ks, pb, pe, strides, dils, out)

    def padded(self, x: np.ndarray, fill) -> tuple[np.ndarray, Geometry]:
        """x padded with `fill` so that every tap of every window is in range (ceil_mode windows may
        reach past the explicit end padding; trailing input no window reaches is left as it is)."""
        g = self.geometry(x.shape[2:])
        reach = [(o - 1) * s + (k - 1) * d + 1 - n - b
                 for o, s, k, d, n, b in zip(g.out, g.strides, g.lengths, g.dilations, x.shape[2:], g.begins, strict=True)]
        xp = np.pad(x, [(0, 0), (0, 0)] + [(b, max(e, 0)) for b, e in zip(g.begins, reach, strict=True)],
                    constant_values=fill)
        return xp, g

    @staticmethod
    def taps(xp: np.ndarray, g: Geometry):
        """(kernel offset, the strided view that offset reads for every output position) per tap."""
        for offs in np.ndindex(*g.lengths):
            yield offs, xp[(slice(None), slice(None)) + tap_slices(offs, g.dilations, g.strides, g.out)]

    def check_input(self, x: Shape) -> list[int]:
        if x.ndim < 3:
            raise ShapeError(f"{self}: input {x} must be N-C-spatial")
        return list(self.geometry(x.lens[2:]).out)


def _lowest(dt: np.dtype):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


@register_op
class Pooling(_Window):
    """Average / max / Lp-norm pooling over the spatial axes (windowed, like convolution).

    `count_include_pad`: average divides by the window size clipped to the explicitly padded input
    (never counting the extra positions ceil_mode adds); otherwise by the number of real elements.
    `global_pool` pools each whole spatial plane (lengths, strides and pads unused)."""

    name = "pooling"
    kind = OpKind.CONV  # a sliding-window kernel, scheduled like convolution
    mode: str = "average"
    count_include_pad: bool = False
    lp_order: int = 2
    global_pool: bool = False

    def compute_shape(self, inputs):
        (x,) = inputs
        if self.mode not in POOL_MODES:
            raise ShapeError(f"{self}: mode must be one of {POOL_MODES}")
        if self.global_pool:
            if x.ndim < 3:
                raise ShapeError(f"{self}: input {x} must be N-C-spatial")
            return Shape.of(x.dtype, x.lens[:2] + (1,) * (x.ndim - 2))
        return Shape.of(x.dtype, x.lens[:2] + tuple(self.check_input(x)))

    def compute(self, args):
        (x,) = args
        axes = tuple(range(2, x.ndim))
        if self.mode == "max":
            if self.global_pool:
                return x.max(axis=axes, keepdims=True)
            xp, g = self.padded(x, _lowest(x.dtype))
            acc = None
            for _, v in self.taps(xp, g):
                acc = v.copy() if acc is None else np.maximum(acc, v, out=acc)
            return acc
        ct = compute_dtype(x.dtype)
        v = x.astype(ct)
        if self.mode == "lpnorm":
            v = np.abs(v) ** self.lp_order
        if self.global_pool:
            acc = v.mean(axis=axes, keepdims=True) if self.mode == "average" else v.sum(axis=axes, keepdims=True)
        else:
            xp, g = self.padded(v, 0)
            acc = np.zeros(x.shape[:2] + tuple(g.out), dtype=ct)
            for _, t in self.taps(xp, g):
                acc += t
            if self.mode == "average":
                acc /= self._counts(x.shape[2:], g)
        if self.mode == "lpnorm":
            acc = acc ** (1.0 / self.lp_order)
        return acc.astype(x.dtype)

    def _counts(self, sp: Sequence[int], g: Geometry) -> np.ndarray:
        """The divisor of every window: a product of per-axis counts of in-range taps."""
        total = np.ones((), dtype=np.float64)
        for n, k, b, e, s, d, o in zip(sp, *g, strict=True):
            lo, hi = (-b, n + e) if self.count_include_pad else (0, n)
            pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
            total = np.multiply.outer(total, ((pos >= lo) & (pos < hi)).sum(axis=1))
        return total


@register_op
class MaxPoolingIndices(_Window):
    """ONNX MaxPool's Indices: the flat int64 index (into the whole N, C, *spatial input) of each window's
    first maximum. `storage_order` 1 flattens the spatial axes column-major."""

    name = "max_pooling_indices"
    kind = OpKind.CONV
    storage_order: int = 0

    def compute_shape(self, inputs):
        (x,) = inputs
        return Shape.of(DType.int64, x.lens[:2] + tuple(self.check_input(x)))

    def compute(self, args):
        (x,) = args
        n, c, *sp = x.shape
        xp, g = self.padded(x, _lowest(x.dtype))
        best = idx = None
        # spatial place values of the flat index: row-major, or column-major for storage_order 1
        order = range(len(sp)) if self.storage_order == 1 else reversed(range(len(sp)))
        place, acc = [0] * len(sp), 1
        for i in order:
            place[i], acc = acc, acc * sp[i]
        base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * math.prod(sp)
        for offs, v in self.taps(xp, g):
            # the unpadded input position this tap reads, per output position, as a flat spatial index
            pos = sum(((np.arange(o) * s + k * d - b) * p).reshape([o if j == i else 1 for j in range(len(sp))])
                      for i, (o, s, k, d, b, p) in enumerate(zip(g.out, g.strides, offs, g.dilations, g.begins, place,
                                                                 strict=True)))
            if best is None:
                best, idx = v.copy(), np.broadcast_to(pos, v.shape).copy()
            else:
                better = v > best  # strict: the first maximum in window order wins, as in ORT
                best = np.where(better, v, best)
                idx = np.where(better, pos, idx)
        return idx + base.reshape(n, c, *(1,) * len(sp))


@register_op
class MaxUnpool(Op):
    """Scatter x into zeros of `out_lens` at the flat indices I (as MaxPool's Indices output gives them,
    so indices address the whole output tensor, N and C included). A run-time output shape comes as a
    third int64 input instead (out_lens empty)."""

    name = "max_unpool"
    kind = OpKind.OPAQUE
    out_lens: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        x, i = inputs[:2]
        if len(inputs) == 3:
            if self.out_lens or inputs[2].lens != (x.ndim,):
                raise ShapeError(f"{self}: run-time output shape {inputs[2]} must hold {x.ndim} dims")
            return Shape.dynamic(x.dtype, list(x.dims[:2]) + [Dim(0, None)] * (x.ndim - 2))
        if i.lens != x.lens or len(self.out_lens) != x.ndim or tuple(self.out_lens[:2]) != x.lens[:2]:
            raise ShapeError(f"{self}: input {x}, indices {i} do not unpool to {list(self.out_lens)}")
        return Shape.of(x.dtype, self.out_lens)

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs) if len(inputs) == 3 else super().compute_dynamic_shape(inputs)

    def compute(self, args):
        x, i = args[:2]
        lens = tuple(int(v) for v in args[2]) if len(args) == 3 else self.out_lens
        y = np.zeros(math.prod(lens), dtype=x.dtype)
        flat = i.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= y.size):
            raise ShapeError(f"{self}: an index is outside the {y.size}-element output {list(lens)}")
        y[flat] = x.reshape(-1)
        return y.reshape(lens)


@register_op
class RoiPool(Op):
    """ONNX MaxRoiPool: max over each of pooled_shape bins of every ROI (batch, x1, y1, x2, y2), with ROI
    corners scaled by spatial_scale and rounded to pixels (Caffe/ORT rule); an empty bin gives 0."""

    name = "roi_pool"
    kind = OpKind.OPAQUE
    pooled_shape: tuple[int, ...] = (1, 1)
    spatial_scale: float = 1.0

    def compute_shape(self, inputs):
        x, rois = inputs
        if x.ndim != 4 or rois.ndim != 2 or rois.lens[1] != 5 or len(self.pooled_shape) != 2:
            raise ShapeError(f"{self}: expects x (N, C, H, W) and rois (R, 5), got {x}, {rois}")
        return Shape.of(x.dtype, (rois.lens[0], x.lens[1], *self.pooled_shape))

    def compute(self, args):
        x, rois = args
        h, w = x.shape[2:]
        ph, pw = self.pooled_shape
        y = np.zeros((rois.shape[0], x.shape[1], ph, pw), dtype=x.dtype)
        for r, (b, *box) in enumerate(rois.astype(np.float64)):
            # std::round (half away from zero) of the scaled corners
            x1, y1, x2, y2 = (np.sign(v) * np.floor(np.abs(v) * self.spatial_scale + 0.5) for v in box)
            bin_h, bin_w = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
            for i in range(ph):
                hs = int(min(max(np.floor(i * bin_h) + y1, 0), h))
                he = int(min(max(np.ceil((i + 1) * bin_h) + y1, 0), h))
                for j in range(pw):
                    ws = int(min(max(np.floor(j * bin_w) + x1, 0), w))
                    we = int(min(max(np.ceil((j + 1) * bin_w) + x1, 0), w))
                    if he > hs and we > ws:
                        y[r, :, i, j] = x[int(b), :, hs:he, ws:we].max(axis=(1, 2))
        return y


@register_op
class RoiAlign(Op):
    """ONNX RoiAlign: bilinear samples on a sampling_ratio grid per bin (adaptive when 0), averaged or
    max-ed (ORT's rule: the max of the weighted corner terms). Inputs x, rois (R, 4), batch_indices (R,)."""

    name = "roi_align"
    kind = OpKind.OPAQUE
    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0
    coordinate_mode: str = "half_pixel"  # or "output_half_pixel" (opset 10's behaviour)

    def compute_shape(self, inputs):
        x, rois, idx = inputs
        if x.ndim != 4 or rois.ndim != 2 or rois.lens[1] != 4 or idx.lens != rois.lens[:1]:
            raise ShapeError(f"{self}: expects x (N, C, H, W), rois (R, 4), batch_indices (R,); got "
                             f"{x}, {rois}, {idx}")
        if self.mode not in ("avg", "max") or self.coordinate_mode not in ("half_pixel", "output_half_pixel"):
            raise ShapeError(f"{self}: unknown mode or coordinate mode")
        return Shape.of(x.dtype, (rois.lens[0], x.lens[1], self.output_height, self.output_width))

    def compute(self, args):
        x, rois, idx = args
        ph, pw = self.output_height, self.output_width
        y = np.zeros((rois.shape[0], x.shape[1], ph, pw), dtype=np.float64)
        half = self.coordinate_mode == "half_pixel"
        for r, box in enumerate(rois.astype(np.float64)):
            x1, y1, x2, y2 = box * self.spatial_scale - (0.5 if half else 0.0)
            rh, rw = y2 - y1, x2 - x1
            if not half:  # malformed ROIs are forced to 1x1
                rh, rw = max(rh, 1.0), max(rw, 1.0)
            gh = self.sampling_ratio or int(np.ceil(rh / ph))
            gw = self.sampling_ratio or int(np.ceil(rw / pw))
            if gh <= 0 or gw <= 0:
                continue  # a degenerate ROI has no samples: zeros
            ys = _bilinear_axis(y1 + (np.arange(ph)[:, None] + (np.arange(gh)[None, :] + 0.5) / gh) * rh / ph, x.shape[2])
            xs = _bilinear_axis(x1 + (np.arange(pw)[:, None] + (np.arange(gw)[None, :] + 0.5) / gw) * rw / pw, x.shape[3])
            img = x[int(idx[r])].astype(np.float64)
            # terms[k] (C, ph, gh, pw, gw): the four weighted corners
            terms = [img[:, yi[:, :, None, None], xi[None, None]] * (wy[:, :, None, None] * wx[None, None])
                     for yi, wy in ys for xi, wx in xs]
            if self.mode == "avg":
                y[r] = sum(terms).sum(axis=(2, 4)) / max(gh * gw, 1)
            else:
                y[r] = np.maximum.reduce(terms).max(axis=(2, 4))
        return y.astype(x.dtype)


def _bilinear_axis(c: np.ndarray, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """For sample coordinates c along an axis of length n: [(low index, weight), (high index, weight)],
    with samples beyond [-1, n] weighted 0 and coordinates clamped at the edges (ORT's rule)."""
    out = (c < -1.0) | (c > n)
    c = np.maximum(c, 0.0)
    lo = np.minimum(np.floor(c).astype(np.int64), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    c = np.where(lo >= n - 1, lo, c)
    frac = c - lo
    keep = ~out
    return [(lo, (1.0 - frac) * keep), (hi, frac * keep)]
