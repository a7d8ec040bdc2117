"""Scan and Loop steps as native calls: the whole loop one record of a native program.

A Scan or Loop step iterated from Python pays ~10 us an iteration around its body (the body's
environment, staging its parameters, a native region's call, copying its outputs out, slicing and
stacking); scan_rnn's two 10-step scans took 0.19 ms for 20 tiny bodies. Where the body is one
native region (native_program.Region) over buffers of this thread's, the step's C form is:

    copy the initial states into the body's state parameters
    LOOP count times:                      (Scan: its static length; Loop: its trip count, read at
        copy slice t of each scan input       run time, none when its condition is false)
        the body region's calls
        copy the scan outputs into slice t of the step's results
        copy the new states into the state parameters
    copy the state parameters into the step's results

so the results are bit for bit the Python iteration's (the same kernels on the same buffers).
Covered: Scan without batching (opset 9+) over axis 0, either direction; a Loop whose condition
stays true (ends by its trip count: TorchScript's `for`) and that has no scan outputs. A body that
reads moving values of the enclosing module (not literals), holds a loop itself, or returns a
parameter keeps the Python iteration. A loop past the run's max_loop_iterations stops the region
(native_program.Region checks the bound) and the Python step raises its error.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...ops.control import _condition_stays_true
from .native_program import COPY_AT, LOOP, NO_BOUND, Call, FgCall, Region, copy


def loop(calls: list[Call], count: np.ndarray, iteration: np.ndarray | None = None,
         cond: np.ndarray | None = None) -> Call:
    """`calls` run count[0] times (none where `cond` is false), the iteration written to `iteration`.
    The geometry [count's address, bound] is the record's last object: Region writes the bound."""
    table = (FgCall * len(calls))(*[FgCall(*record) for record, _ in calls])
    geometry = np.array([count.ctypes.data, NO_BOUND], np.int64)
    record = (LOOP, 1, ctypes.addressof(table), 0 if iteration is None else iteration.ctypes.data,
              geometry.ctypes.data, 0 if cond is None else cond.ctypes.data, len(calls))
    return record, ([objs for _, objs in calls], table, count, iteration, cond, geometry)


def copy_at(dst: np.ndarray, dst_step: int, src: np.ndarray, src_step: int, nbytes: int,
            dst_first: int = 0, src_first: int = 0) -> Call:
    """memcpy of `nbytes` to dst + dst_first + t * dst_step from src + src_first + t * src_step
    (byte offsets) in iteration t of the loop around it."""
    geometry = (ctypes.c_int64 * 3)(nbytes, dst_step, src_step)
    return ((COPY_AT, 1, 0, dst.ctypes.data + dst_first, src.ctypes.data + src_first, ctypes.addressof(geometry), 0),
            (dst, src, geometry))


class _Body:
    """A body's parameters' buffers (None: not read) and its outputs' arrays, on this thread, when
    the body is one native region; `calls` its records."""

    def __init__(self, steps: Any):
        rows, _ = steps.thread_plan()
        self.ok = (len(rows) == 1 and isinstance(rows[0][0], Region) and not rows[0][0].loop_bounds
                   and set(steps.outer) <= set(steps._outer_literals()))
        if not self.ok:
            return
        region = rows[0][0]
        staged = dict(steps._local.staged)
        self.params = [staged.get(uid) for uid, _ in steps.params]
        known = {**steps._local.base, **{r[2]: r[5] for r in region.rows}}
        self.outputs = [known.get(u) if u not in staged else None for u in steps.outputs]
        self.calls = region.calls


def _dense(*arrays: np.ndarray | None) -> bool:
    return all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays)


def native_scan(op: Any, steps: Any, args: list[np.ndarray], out: Any) -> list[Call] | None:
    ns = op.n_states
    states, xs = args[:ns], args[ns:]
    if (op.batched or not xs or any(op.input_axes) or any(op.output_axes) or not isinstance(out, tuple)
            or not _dense(*xs)):
        return None
    length = xs[0].shape[0]
    body = _Body(steps)
    if not body.ok or length == 0 or not _dense(*body.params[:ns], *body.outputs):
        return None
    first = [copy(p, s) for p, s in zip(body.params, states)]
    inner = []
    for x, p, rev in zip(xs, body.params[ns:], op.input_reverse, strict=True):
        if p is not None:  # slice t (from the end when reversed) into the body's parameter
            size = p.nbytes
            inner.append(copy_at(p, 0, x, -size if rev else size, size, src_first=(length - 1) * size if rev else 0))
    inner += body.calls
    for o, y, rev in zip(out[ns:], body.outputs[ns:], op.output_reverse, strict=True):
        if o is not None:
            if not _dense(o) or o.nbytes != length * y.nbytes:
                return None
            size = y.nbytes
            inner.append(copy_at(o, -size if rev else size, y, 0, size, dst_first=(length - 1) * size if rev else 0))
    inner += [copy(p, y) for p, y in zip(body.params[:ns], body.outputs[:ns])]
    last = [copy(o, p) for o, p in zip(out[:ns], body.params[:ns]) if o is not None]
    if any(c is None for c in first + inner + last):
        return None
    return [*first, loop(inner, np.array([length], np.int64)), *last]


def native_loop(op: Any, steps: Any, args: list[np.ndarray], out: Any) -> list[Call] | None:
    limit, cond, *init = args
    n = len(init)
    if (len(steps.outputs) != n + 1 or not isinstance(out, tuple) or not _condition_stays_true(steps.module)
            or limit.dtype != np.int64 or limit.size != 1 or cond.dtype != np.bool_ or cond.size != 1
            or not _dense(limit, cond)):
        return None
    body = _Body(steps)
    if not body.ok or not _dense(*body.params[2:], *body.outputs[1:]):
        return None
    iteration, go = body.params[:2]
    if iteration is not None and (iteration.dtype != np.int64 or iteration.size != 1):
        return None
    # the condition parameter reads true in every iteration that runs (it stays true)
    first = ([] if go is None else [copy(go, cond)]) + [copy(p, s) for p, s in zip(body.params[2:], init)]
    inner = body.calls + [copy(p, y) for p, y in zip(body.params[2:], body.outputs[1:])]
    last = [copy(o, p) for o, p in zip(out, body.params[2:]) if o is not None]
    if any(c is None for c in first + inner + last):
        return None
    return [*first, loop(inner, limit, iteration, cond), *last]


NATIVE = {"scan": native_scan, "loop": native_loop}
