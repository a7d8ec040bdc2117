"""If, Scan and Loop steps as native calls: the whole control flow one record of a native program.

A Scan or Loop step iterated from Python pays ~10 us an iteration around its body (the body's
environment, staging its parameters, a native region's call, copying its outputs out, slicing and
stacking); scan_rnn's two 10-step scans took 0.19 ms for 20 tiny bodies. An If pays the body's
run from Python. Where each body is one native region (native_program.Region, or no step at all)
over buffers of this thread's, the step's C form is:

    copy the enclosing values the body reads into its staged buffers
    If: IF the condition: the then-body's calls, else the else-body's; each copies its results out
    Scan / Loop:
    copy the initial states into the body's state parameters
    LOOP count times:                      (Scan: its static length; Loop: its trip count, read at
        copy slice t of each scan input       run time, none when its condition is false)
        the body region's calls
        copy the scan outputs into slice t of the step's results
        copy the new states into the state parameters
    copy the state parameters into the step's results

so the results are bit for bit the Python step's (the same kernels on the same buffers). Covered:
Scan without batching (opset 9+) over axis 0, either direction; a Loop whose condition stays true
(ends by its trip count: TorchScript's `for`) and that has no scan outputs; If whose branches give
results of one shape (a branch with no C form stops the region when taken: the If runs as its
Python step). A body that reads an enclosing value which moves (not in a buffer of the
thread's), holds control flow itself, or returns a parameter or an enclosing value keeps the
Python step. A loop past the run's max_loop_iterations stops the region (native_program.Region
checks the bound) and the Python step raises its error.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...ops.control import _condition_stays_true
from .native_program import COPY_AT, GUARD, IF, LOOP, NO_BOUND, Call, FgCall, Region, copy, guard


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
    the body is one native region or none; `pre` copies the enclosing values it reads (from
    `stable`, the enclosing module's values that stay where they are) into its staged buffers."""

    def __init__(self, steps: Any, stable: dict[int, Any]):
        rows, _ = steps.thread_plan()
        region = rows[0][0] if len(rows) == 1 and isinstance(rows[0][0], Region) else None
        literals = steps._outer_literals()
        staged = dict(steps._local.staged)
        moving = [u for u in steps.outer if u not in literals]
        self.ok = ((region is not None and not region.loop_bounds and not any(r[4] for r in region.rows)) or not rows) \
            and all(u in staged and isinstance(stable.get(u), np.ndarray) for u in moving)
        if not self.ok:
            return
        self.pre = [copy(staged[u], stable[u]) for u in moving]
        self.ok = all(c is not None for c in self.pre)
        self.params = [staged.get(uid) for uid, _ in steps.params]
        known = {**steps._local.base, **({} if region is None else {r[2]: r[5] for r in region.rows})}
        self.outputs = [known.get(u) if u not in staged else None for u in steps.outputs]
        self.calls = [] if region is None else region.calls


def _dense(*arrays: np.ndarray | None) -> bool:
    return all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays)


def native_scan(op: Any, steps: Any, args: list[np.ndarray], out: Any, stable: dict) -> list[Call] | None:
    ns = op.n_states
    states, xs = args[:ns], args[ns:]
    if (op.batched or not xs or any(op.input_axes) or any(op.output_axes) or not isinstance(out, tuple)
            or not _dense(*xs)):
        return None
    length = xs[0].shape[0]
    body = _Body(steps, stable)
    if not body.ok or length == 0 or not _dense(*body.params[:ns], *body.outputs):
        return None
    first = body.pre + [copy(p, s) for p, s in zip(body.params, states)]
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


def native_loop(op: Any, steps: Any, args: list[np.ndarray], out: Any, stable: dict) -> list[Call] | None:
    limit, cond, *init = args
    n = len(init)
    if (len(steps.outputs) != n + 1 or not isinstance(out, tuple) or not _condition_stays_true(steps.module)
            or limit.dtype != np.int64 or limit.size != 1 or cond.dtype != np.bool_ or cond.size != 1
            or not _dense(limit, cond)):
        return None
    body = _Body(steps, stable)
    if not body.ok or not _dense(*body.params[2:], *body.outputs[1:]):
        return None
    iteration, go = body.params[:2]
    if iteration is not None and (iteration.dtype != np.int64 or iteration.size != 1):
        return None
    # the condition parameter reads true in every iteration that runs (it stays true)
    first = body.pre + ([] if go is None else [copy(go, cond)]) + [copy(p, s) for p, s in zip(body.params[2:], init)]
    inner = body.calls + [copy(p, y) for p, y in zip(body.params[2:], body.outputs[1:])]
    last = [copy(o, p) for o, p in zip(out, body.params[2:]) if o is not None]
    if any(c is None for c in first + inner + last):
        return None
    return [*first, loop(inner, limit, iteration, cond), *last]


def native_if(op: Any, branches: tuple, args: list[np.ndarray], out: Any, stable: dict) -> list[Call] | None:
    (cond,) = args
    if cond.dtype != np.bool_ or cond.size != 1 or not isinstance(out, tuple):
        return None
    tables = []
    for steps in branches:
        body = _Body(steps, stable)
        calls = None
        if body.ok and all(o is None or _dense(o, y) for o, y in zip(out, body.outputs, strict=True)):
            calls = [*body.pre, *body.calls, *(copy(o, y) for o, y in zip(out, body.outputs) if o is not None)]
        # a branch with no C form (silero-vad's trap for a sample rate it does not take) stops the
        # region when taken: the If then runs as its Python step
        tables.append(guard(_NAN) if calls is None or any(c is None for c in calls) else calls)
    if all(t and t[0][0][0] == GUARD and t[0][1][0] is _NAN for t in tables):  # neither branch is C
        return None
    return [branch(cond, *tables)]


_NAN = np.full(1, np.nan, np.float32)  # a guard over it always stops the region


def branch(cond: np.ndarray, then: list[Call], other: list[Call]) -> Call:
    """`then` where the one-element bool `cond` is true, else `other`."""
    a, b = ((FgCall * max(len(t), 1))(*[FgCall(*record) for record, _ in t]) for t in (then, other))
    counts = (ctypes.c_int64 * 2)(len(then), len(other))
    return ((IF, 1, ctypes.addressof(a), cond.ctypes.data, ctypes.addressof(b), ctypes.addressof(counts), 0),
            ([objs for _, objs in then + other], a, b, counts, cond))


NATIVE = {"scan": native_scan, "loop": native_loop}
