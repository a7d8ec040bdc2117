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


@lowering("keep_strides", mode="view", note="a contiguous whose readers take any strides (patterns.py): no copy")
def keep_strides(ctx, step):
    return lambda x: x


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
