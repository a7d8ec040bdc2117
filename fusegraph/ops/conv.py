"""Sliding-window ops with weights: convolution, deconvolution (transposed), deformable convolution,
col2im and the stateful causal convolution.

Layout is always NC + spatial (1-D, 2-D, 3-D, ...). Window geometry is explicit: `padding` holds the
begins of every spatial axis followed by the ends (asymmetric padding is normal, the frontend resolves
ONNX `auto_pad`), `stride` and `dilation` one entry per spatial axis. An empty tuple means the default
(no padding, stride 1, dilation 1). Bias and activations are separate pointwise instructions.

The references gather one strided view per kernel tap into an im2col matrix and do a single (batched)
matmul, so ResNet-sized models run in seconds; transposed forms scatter-add the same taps back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape, TupleShape


# -- window geometry, shared with ops/pool.py -----------------------------------------------
def window_attrs(op: Op, nsp: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(pad begins, pad ends, strides, dilations) of `op` for `nsp` spatial axes, defaults filled in."""
    pads = op.padding or (0,) * (2 * nsp)  # type: ignore[attr-defined]
    strides = op.stride or (1,) * nsp  # type: ignore[attr-defined]
    dils = op.dilation or (1,) * nsp  # type: ignore[attr-defined]
    if len(pads) != 2 * nsp or len(strides) != nsp or len(dils) != nsp:
        raise ShapeError(f"{op}: padding/stride/dilation do not match {nsp} spatial dims")
    if min(strides) < 1 or min(dils) < 1 or min(pads) < 0:
        raise ShapeError(f"{op}: strides and dilations must be >= 1 and pads >= 0")
    return tuple(pads[:nsp]), tuple(pads[nsp:]), tuple(strides), tuple(dils)


def window_out_len(n: int, k: int, pb: int, pe: int, s: int, d: int, ceil: bool = False) -> int:
    """Number of window positions along one axis (ONNX/ORT rule; with `ceil`, the last window must
    start inside the input or its leading padding)."""
    span = n + pb + pe - ((k - 1) * d + 1)
    if not ceil:
        return span // s + 1 if span >= 0 else 0
    out = -(-span // s) + 1
    if (out - 1) * s >= n + pb:
        out -= 1
    return out


def tap_slices(offs: Sequence[int], dils: Sequence[int], strides: Sequence[int],
               counts: Sequence[int]) -> tuple[slice, ...]:
    """The strided slice of a padded array that kernel tap `offs` reads for every output position."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in zip(offs, dils, strides, counts, strict=True))


def compute_dtype(dt: np.dtype) -> np.dtype:
    # Low-precision floats accumulate in float32 (as ORT does); integers exactly in int64.
    if dt.kind in "iub":
        return np.dtype(np.int64)
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def im2col(x: np.ndarray, ks: Sequence[int], pb, pe, strides, dils, out_sp) -> np.ndarray:
    """(N, C, *spatial) -> (N, C, K, P): every kernel tap's input for every output position."""
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe, strict=True))) if any(pb) or any(pe) else x
    n, c = x.shape[:2]
    cols = np.empty((n, c, math.prod(ks), math.prod(out_sp)), dtype=x.dtype)
    for t, offs in enumerate(np.ndindex(*ks)):
        cols[:, :, t, :] = xp[(slice(None), slice(None)) + tap_slices(offs, dils, strides, out_sp)].reshape(
            n, c, math.prod(out_sp))
    return cols


def col2im(cols: np.ndarray, ks: Sequence[int], pb, strides, dils, in_sp, out_sp) -> np.ndarray:
    """(N, C, K, P) with P = prod(in_sp) -> (N, C, *out_sp): scatter-add every tap into a padded
    canvas, then keep out_sp from the leading pads on (taps past the end drop, a short canvas is
    zero-extended)."""
    n, c = cols.shape[:2]
    reach = [(k - 1) * d + s * (m - 1) + 1 for k, d, s, m in zip(ks, dils, strides, in_sp, strict=True)]
    y = np.zeros((n, c, *[max(b + o, r) for b, o, r in zip(pb, out_sp, reach, strict=True)]), dtype=cols.dtype)
    for t, offs in enumerate(np.ndindex(*ks)):
        y[(slice(None), slice(None)) + tap_slices(offs, dils, strides, in_sp)] += cols[:, :, t].reshape(n, c, *in_sp)
    return y[(slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in zip(pb, out_sp, strict=True))]


