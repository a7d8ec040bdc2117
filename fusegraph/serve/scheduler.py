"""The scheduler of one model: a bounded queue, dynamic batching, and `count` instance threads.

Each instance thread takes a batch from the queue and runs it. With dynamic batching it waits, from the
arrival of the oldest queued request, up to max_queue_delay_microseconds for more requests, and runs at
once when the queue holds max_batch_size samples (or the largest preferred batch size); requests are
concatenated along the batch dim and their outputs split back. Requests whose timeout passed while they
queued fail with RequestTimeoutError and never run; a full queue rejects with QueueFullError.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelExecutionError, QueueFullError, RequestTimeoutError, ServeError, UnavailableError
from .model import ServedModel
from .stats import ModelStats

DEFAULT_MAX_QUEUE = 1024  # where the config's default_queue_policy sets none (Triton's 0: unbounded)


@dataclass
class Pending:
    inputs: dict[str, np.ndarray]
    n: int                      # samples (0: a model that does not batch)
    arrival_ns: int
    deadline: float | None      # time.monotonic() past which it must not run
    future: Future = field(default_factory=Future)


class Scheduler:
    def __init__(self, model: ServedModel, stats: ModelStats):
        self.model, self.stats = model, stats
        cfg = model.config
        self.dynamic = cfg.HasField("dynamic_batching") and model.max_batch_size > 0
        db = cfg.dynamic_batching
        self.delay_s = db.max_queue_delay_microseconds / 1e6
        self.target = min(max(db.preferred_batch_size, default=model.max_batch_size), model.max_batch_size)
        policy = db.default_queue_policy
        self.max_queue = policy.max_queue_size or DEFAULT_MAX_QUEUE
        self.default_timeout_s = policy.default_timeout_microseconds / 1e6 or None
        self._queue: deque[Pending] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._worker, name=f"fusegraph-serve-{model.name}-{k}", daemon=True)
                         for k in range(model.instances)]
        # fails queued requests at their deadline even while every instance is busy
        self._threads.append(threading.Thread(target=self._reaper, name=f"fusegraph-serve-{model.name}-timeouts",
                                              daemon=True))
        for t in self._threads:
            t.start()

    # -- submitting -------------------------------------------------------------------------------
    def submit(self, inputs: dict[str, np.ndarray], n: int, arrival_ns: int, timeout_s: float | None) -> Future:
        timeout_s = timeout_s if timeout_s is not None else self.default_timeout_s
        p = Pending(inputs, n, arrival_ns, None if timeout_s is None else time.monotonic() + timeout_s)
        with self._cv:
            if self._closed:
                raise UnavailableError(f"model {self.model.name!r} is unloading: request not accepted")
            if len(self._queue) >= self.max_queue:
                raise QueueFullError(f"model {self.model.name!r}: queue full ({self.max_queue} pending requests)")
            self._queue.append(p)
            self._cv.notify_all()  # the instances and the reaper wait on the same condition
        return p.future

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Stop accepting; with `drain`, the instances finish what is queued first, else it fails."""
        with self._cv:
            self._closed = True
            if not drain:
                while self._queue:
                    self._fail(self._queue.popleft(), UnavailableError(f"model {self.model.name!r} unloaded"))
            self._cv.notify_all()
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))

    @property
    def pending(self) -> int:
        return len(self._queue)

    # -- the instance threads ---------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

    def _reaper(self) -> None:
        with self._cv:
            while not (self._closed and not self._queue):
                self._drop_expired()
                self._wait(None)

    def _drop_expired(self) -> None:
        now = time.monotonic()
        if any(p.deadline is not None and p.deadline <= now for p in self._queue):
            keep = deque()
            for p in self._queue:
                if p.deadline is not None and p.deadline <= now:
                    self._fail(p, RequestTimeoutError(f"model {self.model.name!r}: request timed out after "
                                                      f"waiting {(time.monotonic_ns() - p.arrival_ns) / 1e6:.1f} ms in the queue"))
                else:
                    keep.append(p)
            self._queue = keep

    def _wait(self, until: float | None) -> None:
        deadlines = [p.deadline for p in self._queue if p.deadline is not None]
        if until is not None:
            deadlines.append(until)
        self._cv.wait(None if not deadlines else max(0.0, min(deadlines) - time.monotonic()))

    def _samples(self) -> int:
        return sum(p.n for p in self._queue)

    def _next_batch(self) -> list[Pending] | None:
        with self._cv:
            while True:
                self._drop_expired()
                if not self._queue:
                    if self._closed:
                        return None
                    self._wait(None)
                    continue
                if not self.dynamic:
                    return self._take(1)
                until = time.monotonic() + self.delay_s - (time.monotonic_ns() - self._queue[0].arrival_ns) / 1e9
                while self._queue and self._samples() < self.target and time.monotonic() < until and not self._closed:
                    self._wait(until)
                    self._drop_expired()
                if self._queue:
                    return self._take(self.model.max_batch_size)

    def _take(self, limit: int) -> list[Pending]:
        """Up to `limit` samples (requests when the model does not batch) from the queue's front; requests
        the client cancelled are dropped here."""
        batch, total = [], 0
        while self._queue and (not batch or total + self._queue[0].n <= limit):
            p = self._queue.popleft()
            if p.future.set_running_or_notify_cancel():
                batch.append(p)
                total += p.n
            else:
                self.stats.record_failure("CANCELED", time.monotonic_ns() - p.arrival_ns)
            if not self.dynamic:
                break
        return batch

    def _run(self, batch: list[Pending]) -> None:
        if not batch:
            return
        start = time.monotonic_ns()
        n = sum(p.n for p in batch)
        try:
            inputs = batch[0].inputs if len(batch) == 1 else {
                k: np.concatenate([p.inputs[k] for p in batch]) for k in batch[0].inputs}
            outputs = self.model.execute(inputs, n)
        except ServeError as e:
            for p in batch:
                self._fail(p, e, running=True)
            return
        except Exception as e:  # the model raising fails its batch's requests, never the instance thread
            err = ModelExecutionError(f"model {self.model.name!r} failed on a batch of {max(n, 1)}: "
                                      f"{type(e).__name__}: {e}")
            for p in batch:
                self._fail(p, err, running=True, reason="BACKEND")
            return
        end = time.monotonic_ns()
        self.stats.record_batch(max(n, 1), end - start, [start - p.arrival_ns for p in batch])
        offset = 0
        for p in batch:
            if n:
                result = {k: v[offset:offset + p.n] for k, v in outputs.items()}
                offset += p.n
            else:
                result = outputs
            self.stats.record_success(max(p.n, 1), time.monotonic_ns() - p.arrival_ns)
            p.future.set_result(result)

    def _fail(self, p: Pending, err: ServeError, running: bool = False, reason: str = "REJECTED") -> None:
        if running or p.future.set_running_or_notify_cancel():
            self.stats.record_failure(reason, time.monotonic_ns() - p.arrival_ns)
            p.future.set_exception(err)
