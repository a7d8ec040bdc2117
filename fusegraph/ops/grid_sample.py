"""Grid sampling: GridSample reads an input at arbitrary normalized positions; AffineGrid makes the
positions of an affine warp. Both follow PyTorch's grid_sample / affine_grid (as ONNX specifies).

N-D throughout: each spatial axis contributes its own taps and weights (1 nearest, 2 linear, 4 cubic),
and the reference sums over every combination of taps, gathering all channels at once.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape
from .resize import RESIZE_MODES, cubic_weights, work_dtype


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates outside [lo, hi] back in, mirroring at the borders as often as needed."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below = x < lo
    d = np.where(below, lo - x, x - hi)
    folds = np.floor(d / span)
    rest = d - folds * span
    even = folds % 2 == 0
    inside = np.where(below == even, lo + rest, hi - rest)
    return np.where(below | (x > hi), inside, x)


@register_op
class GridSample(Op):
    """Sample X [N, C, *S] at the normalized positions of grid [N, *D, r] (last axis in reverse
    spatial order: x first) -> [N, C, *D], following PyTorch's grid_sample and the ONNX reference."""

    name = "grid_sample"
    kind = OpKind.OPAQUE
    mode: str = "linear"  # nearest | linear | cubic
    padding_mode: str = "zeros"  # zeros | border | reflection
    align_corners: bool = False

    def compute_shape(self, inputs):
        x, grid = inputs
        r = x.ndim - 2
        if (r < 1 or grid.ndim != r + 2 or grid.lens[-1] != r or grid.lens[0] != x.lens[0]
                or not grid.dtype.is_float or self.mode not in RESIZE_MODES
                or self.padding_mode not in ("zeros", "border", "reflection")):
            raise ShapeError(f"{self}: bad inputs {x}, {grid}")
        return Shape.of(x.dtype, x.lens[:2] + grid.lens[1:-1])

    def compute(self, args):
        x, grid = args
        n, r = x.shape[0], x.ndim - 2
        g = grid.astype(np.float64 if grid.dtype == np.float64 else np.float32)
        channels_last = np.moveaxis(x, 1, -1)  # [N, *S, C]: one gather fetches every channel
        batch = np.arange(n).reshape((n,) + (1,) * r)
        taps, weights, valid = [], [], []
        for i, size in enumerate(x.shape[2:]):
            idx, w, ok = self._axis_taps(g[..., r - 1 - i], size)
            taps.append(idx)
            weights.append(w)
            valid.append(ok)
        float_out = self.mode != "nearest"
        acc = None
        for combo in np.ndindex(*[len(t) for t in taps]):
            vals = channels_last[(batch,) + tuple(t[k] for t, k in zip(taps, combo))]
            mask = np.logical_and.reduce([v[k] for v, k in zip(valid, combo)])
            if float_out:
                w = np.prod([wt[k] for wt, k in zip(weights, combo)], axis=0) * mask
                term = vals * w[..., None].astype(work_dtype(x.dtype))
            else:
                term = np.where(mask[..., None], vals, np.zeros((), x.dtype))
            acc = term if acc is None else acc + term
        out = np.moveaxis(acc, -1, 1)
        return out.astype(x.dtype) if float_out else out

    def _axis_taps(self, coord: np.ndarray, size: int):
        """For one spatial axis: the tap indices, their weights and whether each tap lies inside."""
        if self.align_corners:
            c = (coord + 1) / 2 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            c = ((coord + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        if self.mode == "nearest":
            c = np.rint(c)  # half to even, as PyTorch
        if self.padding_mode == "border" and self.mode != "cubic":
            # cubic clamps each tap instead, as PyTorch and ONNX Runtime do (the ONNX reference
            # clamps the coordinate: it differs within two pixels outside the border)
            c = np.where((c < lo) | (c > hi), np.clip(c, 0, size - 1), c)
        elif self.padding_mode == "reflection":
            c = _reflect(c, lo, hi)
        if self.mode == "nearest":
            idx, w = [np.trunc(c)], [np.ones_like(c)]
        else:
            base = np.floor(c)
            t = c - base
            if self.mode == "linear":
                idx, w = [base, base + 1], [1 - t, t]
            else:
                idx, w = [base + k for k in (-1, 0, 1, 2)], list(np.moveaxis(cubic_weights(t, -0.75), -1, 0))
        fixed, ok = [], []
        for i in idx:
            if self.padding_mode == "reflection":
                i = np.trunc(_reflect(i, lo, hi))
            # zeros padding reads 0 outside; border and reflection taps are clamped / folded inside
            ok.append((i >= 0) & (i <= size - 1) if self.padding_mode == "zeros" else np.ones(i.shape, bool))
            fixed.append(np.clip(i, 0, size - 1).astype(np.intp))
        return fixed, w, ok


@register_op
class AffineGrid(Op):
    """The grid [N, *spatial, r] that GridSample needs to apply the affine maps theta [N, r, r+1]
    to an output of `size` = (N, C, *spatial), in normalized [-1, 1] coordinates (x first).
    An empty `size` means the second input holds it (the extents are then known at run time)."""

    name = "affine_grid"
    kind = OpKind.OPAQUE
    size: tuple[int, ...] = ()
    align_corners: bool = False

    def compute_shape(self, inputs):
        theta = inputs[0]
        r = theta.dims[1].min if theta.ndim == 3 and theta.dims[1].is_fixed else None
        if r not in (2, 3) or theta.dims[2] != Dim.fixed(r + 1) or not theta.dtype.is_float:
            raise ShapeError(f"{self}: theta must be [N, 2, 3] or [N, 3, 4], got {theta}")
        if len(inputs) == 2:
            return Shape.dynamic(theta.dtype, (theta.dims[0],) + (Dim(0, None),) * r + (Dim.fixed(r),))
        if len(self.size) != r + 2 or not theta.dims[0].contains(self.size[0]):
            raise ShapeError(f"{self}: theta {theta} does not fit size {list(self.size)}")
        return Shape.of(theta.dtype, (self.size[0],) + tuple(self.size[2:]) + (r,))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        theta = args[0]
        spatial = tuple(int(n) for n in (self.size or np.asarray(args[1]).reshape(-1))[2:])
        if self.align_corners:
            axes = [np.linspace(-1.0, 1.0, n) for n in spatial]
        else:
            axes = [(np.arange(n) * 2.0 + 1) / n - 1 for n in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")
        homogeneous = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
        grid = homogeneous @ np.swapaxes(theta.astype(np.float64), 1, 2)  # [N, points, r]
        return grid.reshape((theta.shape[0],) + spatial + (len(spatial),)).astype(theta.dtype)