def grouped_matmul(w: np.ndarray, cols: np.ndarray, group: int) -> np.ndarray:
    """w (M, C/g * K) times cols (N, C * K, P) per group -> (N, M, P)."""
    n, ck, p = cols.shape
    m = w.shape[0]
    out = np.matmul(w.reshape(group, m // group, w.shape[1]), cols.reshape(n, group, ck // group, p))
    return out.reshape(n, m, p)


# -- convolution ------------------------------------------------------------------------------------
def _conv_shape(op: Op, x: Shape, w: Shape, group: int) -> tuple[int, ...]:
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim or w.dtype != x.dtype:
        raise ShapeError(f"{op}: input {x} and weight {w} must both be N-C-spatial of one rank and type")
    if group < 1 or x.lens[1] != w.lens[1] * group or w.lens[0] % group:
        raise ShapeError(f"{op}: {x.lens[1]} input channels, weight {w}, group {group} do not match")
    pb, pe, strides, dils = window_attrs(op, nsp)
    out = tuple(window_out_len(n, k, b, e, s, d)
                for n, k, b, e, s, d in zip(x.lens[2:], w.lens[2:], pb, pe, strides, dils, strict=True))
    if min(out) < 1:
        raise ShapeError(f"{op}: window {list(w.lens[2:])} does not fit input {x}")
    return (x.lens[0], w.lens[0], *out)


def conv_reference(x: np.ndarray, w: np.ndarray, pb, pe, strides, dils, group: int) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    xs, ws = x.astype(ct, copy=False), w.astype(ct, copy=False)
    ks = w.shape[2:]
    out_sp = [window_out_len(n, k, b, e, s, d) for n, k, b, e, s, d in zip(x.shape[2:], ks, pb, pe, strides, dils, strict=True)]
    if min(out_sp) < 1:  # (a run-time size: the shape rule's check, for dims it could not know)
        raise ShapeError(f"convolution: window {list(ks)} does not fit input {list(x.shape)}")
    cols = im2col(xs, ks, pb, pe, strides, dils, out_sp)
    n, c = x.shape[:2]
    # (sizes spelled out: with no input channel the sums are empty, zeros, where -1 is ambiguous)
    y = grouped_matmul(ws.reshape(w.shape[0], math.prod(w.shape[1:])),
                       cols.reshape(n, c * math.prod(ks), math.prod(out_sp)), group)
    return y.reshape(n, w.shape[0], *out_sp).astype(x.dtype)


@register_op
class Convolution(Op):
    """y[n, m] = sum over c, taps of x[n, c, window] * w[m, c]; inputs x (N, C, *sp), w (M, C/group, *k)."""

    name = "convolution"
    kind = OpKind.CONV
    padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    group: int = 1

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w = inputs
        return Shape.of(x.dtype, _conv_shape(self, x, w, self.group))

    def compute(self, args):
        x, w = args
        return conv_reference(x, w, *window_attrs(self, x.ndim - 2), self.group)


@register_op
class Deconvolution(Op):
    """Transposed convolution: inputs x (N, C, *sp), w (C, M/group, *k) -> (N, M, *out).

    out = (in - 1) * stride + (k - 1) * dilation + 1 + output_padding - pad begins - pad ends: the full
    scatter of every input pixel, zero-extended by `output_padding` at the end, then cropped by `padding`.
    """

    name = "deconvolution"
    kind = OpKind.CONV
    padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    group: int = 1
    output_padding: tuple[int, ...] = ()

    def _out_sp(self, in_sp, ks) -> list[int]:
        pb, pe, strides, dils = window_attrs(self, len(in_sp))
        extra = self.output_padding or (0,) * len(in_sp)
        return [(n - 1) * s + (k - 1) * d + 1 + e - b - p
                for n, k, b, p, s, d, e in zip(in_sp, ks, pb, pe, strides, dils, extra, strict=True)]

    def compute_shape(self, inputs):
        x, w = inputs
        nsp = x.ndim - 2
        if nsp < 1 or w.ndim != x.ndim or w.dtype != x.dtype or x.lens[1] != w.lens[0] or x.lens[1] % self.group:
            raise ShapeError(f"{self}: input {x} and weight {w} (C, M/group, *k) do not match")
        if len(self.output_padding) not in (0, nsp):
            raise ShapeError(f"{self}: output_padding needs {nsp} entries")
        out = self._out_sp(x.lens[2:], w.lens[2:])
        if min(out) < 1:
            raise ShapeError(f"{self}: padding leaves no output for input {x}")
        return Shape.of(x.dtype, (x.lens[0], w.lens[1] * self.group, *out))

    def compute(self, args):
        x, w = args
        ct = compute_dtype(x.dtype)
        n, c, *in_sp = x.shape
        ks = w.shape[2:]
        g, mg = self.group, w.shape[1]
        pb, _, strides, dils = window_attrs(self, len(in_sp))
        # w[c, m, taps] as per-group (M/g * K, C/g) matrices applied to x's (C/g, P) -> (M * K, P) columns
        wt = w.astype(ct).reshape(g, c // g, mg * math.prod(ks)).transpose(0, 2, 1)
        p = math.prod(in_sp)  # (spelled out: -1 is ambiguous for an empty input)
        cols = np.matmul(wt, x.astype(ct).reshape(n, g, c // g, p))
        cols = cols.reshape(n, g * mg, math.prod(ks), p)
        y = col2im(cols, ks, pb, strides, dils, in_sp, self._out_sp(in_sp, ks))
        return y.astype(x.dtype)


@register_op
class Col2Im(Op):
    """ONNX Col2Im: (N, C * prod(block), L) -> (N, C, *image): sums each block column back in place.

    image_lens/block_lens are attributes; when a model computes them at run time they are instead
    int64 inputs 2 and 3 (attributes empty), and the output dims other than N are unknown until then."""

    name = "col2im"
    kind = OpKind.OPAQUE
    image_lens: tuple[int, ...] = ()
    block_lens: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()

    def _blocks(self) -> list[int]:
        pb, pe, strides, dils = window_attrs(self, len(self.image_lens))
        return [window_out_len(n, k, b, e, s, d)
                for n, k, b, e, s, d in zip(self.image_lens, self.block_lens, pb, pe, strides, dils, strict=True)]

    def compute_shape(self, inputs):
        x = inputs[0]
        if len(inputs) == 3:  # run-time image and block shapes
            if self.image_lens or inputs[1].ndim != 1 or not inputs[1].dims[0].is_fixed:
                raise ShapeError(f"{self}: run-time image_shape must be a 1-D tensor of known length")
            return Shape.dynamic(x.dtype, [x.dims[0]] + [Dim(0, None)] * (1 + inputs[1].dims[0].min))
        k = math.prod(self.block_lens)
        if (len(inputs) != 1 or x.ndim != 3 or len(self.block_lens) != len(self.image_lens) or x.lens[1] % k
                or x.lens[2] != math.prod(self._blocks())):
            raise ShapeError(f"{self}: input {x} does not hold {self._blocks()} blocks of {list(self.block_lens)}")
        return Shape.of(x.dtype, (x.lens[0], x.lens[1] // k, *self.image_lens))

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs) if len(inputs) == 3 else super().compute_dynamic_shape(inputs)

    def compute(self, args):
        if len(args) == 3:
            image, block = (tuple(int(v) for v in np.asarray(a).reshape(-1)) for a in args[1:])
            static = dataclasses.replace(self, image_lens=image, block_lens=block)
            static.compute_shape([Shape.of(DType.from_numpy(args[0].dtype), args[0].shape)])  # validates
            return static.compute(args[:1])
        x = args[0]
        ct = compute_dtype(x.dtype)
        n, ck, _ = x.shape
        cols = x.astype(ct).reshape(n, ck // math.prod(self.block_lens), math.prod(self.block_lens), -1)
        pb, _, strides, dils = window_attrs(self, len(self.image_lens))
        y = col2im(cols, self.block_lens, pb, strides, dils, self._blocks(), self.image_lens)
        return y.astype(x.dtype)


@register_op
class DeformConvolution(Op):
    """Deformable convolution: inputs x, w, offset (N, offset_group * K * nsp, *out), optional mask
    (N, offset_group * K, *out). Each tap samples x multilinearly at its offset position (zero outside)."""

    name = "deform_convolution"
    kind = OpKind.CONV
    padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    group: int = 1
    offset_group: int = 1

    def compute_shape(self, inputs):
        if len(inputs) not in (3, 4):
            raise ShapeError(f"{self}: expects x, w, offset and an optional mask")
        x, w, off = inputs[:3]
        out = _conv_shape(self, x, w, self.group)
        k, og = math.prod(w.lens[2:]), self.offset_group
        want = [(x.lens[0], og * k * (x.ndim - 2), *out[2:])] + [(x.lens[0], og * k, *out[2:])] * (len(inputs) - 3)
        if og < 1 or x.lens[1] % og or [s.lens for s in inputs[2:]] != want:
            raise ShapeError(f"{self}: offset/mask {[str(s) for s in inputs[2:]]}, expected {want}")
        return Shape.of(x.dtype, out)

    def compute(self, args):
        x, w, off = args[:3]
        ct = compute_dtype(x.dtype)
        n, c, *sp = x.shape
        ks, nsp, og = w.shape[2:], x.ndim - 2, self.offset_group
        pb, pe, strides, dils = window_attrs(self, nsp)
        out_sp = off.shape[2:]
        k, p = math.prod(ks), math.prod(out_sp)
        off = off.astype(np.float64).reshape(n, og, k, nsp, p)
        mask = args[3].astype(ct).reshape(n, og, k, 1, p) if len(args) == 4 else None
        xg = x.astype(ct).reshape(n, og, c // og, math.prod(sp))
        # base[i]: the input coordinate of every output position's first tap along axis i
        grid = np.indices(out_sp).reshape(nsp, p)
        cols = np.empty((n, og, c // og, k, p), dtype=ct)
        for t, offs in enumerate(np.ndindex(*ks)):
            coords = [grid[i] * strides[i] - pb[i] + offs[i] * dils[i] + off[:, :, t, i] for i in range(nsp)]
            v = _sample(xg, sp, coords)
            cols[:, :, :, t] = v if mask is None else v * mask[:, :, t]
        y = grouped_matmul(w.astype(ct).reshape(w.shape[0], math.prod(w.shape[1:])), cols.reshape(n, c * k, p),
                           self.group)
        return y.reshape(n, w.shape[0], *out_sp).astype(x.dtype)


def _sample(xg: np.ndarray, sp: Sequence[int], coords: list[np.ndarray]) -> np.ndarray:
    """Multilinear interpolation of xg (N, G, Cg, S) at coords[i] (N, G, P), zero outside the input."""
    lo = [np.floor(c) for c in coords]
    out = 0.0
    for corner in np.ndindex(*(2,) * len(sp)):
        flat = np.zeros(lo[0].shape, dtype=np.int64)
        weight = np.ones(lo[0].shape)
        inside = np.ones(lo[0].shape, dtype=bool)
        for i, bit in enumerate(corner):
            idx = lo[i] + bit
            frac = coords[i] - lo[i]
            weight = weight * (frac if bit else 1.0 - frac)
            inside &= (idx >= 0) & (idx < sp[i])
            flat = flat * sp[i] + np.clip(idx, 0, sp[i] - 1).astype(np.int64)
        vals = np.take_along_axis(xg, np.broadcast_to(flat[:, :, None, :], xg.shape[:3] + flat.shape[-1:]), axis=3)
        out = out + vals * (weight * inside)[:, :, None, :].astype(xg.dtype)
    return out


@register_op
class CausalConvWithState(Op):
    """ONNX CausalConvWithState without bias/activation: inputs x (N, C, L), w (C, 1, k), past (N, C, k-1).

    Returns (depthwise valid conv over concat(past, x), the last k-1 positions of that concatenation)."""

    name = "causal_conv_with_state"
    kind = OpKind.CONV

    def compute_shape(self, inputs):
        x, w, past = inputs
        k = w.lens[-1] if w.ndim == 3 else 0
        if x.ndim != 3 or w.lens != (x.lens[1], 1, k) or k < 1 or past.lens != (x.lens[0], x.lens[1], k - 1):
            raise ShapeError(f"{self}: input {x}, weight {w} (C, 1, k) and state {past} (N, C, k-1) do not match")
        return TupleShape((Shape.of(x.dtype, x.lens), Shape.of(x.dtype, past.lens)))

    def compute(self, args):
        x, w, past = args
        full = np.concatenate([past.astype(x.dtype), x], axis=2)
        k = w.shape[2]
        y = conv_reference(full, w, (0,), (0,), (1,), (1,), x.shape[1])
        return y, np.ascontiguousarray(full[:, :, full.shape[2] - (k - 1):])
