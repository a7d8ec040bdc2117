"""Resize on the gpu target: nearest as index maps (torch's interpolate where its sources are the
reference's), linear and cubic as the reference's weighted taps summed in its order, and linear as
torch's one interpolate kernel where its weights are the reference's, with the few output positions
where torch multiplies a tap by zero (an infinity there makes a NaN the reference does not) taken
from the taps."""

from __future__ import annotations

import numpy as np

from .device import torch
from .lowering import lowering


@lowering("resize", mode="value", note="per-axis index maps (nearest), torch's interpolate, or the reference's taps")
def resize(ctx, step):
    op = step.ins.op
    x_shape = step.inputs[0].shape
    r = x_shape.ndim
    plan = []
    host_taps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for axis, (n_in, n_out) in enumerate(zip(x_shape.lens, step.ins.shape.lens)):
        roi = (op.roi[axis], op.roi[axis + r]) if op.roi else (0.0, 1.0)
        if op.scales and np.isclose(op.scales[axis], 1.0) and n_in == n_out and roi == (0.0, 1.0):
            continue
        src, outside = op._source(axis, n_in, n_out, roi)
        if op.mode == "nearest":  # the reference picks rows of the identity: recover the indices
            picked = op._nearest(np.eye(n_in, dtype=np.float64), 0, src)
            plan.append((axis, "index", ctx.constant(picked.argmax(axis=1).astype(np.int64)), None))
        else:  # the reference's taps, summed in its order (a matrix product makes 0 * inf)
            idx, w = op.taps(n_in, axis, src)
            plan.append((axis, "taps", (ctx.constant(idx.astype(np.int64)), ctx.constant(w)), None))
            host_taps[axis] = (idx, w)
        if outside is not None and outside.any():
            plan[-1] = plan[-1][:3] + (ctx.constant(outside),)
    t = torch()
    F = t.nn.functional
    size = tuple(step.ins.shape.lens[2:])
    if _torch_nearest(plan, x_shape.lens, step.ins.shape.lens):
        return lambda x: F.interpolate(x, size=size, mode="nearest")  # one kernel, keeps the layout
    taps = _Taps(plan, r, op.extrapolation_value)
    align = _torch_linear(plan, host_taps, x_shape.lens, step.ins.shape.lens)
    if align is None or x_shape.dtype.name not in ("float16", "bfloat16", "float32"):
        return taps
    how = ("linear", "bilinear", "trilinear")[r - 3]
    fixes = []  # (axis, output positions, the taps computing just those) where torch reads a zero-weight tap
    for axis, _, _, _ in plan:
        idx, w = host_taps[axis]
        where = np.flatnonzero(_zero_tap(x_shape.lens[axis], step.ins.shape.lens[axis], align) | (w == 0).any(axis=1))
        if where.size:
            fixes.append((axis, ctx.constant(where.astype(np.int64)), _restricted(ctx, taps, axis, idx[where], w[where])))

    def run(x):
        y = F.interpolate(x, size=size, mode=how, align_corners=align)
        for axis, where, part in fixes:
            y.index_copy_(axis, where, part(x))
        return y
    return run


class _Taps:
    """The reference's resize, axis by axis in its order (`plan`: resize's entries)."""

    def __init__(self, plan: list, rank: int, extrapolation_value: float, first: tuple | None = None):
        self.plan, self.r, self.value = plan, rank, extrapolation_value
        self.first = first  # (axis, source indices): that axis's input narrowed first (_restricted)
        self.fills: dict = {}  # the fill value as a device scalar per dtype, made before any graph capture

    def __call__(self, x):
        t, r = torch(), self.r
        y = x if self.first is None else x.index_select(*self.first)
        for axis, kind, arg, outside in self.plan:
            if kind == "index":
                y = y.index_select(axis, arg)
            else:  # float32 math (float64 for float64 and integers), as the reference
                work = t.float32 if y.dtype in (t.float16, t.bfloat16, t.float32) else t.float64
                yf, (idx, w) = y.to(work), arg
                shape = [1] * r
                shape[axis] = -1
                y = None
                for k in range(idx.shape[1]):
                    term = yf.index_select(axis, idx[:, k]) * w[:, k].to(work).reshape(shape)
                    y = term if y is None else y + term
            if outside is not None:
                shape = [1] * r
                shape[axis] = -1
                if y.dtype not in self.fills:
                    self.fills[y.dtype] = t.tensor(self.value, dtype=y.dtype, device=y.device)
                y = t.where(outside.reshape(shape), self.fills[y.dtype], y)
        if y.dtype != x.dtype:  # back to the input type, rounded and saturated like the reference
            if x.dtype == t.bool:
                y = y != 0
            else:
                info = t.finfo(x.dtype) if x.dtype.is_floating_point else t.iinfo(x.dtype)
                y = (y if x.dtype.is_floating_point else t.round(y)).clamp(info.min, info.max).to(x.dtype)
        return y.contiguous(memory_format=_format_of(x))


