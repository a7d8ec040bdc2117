"""Spans of a compile's phases, from every thread that works on it: where a cold compile's time goes.

A target opens `recording()` around the part of a compile it wants seen; code below it, in any
module, marks its phases with `span(name)` (a no-op, one context-variable read, when nothing
records). Work handed to other threads takes the log along (`current()`, then `PhaseLog.add`): the
gpu target's kernel compiles each record a span in the lane of the thread that compiled it. The
spans are (name, lane, start ns, end ns) on `time.perf_counter_ns()`'s clock, the clock of a
profile's runs, so `fusegraph trace` draws them beside the parse, the passes and the runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator

MAIN = "compile"  # the lane of the thread that compiles


class PhaseLog:
    """The spans one compile recorded (appended from any thread)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, int, int]] = []
        self._lock = threading.Lock()

    def add(self, name: str, lane: str, start_ns: int, end_ns: int) -> None:
        with self._lock:
            self.spans.append((name, lane, start_ns, end_ns))

    @contextlib.contextmanager
    def span(self, name: str, lane: str = MAIN) -> Iterator[None]:
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            self.add(name, lane, t0, time.perf_counter_ns())


_current: contextvars.ContextVar[PhaseLog | None] = contextvars.ContextVar("fusegraph_phase_log", default=None)


def current() -> PhaseLog | None:
    """The log being recorded in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def recording() -> Iterator[PhaseLog]:
    """A new log for the spans marked inside this scope (a scope inside another records apart)."""
    log = PhaseLog()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def span(name: str, lane: str = MAIN) -> contextlib.AbstractContextManager[None]:
    """A span of the log being recorded, else nothing."""
    log = _current.get()
    return log.span(name, lane) if log is not None else contextlib.nullcontext()
