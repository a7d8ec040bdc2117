"""Lowerings of data movement: views (free when they alias a fixed tensor), copies into the arena
(concat, pad, slices with negative steps), indexing (gather, gather_elements) and resize, whose
per-axis source maps are computed at build time from the reference's own coordinate rules."""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ...ops.layout import PAD_MODES
from .device import torch
from .lowering import lowering


@lowering("broadcast", mode="view")
def broadcast(ctx, step):
    lens = tuple(step.ins.op.out_lens)
    return lambda x: x.broadcast_to(lens)


@lowering("broadcast_for_dot", mode="view")
def broadcast_for_dot(ctx, step):
    lens = step.ins.shape.lens
    return lambda x, other=None: x.broadcast_to(lens)


@lowering("transpose", mode="view")
def transpose(ctx, step):
    perm = tuple(step.ins.op.perm)
    return lambda x: x.permute(perm)


@lowering("reshape", "squeeze", "unsqueeze", "flatten", mode="view")
def reshape(ctx, step):
    lens = step.ins.shape.lens
    return lambda x: x.reshape(lens)  # a view when the layout allows, else a copy every run


@lowering("contiguous", mode="view")
def contiguous(ctx, step):
    return lambda x: x.contiguous()


@lowering("get_tuple_elem", mode="view")
def get_tuple_elem(ctx, step):
    index = step.ins.op.index
    return lambda x: x[index]


@lowering("slice", mode="view")
def slice_(ctx, step):
    op = step.ins.op
    index: list = [slice(None)] * step.inputs[0].shape.ndim
    flips = []
    for a, s, e, st in zip(op.axes, op.starts, op.ends, op.steps):
        if st > 0:
            index[a] = slice(s, e, st)
        else:  # torch has no negative steps: take the positions as an index list (a copy)
            flips.append((a, ctx.constant(np.arange(s, e, st, dtype=np.int64))))
    index_t = tuple(index)

    def run(x):
        x = x[index_t]
        for a, idx in flips:
            x = x.index_select(a, idx)
        return x
    return run


@lowering("concat", mode="into", note="copies the inputs not already computed into their slices")
def concat(ctx, step):
    t = torch()
    axis = step.ins.op.axis
    aliased = step.data.get("aliased", set())
    if not aliased:
        return lambda out, *xs: t.cat(xs, dim=axis, out=out)
    parts, start = [], 0
    for k, x in enumerate(step.inputs):
        n = x.shape.lens[axis]
        if k not in aliased:
            parts.append((k, start, n))
        start += n

    def run(out, *xs):
        for k, s0, n in parts:
            out.narrow(axis, s0, n).copy_(xs[k])
    return run


@lowering("pad", mode="into")
def pad(ctx, step):
    op = step.ins.op
    if op.mode not in PAD_MODES:
        raise CompileError(f"target 'gpu': {op}: unknown pad mode")
    r = step.inputs[0].shape.ndim
    begins = op.pads[:r]
    inner = tuple(slice(b, b + n) for b, n in zip(begins, step.inputs[0].shape.lens))
    if op.mode == "constant":
        value = op.value

        def run_constant(out, x):
            out.fill_(value)
            out[inner].copy_(x)
        return run_constant
    # edge / reflect / wrap: gather every output position's source index, axis by axis
    idx = []
    for a in range(r):
        n, b, m = step.inputs[0].shape.lens[a], begins[a], step.ins.shape.lens[a]
        pos = np.arange(m) - b
        if op.mode == "edge":
            src = np.clip(pos, 0, n - 1)
        elif op.mode == "wrap":
            src = np.mod(pos, n)
        else:  # reflect (without repeating the edge)
            period = 2 * (n - 1) if n > 1 else 1
            k = np.mod(pos, period)
            src = np.where(k < n, k, period - k) if n > 1 else np.zeros_like(pos)
        idx.append(None if (m == n and b == 0) else ctx.constant(src.astype(np.int64)))

    def run_index(out, x):
        for a, ix in enumerate(idx):
            if ix is not None:
                x = x.index_select(a, ix)
        out.copy_(x)
    return run_index


@lowering("gather", mode="into")
def gather(ctx, step):
    axis = step.ins.op.axis
    wrap = ctx.index_checks.wrapper(step.ins.op, step.inputs[0].shape.lens[axis])

    def run(out, data, idx):
        picked = data.index_select(axis, wrap(idx).reshape(-1))
        out.copy_(picked.reshape(out.shape))
    return run


@lowering("gather_elements", mode="into")
def gather_elements(ctx, step):
    axis = step.ins.op.axis
    t = torch()
    wrap = ctx.index_checks.wrapper(step.ins.op, step.inputs[0].shape.lens[axis])

    def run(out, data, idx):
        t.gather(data, axis, wrap(idx), out=out)
    return run


@lowering("resize", mode="value", note="per-axis index maps (nearest) or the reference's weighted taps")
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
    fills: dict = {}  # the fill value as a device scalar per dtype, made before any graph capture
    if _torch_nearest(plan, x_shape.lens, step.ins.shape.lens):
        size = tuple(step.ins.shape.lens[2:])
        F = t.nn.functional
        return lambda x: F.interpolate(x, size=size, mode="nearest")  # one kernel, keeps the layout
    align = _torch_linear(plan, host_taps, x_shape.lens, step.ins.shape.lens)
    if align is not None and x_shape.dtype.name in ("float16", "bfloat16", "float32"):
        size = tuple(step.ins.shape.lens[2:])
        F, how = t.nn.functional, ("linear", "bilinear", "trilinear")[r - 3]
        return lambda x: F.interpolate(x, size=size, mode=how, align_corners=align)

    def run(x):
        y = x
        for axis, kind, arg, outside in plan:
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
                if y.dtype not in fills:
                    fills[y.dtype] = t.tensor(op.extrapolation_value, dtype=y.dtype, device=y.device)
                y = t.where(outside.reshape(shape), fills[y.dtype], y)
        if y.dtype != x.dtype:  # back to the input type, rounded and saturated like the reference
            if x.dtype == t.bool:
                y = y != 0
            else:
                info = t.finfo(x.dtype) if x.dtype.is_floating_point else t.iinfo(x.dtype)
                y = (y if x.dtype.is_floating_point else t.round(y)).clamp(info.min, info.max).to(x.dtype)
        return y.contiguous(memory_format=_format_of(x))
    return run


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
