"""`Pipeline`: stages run one after another per request, and across requests at once.

`run(request)` takes one request through every stage in the calling thread. `submit(request)`
hands it to the stage threads (made on the first submit): one thread per stage, a bounded queue
before each (`queue_size` requests), so stage i works on request n+1 while stage i+1 works on
request n, and a slow stage holds the ones before it back instead of letting requests pile up.
A stage's error fails its request only (a StageError naming the stage, the error as its cause);
the other requests go on. On the gpu target the overlap is also on the device: each gpu stage
queues on a stream of its own, after the previous stage's event (stages.py).

cpu stages take their cores from the process's budget (targets/cpu/cores.py): two cpu stages of
all the cores run one at a time; compiled with `threads=per_instance_threads(n)` they overlap.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import ArgumentError, FusegraphError
from .stages import Carried, Stage, as_stage

_END = object()  # tells a stage thread to pass it on and stop


class StageError(FusegraphError):
    """A pipeline stage failed on one request: `stage` (its index) and `stage_name` say which; the
    stage's own error is the cause."""

    def __init__(self, index: int, stage: Stage, error: BaseException):
        super().__init__(f"pipeline stage {index} ({stage.name}) failed: {type(error).__name__}: {error}")
        self.stage, self.stage_name = index, stage.name


class Pipeline:
    def __init__(self, stages: Sequence[Any], *, queue_size: int = 2):
        if not stages:
            raise ArgumentError("a Pipeline needs at least one stage")
        if queue_size < 1:
            raise ArgumentError(f"queue_size must be >= 1, got {queue_size}")
        self.stages = [as_stage(s) for s in stages]
        self.queue_size = queue_size
        self._queues: list[queue.Queue] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # -- one request, in this thread ----------------------------------------------------------------
    def run(self, request: Any) -> Any:
        """`request` through every stage; the last stage's value (a StageError when one fails)."""
        carried = Carried(request)
        for k, stage in enumerate(self.stages):
            carried = self._step(k, stage, carried, request)
        return self._finish(carried)

    def _step(self, k: int, stage: Stage, carried: Carried, request: Any) -> Carried:
        try:
            return stage(carried, request)
        except Exception as e:  # any failure of user code or a program: this request's, named by its stage
            raise StageError(k, stage, e) from e

    def _finish(self, carried: Carried) -> Any:
        try:
            return carried.value()
        except Exception as e:  # a gpu run fails when waited for: the last stage's error
            raise StageError(len(self.stages) - 1, self.stages[-1], e) from e

    # -- many requests, stages overlapping ------------------------------------------------------------
    def submit(self, request: Any) -> concurrent.futures.Future:
        """Queue `request`; a Future of what `run(request)` would give. Blocks while the first
        stage's queue is full."""
        self._start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queues[0].put((future, request, Carried(request)))
        return future

    def map(self, requests: Iterable[Any]) -> Iterator[Any]:
        """The results of `requests`, in order, the stages working on several at once."""
        pending: list[concurrent.futures.Future] = []
        for r in requests:
            pending.append(self.submit(r))
            while pending and pending[0].done():
                yield pending.pop(0).result()
        for f in pending:
            yield f.result()

    def _start(self) -> None:
        with self._lock:
            if self._threads:
                return
            self._queues = [queue.Queue(self.queue_size) for _ in self.stages]
            for k in range(len(self.stages)):
                t = threading.Thread(target=self._serve, args=(k,), name=f"fusegraph-stage-{k}", daemon=True)
                t.start()
                self._threads.append(t)

    def _serve(self, k: int) -> None:
        stage, inbox = self.stages[k], self._queues[k]
        last = k == len(self.stages) - 1
        while True:
            item = inbox.get()
            if item is _END:
                if not last:
                    self._queues[k + 1].put(_END)
                return
            future, request, carried = item
            if future.cancelled():
                continue
            try:
                carried = self._step(k, stage, carried, request)
                if last:
                    future.set_result(self._finish(carried))
                else:
                    self._queues[k + 1].put((future, request, carried))
            except StageError as e:
                future.set_exception(e)

    def close(self) -> None:
        """Finish the queued requests and stop the stage threads."""
        with self._lock:
            threads, self._threads = self._threads, []
            if threads:
                self._queues[0].put(_END)
        for t in threads:
            t.join()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
