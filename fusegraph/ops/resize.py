"""Resize: nearest / linear / cubic resampling, separable per axis, with every ONNX coordinate map.

Resize is separable: the reference resizes one axis at a time, each output position reading a few
input taps with weights that depend only on that axis's coordinate map. Nearest only gathers, so it
is exact for every dtype; linear and cubic accumulate in float and round back (integers rounded and
saturated, as the ONNX reference does).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape

RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")  # the last: Resize-11 only
# "simple" is the rounding of Resize-10/Upsample (no nearest_mode yet): floor up-, ceil downsampling
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def work_dtype(dt: np.dtype) -> np.dtype:
    """The float type interpolation accumulates in: float64 for float64 and integers, else float32."""
    return np.dtype(np.float64 if dt == np.float64 or dt.kind in "iub" else np.float32)


def saturate(y: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Cast interpolated values back: integers rounded (half to even), every type clipped to range
    (an infinite float excepted)."""
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.clip(np.round(y), info.min, info.max).astype(dt)
    if dt.kind == "b":
        return y != 0
    import ml_dtypes

    info = ml_dtypes.finfo(dt)
    # finite values past the type's range saturate (cubic overshoot); an infinity stays one
    clipped = np.clip(y, float(info.min), float(info.max))
    return np.where(np.isinf(y), y, clipped).astype(dt)


def cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution weights of the taps at -1, 0, 1, 2 around fraction t: [..., 4]."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _antialias_weights(t: np.ndarray, scale: float, cubic: bool, a: float) -> np.ndarray:
    """The filter stretched by 1/scale when downsampling, normalized: [..., taps]."""
    s = min(scale, 1.0)
    start = math.floor((-2 if cubic else -1) / s) + 1
    d = np.abs((np.arange(start, 2 - start)[None, :] - t[:, None]) * s)
    if cubic:
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                     np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    else:
        w = np.clip(1 - d, 0, 1)
    return w / w.sum(axis=1, keepdims=True)


def _along(axis: int, rank: int, v: np.ndarray) -> np.ndarray:
    """A 1-D per-position vector shaped to broadcast along `axis` of a rank-`rank` tensor."""
    return v.reshape([-1 if k == axis else 1 for k in range(rank)])


def scaled_lens(in_lens: Sequence[int], scales: Sequence[float]) -> tuple[int, ...]:
    """Output lens from scales: the float64 product of each (float32) scale, floored, as the ONNX
    reference computes it."""
    return tuple(int(math.floor(n * s)) for n, s in zip(in_lens, scales))


def resolve_resize(in_lens: Sequence[int], axes: Sequence[int], values: Sequence[float], by_sizes: bool,
                   policy: str = "stretch") -> tuple[tuple[float, ...], tuple[int, ...] | None]:
    """Full-rank (scales, out_lens) from ONNX Resize's per-axis scales or sizes. Given scales, out_lens
    is None (floor(in_len * scale), left to the op); given sizes, each scale is size / in_len, or one
    common scale when keeping the aspect ratio (then the sizes are rounded half up from it)."""
    if len(values) != len(axes):
        raise ShapeError(f"resize: {len(values)} {'sizes' if by_sizes else 'scales'} for axes {list(axes)}")
    scales = [1.0] * len(in_lens)
    if not by_sizes:
        for a, s in zip(axes, values):
            scales[a] = float(s)
        return tuple(scales), None
    out = list(in_lens)
    for a, n in zip(axes, values):
        scales[a], out[a] = int(n) / in_lens[a], int(n)
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise ShapeError(f"resize: unknown keep_aspect_ratio_policy {policy!r}")
        common = (min if policy == "not_larger" else max)(scales[a] for a in axes)
        for a in axes:
            scales[a], out[a] = common, int(common * in_lens[a] + 0.5)
    return tuple(scales), tuple(out)


def full_roi(axes: Sequence[int], roi: Sequence[float], rank: int) -> tuple[float, ...]:
    """Every axis's normalized crop start, then every end (axes not listed: the whole axis)."""
    if len(roi) != 2 * len(axes):
        raise ShapeError(f"resize: tf_crop_and_resize needs {2 * len(axes)} roi values, got {len(roi)}")
    starts, ends = [0.0] * rank, [1.0] * rank
    for k, a in enumerate(axes):
        starts[a], ends[a] = float(roi[k]), float(roi[len(axes) + k])
    return tuple(starts + ends)


