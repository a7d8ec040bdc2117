"""Resize on the gpu target: the reference's per-axis taps (nearest: index maps; linear, cubic:
weighted taps summed in its order), as one Triton kernel (triton_resize.py) that reads its input
through the movement chain before it (the resize pattern, patterns.py) and writes into its buffer,
a concat's slice included, converted to its reader's float type where the pattern took that
conversion; step by step in torch (`_Taps`) for integer types, extrapolated (tf_crop_and_resize)
outputs and wide antialiased windows."""

from __future__ import annotations

import numpy as np

from .device import torch
from .lowering import lowering


@lowering("resize", mode="into", note="a Triton kernel over the reference's taps, else the taps step by step")
def resize(ctx, step):
    from .triton_resize import ResizeLauncher, fits
    from .view_chain import apply

    rz = step.data.get("resize", step.ins)  # the step's value may be its conversion (patterns.match_resize)
    op = rz.op
    x_shape = rz.inputs[0].shape  # the step may read it through its movement chain's base
    r = x_shape.ndim
    plan = []
    tables = []  # per resized axis: (axis, idx int32 [n_out, taps], weights float32 [n_out, taps] or None)
    for axis, (n_in, n_out) in enumerate(zip(x_shape.lens, rz.shape.lens)):
        roi = (op.roi[axis], op.roi[axis + r]) if op.roi else (0.0, 1.0)
        if op.scales and np.isclose(op.scales[axis], 1.0) and n_in == n_out and roi == (0.0, 1.0):
            continue
        src, outside = op._source(axis, n_in, n_out, roi)
        if op.mode == "nearest":  # the reference picks rows of the identity: recover the indices
            picked = op._nearest(np.eye(n_in, dtype=np.float64), 0, src).argmax(axis=1)
            plan.append((axis, "index", ctx.constant(picked.astype(np.int64)), None))
            tables.append((axis, ctx.constant(picked.astype(np.int32).reshape(-1, 1)), None))
        else:  # the reference's taps, summed in its order (a matrix product makes 0 * inf)
            idx, w = op.taps(n_in, axis, src)
            plan.append((axis, "taps", (ctx.constant(idx.astype(np.int64)), ctx.constant(w)), None))
            tables.append((axis, ctx.constant(idx.astype(np.int32)), ctx.constant(w.astype(np.float32))))
        if outside is not None and outside.any():
            plan[-1] = plan[-1][:3] + (ctx.constant(outside),)
    chain = step.data.get("chain", [])
    extrapolated = any(outside is not None for *_, outside in plan)
    if not extrapolated and fits(x_shape.dtype, [t[1].shape[1] for t in tables], x_shape.elements,
                                 step.ins.shape.elements):
        launcher = ResizeLauncher(x_shape.dtype, tables, step.ins.shape.dtype)
        ctx.kernels.append(launcher)
        return lambda out, x: launcher(out, apply(x, chain))
    taps = _Taps(plan, r, op.extrapolation_value)

    def run(out, x):
        out.copy_(taps(apply(x, chain)))
    return run


class _Taps:
    """The reference's resize, axis by axis in its order (`plan`: resize's entries)."""

    def __init__(self, plan: list, rank: int, extrapolation_value: float):
        self.plan, self.r, self.value = plan, rank, extrapolation_value
        self.fills: dict = {}  # the fill value as a device scalar per dtype, made before any graph capture

    def __call__(self, x):
        t, r = torch(), self.r
        y = x
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
        return y

