"""The process's cores, handed out to the cpu target's async runs: a `run_async` worker takes its
run's `threads` cores before the run starts and gives them back when it ends, first come first
served, so the async runs of one program or of several never oversubscribe the cores (each thread
that runs a cpu program gets an OpenMP team of its own: oneDNN and the generated kernels split
every kernel into `threads` static parts). A run asking for more than all the cores runs alone.

`run` called from the user's own threads does not take from the budget: queueing those runs one
after another halved ResNet-50's throughput and doubled its p99 at 8 client threads on the busy
2-core VM (another process spinning one core; 0.54-0.68 against 0.98-1.14 requests/s, p99 13.3-17.7
against 8.0-9.2 s, three rounds alternating), where more threads win more of the contended cores
and libgomp throttles its spinning once it has more threads than cores. N instances serving at
once: compile each with `threads=per_instance_threads(N)`.
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
