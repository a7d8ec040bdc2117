"""The scheduler of one model: bounded priority queues, dynamic batching, and one thread per instance.

Each instance thread takes a batch from the queues and runs it on its executor (the shared in-process
model, or its worker process). Requests wait in one queue per priority level (`priority_levels`, level 1
first; a request's `priority` 0 or out of range gets `default_priority_level`), each bounded by its queue
policy's `max_queue_size`: a request that finds its queue full is rejected with QueueFullError. With
dynamic batching a thread waits, from the arrival of the oldest queued request, up to
max_queue_delay_microseconds for more, and runs at once when the queues hold max_batch_size samples (or
the largest preferred batch size); batches fill from the highest priority down, are concatenated along
the batch dim and their outputs split back. A request whose deadline passed while queued fails with
RequestTimeoutError and never runs; one its client cancelled is dropped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .errors import (
    ModelConfigError,
    ModelExecutionError,
    QueueFullError,
    RequestTimeoutError,
    ServeError,
    UnavailableError,
    execution_error,
)
from .process import WorkerNotRunning
from .stats import ModelStats

DEFAULT_MAX_QUEUE = 1024  # where the queue policy sets none (Triton's 0: unbounded)
_IDLE_CHECK_S = 0.5       # how often an idle instance looks whether its worker process still runs


@dataclass
class Pending:
    inputs: dict[str, np.ndarray]
    n: int                      # samples (0: a model that does not batch)
    arrival_ns: int
    deadline: float | None      # time.monotonic() past which it must not run
    level: int = 0              # index of its priority queue (0: the highest)
    future: Future = field(default_factory=Future)
    taken: bool = False         # marked running: no longer cancellable


@dataclass(frozen=True)
class QueuePolicy:
    max_size: int
    default_timeout_s: float | None
    allow_override: bool

    @classmethod
    def of(cls, p) -> QueuePolicy:
        if p.timeout_action != 0:  # model_config.proto: REJECT = 0, DELAY = 1
            raise ModelConfigError("queue policy timeout_action DELAY is not supported (REJECT is)")
        return cls(p.max_queue_size or DEFAULT_MAX_QUEUE, p.default_timeout_microseconds / 1e6 or None,
                   p.allow_timeout_override)

    def timeout(self, requested_s: float | None) -> float | None:
        """The request's own timeout where the policy lets it override its default (or sets none)."""
        if requested_s and (self.allow_override or self.default_timeout_s is None):
            return requested_s
        return self.default_timeout_s


