"""Per-step profiling of the gpu target's steps (Executable.profile, `fusegraph perf --profile`).

On CUDA each step is bracketed by two timing events on the current stream; the device times are
read after one synchronize at the end of the run (so the steps queue as they do in an eager run)
and placed on the host clock at the first event. The host time of each launch (what the CUDA graph
saves) goes to a "host" lane. Elsewhere (the Triton interpreter) steps are timed on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .device import torch


def observe_steps(device: Any, steps: Sequence[Callable[[], None]], uids: Sequence[int | None],
                  slots: Mapping[int, Any], observer: Any) -> None:
    clock = observer.clock
    wants_values = getattr(observer, "values", None) is not None

    def value(uid: int) -> Any:
        slot = slots.get(uid)
        return slot.t.clone() if wants_values and slot is not None and slot.t is not None else None

    if device.type != "cuda":
        for step, uid in zip(steps, uids):
            t0 = clock()
            step()
            if uid is not None:
                observer.step(uid, t0, clock(), value(uid))
        return
    t = torch()
    event = lambda: t.cuda.Event(enable_timing=True)  # noqa: E731
    start = event()
    start.record()
    host0 = clock()
    marks = []
    for step, uid in zip(steps, uids):
        if uid is None:  # a release: no kernel
            step()
            continue
        e0, e1 = event(), event()
        h0 = clock()
        e0.record()
        step()
        e1.record()
        h1 = clock()
        marks.append((uid, e0, e1, h0, h1, value(uid)))  # a value's copy is queued after its step
    t.cuda.synchronize(device)
    for uid, e0, e1, h0, h1, v in marks:
        d0 = host0 + int(start.elapsed_time(e0) * 1e6)  # ms after the first event, on the host clock
        d1 = host0 + int(start.elapsed_time(e1) * 1e6)
        observer.step(uid, d0, d1, v)
        observer.step(uid, h0, h1, lane="host")
