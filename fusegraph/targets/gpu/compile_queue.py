"""The compile scopes' threads (kernels.compile_all / compile_async), which take first the compiles a
choice waits for.

The warm-up's walk submits every step's kernels in program order; after it, each tuned GEMM waits
for its candidates' compiles, times them and submits the chosen config's K-constant kernel. In a
first-in-first-out pool the candidates of the last layers queued behind the pointwise kernels of
the layers before them, and the chosen kernels behind everything, so the choices, then those
compiles, ran after the wave, with most cores idle (on the H200 machine Llama-small b32 made its last
choice at 1.71 s and finished compiling at 3.28 s; DeepLabV3-MobileNetV3 b32 3.08 / 6.27 s). Here a
compile submitted inside `urgent()` (a GEMM template's, for its choice or after it) goes before
every other compile still queued, in the order submitted; the others keep theirs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

_urgent: contextvars.ContextVar[bool] = contextvars.ContextVar("fusegraph_urgent_compile", default=False)


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """A scope whose compile submissions (on this thread) go before the others queued."""
    token = _urgent.set(True)
    try:
        yield
    finally:
        _urgent.reset(token)


class PriorityThreads(concurrent.futures.Executor):
    """`workers` threads serving submissions, those made inside `urgent()` first; each thread runs
    `initializer` before its first."""

    def __init__(self, workers: int, initializer: Callable[[], None] | None = None):
        self._queue: list[tuple] = []
        self._ready = threading.Condition()
        self._order = itertools.count()
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, args=(initializer,), daemon=True,
                                          name=f"fusegraph-compile-{i}") for i in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("cannot submit a compile after the scope's threads were shut down")
            heapq.heappush(self._queue, (not _urgent.get(), next(self._order), future, fn, args, kwargs))
            self._ready.notify()
        return future

    def _serve(self, initializer: Callable[[], None] | None) -> None:
        if initializer is not None:
            initializer()
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                _, _, future, fn, args, kwargs = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - the future carries it to whoever waits
                future.set_exception(e)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._closed = True
            if cancel_futures:
                for _, _, future, *_ in self._queue:
                    future.cancel()
            self._ready.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()