@dataclasses.dataclass(frozen=True)
class Interpolation(Op):
    """The interpolation attributes Resize shares with its run-time-sized form."""

    kind = OpKind.OPAQUE
    mode: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False

    def _check(self, x: Shape) -> None:
        if (self.mode not in RESIZE_MODES or self.coordinate_transformation_mode not in COORDINATE_MODES
                or self.nearest_mode not in NEAREST_MODES):
            raise ShapeError(f"{self}: unknown mode for input {x}")

    def interpolation(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Interpolation)}


@register_op
class Resize(Interpolation):
    """ONNX Resize with every attribute normalized to full rank. `scales[i]` is the scale of axis i's
    coordinate map; the output length is out_lens[i] when given, else floor(in_len * scales[i]).
    `roi` (tf_crop_and_resize only) is every axis's normalized start, then every end."""

    name = "resize"
    scales: tuple[float, ...] = ()
    out_lens: tuple[int, ...] = ()
    roi: tuple[float, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        r = x.ndim
        self._check(x)
        if (len(self.scales) != r or len(self.out_lens) not in (0, r) or any(s <= 0 for s in self.scales)
                or (self.coordinate_transformation_mode == "tf_crop_and_resize" and len(self.roi) != 2 * r)):
            raise ShapeError(f"{self}: attributes do not fit input {x}")
        return Shape.of(x.dtype, self.output_lens(x.lens))

    def output_lens(self, in_lens: Sequence[int]) -> tuple[int, ...]:
        return self.out_lens or scaled_lens(in_lens, self.scales)

    def compute(self, args):
        (x,) = args
        check_tensor(self.output_lens(x.shape), DType.from_numpy(x.dtype), self.name)
        y = x if self.mode == "nearest" else x.astype(work_dtype(x.dtype))
        r = x.ndim
        for axis, (n_in, n_out) in enumerate(zip(x.shape, self.output_lens(x.shape))):
            roi = (self.roi[axis], self.roi[axis + r]) if self.roi else (0.0, 1.0)
            if math.isclose(self.scales[axis], 1.0) and n_in == n_out and roi == (0.0, 1.0):
                continue  # identity along this axis
            src, outside = self._source(axis, n_in, n_out, roi)
            y = self._nearest(y, axis, src) if self.mode == "nearest" else self._interpolate(y, axis, src)
            if outside is not None and outside.any():
                fill = np.asarray(self.extrapolation_value).astype(y.dtype)
                y = np.where(_along(axis, r, outside), fill, y)
        return y if self.mode == "nearest" else saturate(y, x.dtype)

    def interpolated_axes(self, in_lens: Sequence[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(axis, idx, w) of each axis `compute` interpolates (linear or cubic, no crop), in its order:
        out[o] = sum over k of w[o, k] * in[idx[o, k]] along that axis (see `taps`)."""
        assert self.mode != "nearest" and self.coordinate_transformation_mode != "tf_crop_and_resize"
        found = []
        for axis, (n_in, n_out) in enumerate(zip(in_lens, self.output_lens(in_lens))):
            if not (math.isclose(self.scales[axis], 1.0) and n_in == n_out):
                found.append((axis, *self.taps(n_in, axis, self._source(axis, n_in, n_out, (0.0, 1.0))[0])))
        return found

    def _source(self, axis: int, n_in: int, n_out: int, roi: tuple[float, float]):
        """Each output position's source coordinate (float64), and for tf_crop_and_resize which ones
        fall outside the input. Like the reference, the maps use the real-valued output length."""
        scale = self.scales[axis]
        out_f = scale * n_in
        y = np.arange(n_out, dtype=np.float64)
        mode = self.coordinate_transformation_mode
        outside = None
        if mode == "half_pixel":
            x = (y + 0.5) / scale - 0.5
        elif mode == "half_pixel_symmetric":
            offset = n_in / 2 * (1 - n_out / out_f)
            x = offset + (y + 0.5) / scale - 0.5
        elif mode == "pytorch_half_pixel":
            x = (y + 0.5) / scale - 0.5 if out_f != 1 else np.full(n_out, -0.5)
        elif mode == "align_corners":
            x = y * (n_in - 1) / (out_f - 1) if out_f != 1 else np.zeros(n_out)
        elif mode == "asymmetric":
            x = y / scale
        elif mode == "tf_half_pixel_for_nn":
            x = (y + 0.5) / scale
        else:  # tf_crop_and_resize
            lo, hi = roi
            if out_f != 1:
                x = y * (hi - lo) * (n_in - 1) / (out_f - 1)
            else:
                x = np.full(n_out, (hi - lo) * (n_in - 1) / 2)
            x = x + lo * (n_in - 1)
            outside = (x < 0) | (x > n_in - 1)
        return x, outside

    def _nearest(self, y: np.ndarray, axis: int, x: np.ndarray) -> np.ndarray:
        mode = self.nearest_mode
        if mode == "simple":
            mode = "ceil" if self.scales[axis] < 1 else "floor"
        pick = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}[mode](x)
        return np.take(y, np.clip(pick, 0, y.shape[axis] - 1).astype(np.intp), axis=axis)

    def _interpolate(self, y: np.ndarray, axis: int, x: np.ndarray) -> np.ndarray:
        idx, w = self.taps(y.shape[axis], axis, x)
        w = w.astype(y.dtype)
        out = None
        for k in range(idx.shape[1]):
            term = np.take(y, idx[:, k], axis=axis) * _along(axis, y.ndim, w[:, k])
            out = term if out is None else out + term
        return out

    def taps(self, n_in: int, axis: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The source positions idx[o, k] (edge-clamped) and float64 weights w[o, k] of output o at
        source coordinates `x`: out[o] = sum over k of w[o, k] * in[idx[o, k]], in k's order. A
        target computes the same sum (a dense matrix product would make 0 * inf of the far taps)."""
        scale = self.scales[axis]
        base = np.floor(x)
        exact = x == base
        # an exact source coordinate is taken as fraction 1 from the previous pixel (the reference's
        # convention; it decides which taps an even-width filter covers)
        t = np.where(exact, 1.0, x - base)
        cubic = self.mode == "cubic"
        if self.antialias:
            w = _antialias_weights(t, scale, cubic, self.cubic_coeff_a)
        else:
            w = cubic_weights(t, self.cubic_coeff_a) if cubic else np.stack([1 - t, t], axis=-1)
        taps = w.shape[1]
        first = base.astype(np.int64) - taps // 2 + np.where(exact, 0, 1)
        idx = first[:, None] + np.arange(taps)[None, :]
        if self.exclude_outside:
            w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
            total = w.sum(axis=1, keepdims=True)
            w = w / np.where(total == 0, 1.0, total)
        return np.clip(idx, 0, n_in - 1).astype(np.intp), w  # clamping == edge padding


@register_op
class ResizeDynamic(Interpolation):
    """Resize whose scales or sizes (and roi) are computed at run time. Inputs: x, the per-axis scales
    or sizes (`by_sizes`) for `axes`, and for tf_crop_and_resize the roi. Resized axes have unknown
    extents until then."""

    name = "resize_dynamic"
    axes: tuple[int, ...] = ()
    by_sizes: bool = False
    keep_aspect_ratio_policy: str = "stretch"

    def compute_shape(self, inputs):
        x = inputs[0]
        self._check(x)
        if len(inputs) != 2 + (self.coordinate_transformation_mode == "tf_crop_and_resize"):
            raise ShapeError(f"{self}: expects x, scales or sizes[, roi], got {len(inputs)} inputs")
        if not all(0 <= a < x.ndim for a in self.axes):
            raise ShapeError(f"{self}: axes out of range for {x}")
        dims = [Dim(0, None) if k in self.axes else d for k, d in enumerate(x.dims)]
        return Shape.dynamic(x.dtype, dims)

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        x, values = args[:2]
        scales, out_lens = resolve_resize(x.shape, self.axes, np.asarray(values).reshape(-1).tolist(),
                                          self.by_sizes, self.keep_aspect_ratio_policy)
        roi = full_roi(self.axes, np.asarray(args[2]).reshape(-1).tolist(), x.ndim) if len(args) > 2 else ()
        static = Resize(scales=scales, out_lens=out_lens or (), roi=roi, **self.interpolation())
        return static.compute([x])