def _restricted(ctx, taps: _Taps, axis: int, idx: np.ndarray, w: np.ndarray) -> _Taps:
    """The taps computing only the outputs whose taps along `axis` are `idx`, `w`: the input narrowed
    first to the sources they read along that axis (the other axes' sums act on each of those alone,
    so every output is summed as in the whole resize)."""
    sources, local = np.unique(idx, return_inverse=True)
    plan = [(a, kind, (ctx.constant(local.reshape(idx.shape).astype(np.int64)), ctx.constant(w)) if a == axis else arg,
             outside) for a, kind, arg, outside in taps.plan]
    return _Taps(plan, taps.r, taps.value, (axis, ctx.constant(sources.astype(np.int64))))


def _zero_tap(n_in: int, n_out: int, align: bool) -> np.ndarray:
    """The outputs along an axis where torch's linear interpolation weighs a tap by zero (an exact or
    edge-clamped source): its CUDA kernel's float32 source coordinate, within 1e-6 of a whole one."""
    o = np.arange(n_out, dtype=np.float32)
    if align:
        src = o * np.float32((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = np.maximum(np.float32(n_in / n_out) * (o + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    frac = src - np.floor(src)
    return (frac < 1e-6) | (frac > 1 - 1e-6)


def _torch_nearest(plan, in_lens, out_lens) -> bool:
    """Whether every resized axis is spatial and picks torch's nearest source floor(i * in / out)."""
    if not plan or any(kind != "index" or outside is not None or axis < 2 for axis, kind, _, outside in plan):
        return False
    if len(in_lens) not in (3, 4, 5):
        return False
    for axis, _, idx, _ in plan:
        n_in, n_out = in_lens[axis], out_lens[axis]
        torch_src = np.floor(np.arange(n_out, dtype=np.float32) * np.float32(n_in / n_out)).astype(np.int64)
        if not np.array_equal(torch_src, idx.cpu().numpy()):
            return False
    return True


def _torch_linear(plan, host_taps, in_lens, out_lens) -> bool | None:
    """torch's align_corners (False or True) under which its (bi/tri)linear interpolation takes the
    reference's taps on every resized axis, all of them spatial; None where neither does.

    The taps path runs 3-4 kernels per axis in float32 (SegFormer-B0's decoder upsamples 4 maps of
    8x256x128x128: ~0.9 ms and 128 MiB of float32 each on the H200, issue 23); torch's kernel is one,
    accumulating in float32 too. Checked per axis on the host: the reference's weights as an
    out x in matrix against torch's for an identity input (half_pixel, pytorch_half_pixel with more
    than one output, align_corners and asymmetric at some scales match; tf_crop_and_resize, antialias
    and cubic never get here or do not match)."""
    if not plan or any(kind != "taps" or outside is not None or axis < 2 for axis, kind, _, outside in plan):
        return None
    if len(plan) != len(in_lens) - 2:  # torch interpolates every spatial axis: an unchanged one weighs
        return None                    # a tap by zero at every position (0 * inf)
    if len(in_lens) not in (3, 4, 5) or any(in_lens[a] > 4096 for a, *_ in plan):
        return None
    t = torch()
    for align in (False, True):
        if all(_same_weights(*host_taps[axis], in_lens[axis], out_lens[axis], align, t) for axis, *_ in plan):
            return align
    return None


def _same_weights(idx: np.ndarray, w: np.ndarray, n_in: int, n_out: int, align: bool, t) -> bool:
    ref = np.zeros((n_out, n_in))
    np.add.at(ref, (np.repeat(np.arange(n_out), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    eye = t.eye(n_in, dtype=t.float64).reshape(n_in, 1, n_in)
    ours = t.nn.functional.interpolate(eye, size=n_out, mode="linear", align_corners=align)[:, 0, :].T.numpy()
    return bool(np.allclose(ref, ours, rtol=0, atol=1e-6))


def _format_of(x):
    t = torch()
    if x.dim() == 4 and x.is_contiguous(memory_format=t.channels_last) and not x.is_contiguous():
        return t.channels_last
    return t.contiguous_format
