"""The process's cores, handed out to cpu runs: a run takes its `threads` cores before it starts and
gives them back when it ends, first come first served, so that runs from many threads (on one
program or on several) never oversubscribe the cores.

Why: each thread that calls a cpu program gets an OpenMP team of its own (oneDNN and the generated
kernels split every kernel into `threads` static parts), so 8 callers of a 2-thread program on 2
cores made 16 runnable threads, and every kernel's team waited at its barrier for members the
scheduler had set aside. ONNX Runtime's callers share one pool per session instead. Queued here, the
runs of the default (all cores) run one after another, each with every core, and programs compiled
with fewer threads (`CompileOptions.threads`, e.g. `per_instance_threads(n)` for n instances) run
side by side as far as the cores go. A run asking for more than all the cores runs alone.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
from collections.abc import Iterator

from ..asynchronous import cores


class CoreBudget:
    def __init__(self, total: int):
        self.total = max(1, total)
        self.used = 0
        self._cv = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()

    @contextlib.contextmanager
    def take(self, n: int) -> Iterator[None]:
        """Hold `n` cores (at most all of them) for the block, waiting in line for them."""
        n = max(1, min(n, self.total))
        ticket = object()
        with self._cv:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self.used + n > self.total:
                self._cv.wait()
            self._queue.popleft()
            self.used += n
            self._cv.notify_all()  # the next in line may fit beside this run
        try:
            yield
        finally:
            with self._cv:
                self.used -= n
                self._cv.notify_all()


@functools.cache
def budget() -> CoreBudget:
    """The process's one budget (the cores it may run on)."""
    return CoreBudget(cores())


def per_instance_threads(instances: int) -> int:
    """Threads for each of `instances` programs serving at once: the cores divided among them (at
    least one each), for `CompileOptions(threads=...)`."""
    return max(1, cores() // max(1, instances))