class Scheduler:
    def __init__(self, model, stats: ModelStats, executors: list | None = None):
        self.model, self.stats = model, stats
        self.executors = executors or [model] * model.instances
        cfg = model.config
        self.dynamic = cfg.HasField("dynamic_batching") and model.max_batch_size > 0
        db = cfg.dynamic_batching
        self.delay_s = db.max_queue_delay_microseconds / 1e6
        self.target = min(max(db.preferred_batch_size, default=model.max_batch_size), model.max_batch_size)
        levels = max(db.priority_levels, 1)
        if db.priority_levels and not 1 <= db.default_priority_level <= levels:
            raise ModelConfigError(f"model {model.name!r}: default_priority_level {db.default_priority_level} "
                                   f"outside 1..{levels} (priority_levels)")
        self.default_level = (db.default_priority_level or 1) - 1
        default = QueuePolicy.of(db.default_queue_policy)
        self.policies = [QueuePolicy.of(db.priority_queue_policy[k + 1]) if k + 1 in db.priority_queue_policy
                         else default for k in range(levels)]
        self._queues: list[deque[Pending]] = [deque() for _ in range(levels)]
        # the instances wait on _cv, the reaper on _reap_cv, under one lock: a request without a deadline
        # (the common one) wakes only the instances
        lock = threading.Lock()
        self._cv, self._reap_cv = threading.Condition(lock), threading.Condition(lock)
        self._closed = False
        self._running = 0  # instances running a batch
        # batches that find every other instance idle and nothing queued run on solo_threads
        self._solo = getattr(model, "solo_threads", 0) > 0
        self._threads = [threading.Thread(target=self._worker, args=(ex,), daemon=True,
                                          name=f"fusegraph-serve-{model.name}-{k}") for k, ex in enumerate(self.executors)]
        # fails queued requests at their deadline even while every instance is busy
        self._threads.append(threading.Thread(target=self._reaper, name=f"fusegraph-serve-{model.name}-timeouts",
                                              daemon=True))
        for t in self._threads:
            t.start()

    # -- submitting -------------------------------------------------------------------------------
    def level_of(self, priority: int) -> int:
        """The queue of a request's `priority` (1 highest; 0 or past priority_levels: the default)."""
        return priority - 1 if 1 <= priority <= len(self._queues) else self.default_level

    def submit(self, inputs: dict[str, np.ndarray], n: int, arrival_ns: int, timeout_s: float | None = None,
               priority: int = 0, deadline_s: float | None = None) -> Future:
        """Queue a request: `timeout_s` is its `timeout` parameter (the queue policy decides whether it
        overrides the default), `deadline_s` the transport's own limit (a gRPC deadline), always kept."""
        level = self.level_of(priority)
        policy = self.policies[level]
        limits = [t for t in (policy.timeout(timeout_s), deadline_s) if t is not None]
        p = Pending(inputs, n, arrival_ns, time.monotonic() + min(limits) if limits else None, level)
        with self._cv:
            if self._closed:
                raise UnavailableError(f"model {self.model.name!r} is unloading: request not accepted")
            queue = self._queues[level]
            if len(queue) >= policy.max_size:
                which = f" of priority level {level + 1}" if len(self._queues) > 1 else ""
                raise QueueFullError(f"model {self.model.name!r}: queue{which} full ({policy.max_size} pending "
                                     f"requests, max_queue_size): request rejected")
            queue.append(p)
            self._cv.notify_all()
            if p.deadline is not None:  # it may be due before what the reaper waits for
                self._reap_cv.notify()
        return p.future

    def cancelled(self) -> None:
        """A queued request's future was cancelled: wake the reaper to drop it now."""
        with self._cv:
            self._reap_cv.notify()

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Stop accepting; with `drain`, the instances finish what is queued first, else it fails. Then
        the executors (worker processes) stop."""
        with self._cv:
            self._closed = True
            if not drain:
                for p in self._pop_all():
                    self._fail(p, UnavailableError(f"model {self.model.name!r} unloaded"))
            self._cv.notify_all()
            self._reap_cv.notify()
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        for ex in {id(e): e for e in self.executors}.values():
            if hasattr(ex, "close"):
                ex.close()

    @property
    def pending(self) -> int:
        return sum(len(q) for q in self._queues)

    # -- the instance threads ---------------------------------------------------------------------
    def _worker(self, executor) -> None:
        ensure = getattr(executor, "ensure_running", None)  # a worker process restarts if it died
        alive = (lambda: executor.running) if ensure is not None else None
        while True:
            if ensure is not None and not ensure(lambda: self._closed and not self.pending):
                return
            taken = self._next_batch(alive)
            if taken is None:
                return
            batch, alone = taken
            if not batch:
                continue
            try:
                self._run(executor, batch, self._solo and alone)
            finally:
                with self._cv:
                    self._running -= 1

    def _reaper(self) -> None:
        with self._cv:
            while not (self._closed and not self.pending):
                self._drop_dead()
                self._wait(None, cv=self._reap_cv)

    def _pop_all(self) -> list[Pending]:
        out = [p for q in self._queues for p in q]
        for q in self._queues:
            q.clear()
        return out

    def _drop_dead(self) -> None:
        """Fail the queued requests past their deadline, drop those their clients cancelled."""
        now = time.monotonic()
        for k, q in enumerate(self._queues):
            if not any(p.future.cancelled() or (p.deadline is not None and p.deadline <= now) for p in q):
                continue
            keep = deque()
            for p in q:
                if p.future.cancelled():
                    self.stats.record_failure("CANCELED", time.monotonic_ns() - p.arrival_ns)
                elif p.deadline is not None and p.deadline <= now:
                    self._fail(p, RequestTimeoutError(f"model {self.model.name!r}: request timed out after waiting "
                                                      f"{(time.monotonic_ns() - p.arrival_ns) / 1e6:.1f} ms in the queue"))
                else:
                    keep.append(p)
            self._queues[k] = keep

    def _wait(self, until: float | None, cap_s: float | None = None, cv: threading.Condition | None = None) -> None:
        deadlines = [p.deadline for q in self._queues for p in q if p.deadline is not None]
        if until is not None:
            deadlines.append(until)
        if cap_s is not None:
            deadlines.append(time.monotonic() + cap_s)
        (cv or self._cv).wait(None if not deadlines else max(0.0, min(deadlines) - time.monotonic()))

    def _samples(self) -> int:
        return sum(p.n for q in self._queues for p in q)

    def _oldest_ns(self) -> int:
        return min(q[0].arrival_ns for q in self._queues if q)

    def _next_batch(self, alive=None) -> tuple[list[Pending], bool] | None:
        """The next batch and whether it runs alone (`_started`); None once closed and drained; an empty
        batch when `alive()` turns false while idle (a worker process that died between batches is
        restarted before it is given one)."""
        with self._cv:
            while True:
                self._drop_dead()
                if not self.pending:
                    if self._closed:
                        return None
                    if alive is not None and not alive():
                        return [], False
                    self._wait(None, None if alive is None else _IDLE_CHECK_S)
                    continue
                if not self.dynamic:
                    return self._started(self._take(1))
                until = time.monotonic() + self.delay_s - (time.monotonic_ns() - self._oldest_ns()) / 1e9
                while self.pending and self._samples() < self.target and time.monotonic() < until and not self._closed:
                    self._wait(until)
                    self._drop_dead()
                if self.pending:
                    return self._started(self._take(self.model.max_batch_size))

    def _started(self, batch: list[Pending]) -> tuple[list[Pending], bool]:
        """Count a batch taken (under the lock), and whether it runs alone: no other instance runs and
        nothing is left queued for one."""
        alone = self._running == 0 and not self.pending
        if batch:
            self._running += 1
        return batch, alone

    def _take(self, limit: int) -> list[Pending]:
        """Up to `limit` samples (one request when the model does not batch), highest priority first;
        requests the client cancelled are dropped here."""
        batch, total = [], 0
        for q in self._queues:
            while q and (not batch or total + q[0].n <= limit):
                p = q.popleft()
                if p.taken or p.future.set_running_or_notify_cancel():
                    p.taken = True
                    batch.append(p)
                    total += p.n
                else:
                    self.stats.record_failure("CANCELED", time.monotonic_ns() - p.arrival_ns)
                if not self.dynamic and batch:
                    return batch
        return batch

    def _requeue(self, batch: list[Pending]) -> None:
        """Put a batch that ran nowhere back at the front of its queues (closing or not: it was accepted)."""
        with self._cv:
            for p in reversed(batch):
                self._queues[p.level].appendleft(p)
            self._cv.notify_all()
            self._reap_cv.notify()

    def _run(self, executor, batch: list[Pending], solo: bool = False) -> None:
        start = time.monotonic_ns()
        n = sum(p.n for p in batch)
        try:
            gather = getattr(executor, "gather", None)  # a worker process's: into its shared arena
            if gather is not None:
                inputs = gather({k: [p.inputs[k] for p in batch] for k in batch[0].inputs})
            else:
                inputs = batch[0].inputs if len(batch) == 1 else {
                    k: np.concatenate([p.inputs[k] for p in batch]) for k in batch[0].inputs}
            gathered = time.monotonic_ns()
            outputs = executor.execute(inputs, n, solo=True) if solo else executor.execute(inputs, n)
        except WorkerNotRunning:
            return self._requeue(batch)
        except ServeError as e:
            reason = "BACKEND" if isinstance(e, ModelExecutionError) else "REJECTED"
            for p in batch:
                self._fail(p, e, reason=reason)
            return
        except Exception as e:  # the model raising fails its batch's requests, never the instance thread
            err = execution_error(self.model.name, n, type(e).__name__, str(e))
            for p in batch:
                self._fail(p, err, reason="BACKEND")
            return
        ran = time.monotonic_ns()
        results, offset = [], 0
        for p in batch:
            results.append({k: v[offset:offset + p.n] for k, v in outputs.items()} if n else outputs)
            offset += p.n
        self.stats.record_batch(max(n, 1), (gathered - start, ran - gathered, time.monotonic_ns() - ran),
                                [start - p.arrival_ns for p in batch])
        for p, result in zip(batch, results, strict=True):
            self.stats.record_success(max(p.n, 1), time.monotonic_ns() - p.arrival_ns)
            p.future.set_result(result)

    def _fail(self, p: Pending, err: ServeError, reason: str = "REJECTED") -> None:
        if p.taken or p.future.set_running_or_notify_cancel():
            p.taken = True
            self.stats.record_failure(reason, time.monotonic_ns() - p.arrival_ns)
            p.future.set_exception(err)
        else:  # the client cancelled it first
            self.stats.record_failure("CANCELED", time.monotonic_ns() - p.arrival_ns)
