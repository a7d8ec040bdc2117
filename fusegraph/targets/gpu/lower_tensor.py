"""Lowerings of the tensor ops with direct torch counterparts: scans (cumsum, cumprod), top_k,
scatters, gather_nd, one_hot and bitcast. Each follows the op's numpy reference exactly (negative
indices wrap, ties in top_k go to the lower index)."""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from .device import torch, torch_dtype
from .lowering import lowering


def _static_axis(step, what: str) -> int:
    op = step.ins.op
    if op.axis is None:
        raise CompileError(f"target 'gpu': {op} takes its {what} at run time (not supported)")
    return op.axis % step.inputs[0].shape.ndim


@lowering("cumsum", "cumprod", mode="into")
def scan(ctx, step):
    op = step.ins.op
    a = _static_axis(step, "axis")
    t = torch()
    fn = t.cumsum if step.kind == "cumsum" else t.cumprod
    identity = op.ufunc.identity  # the reference's: exclusive scans shift it in first

    def run(out, x, *_):
        if op.reverse:
            x = x.flip(a)
        y = fn(x, dim=a, dtype=x.dtype)
        if op.exclusive:
            y = t.cat([t.full_like(y.narrow(a, 0, 1), identity), y.narrow(a, 0, y.shape[a] - 1)], a)
        out.copy_(y.flip(a) if op.reverse else y)
    return run


@lowering("top_k", mode="value")
def top_k(ctx, step):
    op = step.ins.op
    if op.k is None:
        raise CompileError(f"target 'gpu': {op} takes k at run time (not supported)")
    t = torch()
    axis = op.axis

    def run(x, *_):
        # a stable sort gives the reference's tie order (the lower index first)
        values, idx = t.sort(x, dim=axis, descending=op.largest, stable=True)
        return values.narrow(axis, 0, op.k), idx.narrow(axis, 0, op.k).to(t.int64)
    return run


def wrap_indices(t, idx, n):
    """ONNX indices, which count from the end when negative, as int64 (unchecked: OneHot's
    out-of-range indices are defined, and it only compares them; indexing steps use
    ctx.index_checks.wrapper, which checks and clamps)."""
    idx = idx.to(t.int64)
    return t.where(idx < 0, idx + n, idx)


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _last_update_wins(t, pos, upd, n):
    """`upd` (one row per entry of `pos`, flat positions among n) with each row replaced by that of the
    last entry writing the same position. A device scatter writes duplicates in no set order; given
    equal rows, any order gives the reference's result (ops/indexing._scatter: the last update wins).
    No host sync, so a CUDA graph may capture it."""
    order = t.arange(pos.numel(), device=pos.device)
    last = t.full((n,), -1, dtype=t.int64, device=pos.device).scatter_reduce_(0, pos, order, "amax")
    return upd[last[pos]]


@lowering("scatter_elements", mode="into")
def scatter_elements(ctx, step):
    op = step.ins.op
    t = torch()
    shape = step.inputs[0].shape.lens
    numel = int(np.prod(shape, dtype=np.int64))
    wrap = ctx.index_checks.wrapper(op, shape[op.axis])

    def run(out, data, idx, upd):
        idx = wrap(idx)
        if op.reduction != "none":
            out.copy_(data)
            out.scatter_reduce_(op.axis, idx, upd, reduce=_REDUCE[op.reduction], include_self=True)
            return
        # the flat position each update writes: indices may cover less than data off the axis
        where = t.arange(numel, device=idx.device).view(shape)
        where = where[tuple(slice(None) if d == op.axis else slice(0, k) for d, k in enumerate(idx.shape))]
        pos = where.gather(op.axis, idx).reshape(-1)
        res = data.contiguous().clone()
        res.view(-1).index_copy_(0, pos, _last_update_wins(t, pos, upd.reshape(-1), numel))
        out.copy_(res)
    return run


@lowering("scatter_nd", mode="into")
def scatter_nd(ctx, step):
    op = step.ins.op
    t = torch()
    data_shape = step.inputs[0].shape.lens
    m = step.inputs[1].shape.lens[-1]

    wrap = ctx.index_checks.wrapper(op, data_shape[:m])

    def run(out, data, idx, upd):
        res = data.contiguous().clone()
        flat = wrap(idx.reshape(-1, m))
        lin = t.zeros(flat.shape[0], dtype=t.int64, device=idx.device)
        for k in range(m):  # row-major offset of each index tuple in the leading m dims
            lin = lin * data_shape[k] + flat[:, k]
        rows = res.view(-1, *data_shape[m:])
        u = upd.reshape(-1, *data_shape[m:])
        if op.reduction == "none":
            rows.index_copy_(0, lin, _last_update_wins(t, lin, u, rows.shape[0]))
        elif op.reduction == "add":
            rows.index_add_(0, lin, u)
        else:
            rows.index_reduce_(0, lin, u, _REDUCE[op.reduction], include_self=True)
        out.copy_(res)
    return run


@lowering("gather_nd", mode="into")
def gather_nd(ctx, step):
    op = step.ins.op
    t = torch()
    data_shape = step.inputs[0].shape.lens
    b = op.batch_dims
    m = step.inputs[1].shape.lens[-1]
    wrap = ctx.index_checks.wrapper(op, data_shape[b:b + m])

    def run(out, data, idx):
        n_batch = 1
        for d in data_shape[:b]:
            n_batch *= d
        flat_data = data.reshape(n_batch, *data_shape[b:])
        flat_idx = wrap(idx.reshape(n_batch, -1, m))
        batch = t.arange(n_batch, device=idx.device)[:, None]
        picked = flat_data[(batch, *flat_idx.unbind(-1))]
        out.copy_(picked.reshape(out.shape))
    return run


@lowering("one_hot", mode="into")
def one_hot(ctx, step):
    op = step.ins.op
    if op.depth is None:
        raise CompileError(f"target 'gpu': {op} takes its depth at run time (not supported)")
    t = torch()
    idx_ndim = step.inputs[0].shape.ndim

    def run(out, idx, *rest):
        values = rest[-1].reshape(2)
        hot = wrap_indices(t, idx.trunc() if idx.dtype.is_floating_point else idx, op.depth).unsqueeze(op.axis)
        positions = t.arange(op.depth, device=idx.device).reshape((-1,) + (1,) * (idx_ndim - op.axis))
        out.copy_(t.where(positions == hot, values[1], values[0]))
    return run


@lowering("bitcast", mode="into")
def bitcast(ctx, step):
    target = torch_dtype(step.ins.op.to)

    def run(out, x):
        out.copy_(x.contiguous().view(target))
    return run


@lowering("dropout", mode="value", note="inference only: the identity and an all-true mask")
def dropout(ctx, step):
    ratio, training = (step.inputs + [None, None])[1:3]
    if training is not None and (not training.is_literal or bool(training.literal.reshape(-1)[0])):
        if not (ratio is not None and ratio.is_literal and float(ratio.literal.reshape(-1)[0]) == 0):
            raise CompileError(f"target 'gpu': {step.ins.op} in training mode (random masks) has no lowering")
    t = torch()
    return lambda x, *_: (x, t.ones(x.shape, dtype=t.bool, device=x.device))
