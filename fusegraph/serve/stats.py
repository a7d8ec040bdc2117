"""Per-model counters: the one record that the statistics endpoints and the Prometheus metrics both read."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass
class ModelStats:
    name: str
    version: str
    success: Duration = field(default_factory=Duration)   # whole request: arrival to response
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)     # arrival to the start of its batch
    compute_infer: Duration = field(default_factory=Duration)  # the batch's run, counted per request
    failures_by_reason: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    inference_count: int = 0   # samples answered (a request of batch 4 counts 4)
    execution_count: int = 0   # batches run
    last_inference_ms: int = 0
    batches: dict[int, Duration] = field(default_factory=lambda: defaultdict(Duration))  # batch size -> runs
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_batch(self, size: int, compute_ns: int, queue_ns: list[int]) -> None:
        with self.lock:
            self.execution_count += 1
            self.batches[size].add(compute_ns)
            for q in queue_ns:
                self.queue.add(q)
                self.compute_infer.add(compute_ns)

    def record_success(self, samples: int, duration_ns: int) -> None:
        with self.lock:
            self.success.add(duration_ns)
            self.inference_count += samples
            self.last_inference_ms = int(time.time() * 1000)

    def record_failure(self, reason: str, duration_ns: int) -> None:
        """`reason` as Triton's failure label: REJECTED (queue full, timeout), BACKEND (the model raised),
        CANCELED, OTHER (an invalid request)."""
        with self.lock:
            self.fail.add(duration_ns)
            self.failures_by_reason[reason] += 1

    def snapshot(self) -> dict:
        with self.lock:
            return {"success": Duration(**vars(self.success)), "fail": Duration(**vars(self.fail)),
                    "queue": Duration(**vars(self.queue)), "compute_infer": Duration(**vars(self.compute_infer)),
                    "failures_by_reason": dict(self.failures_by_reason), "inference_count": self.inference_count,
                    "execution_count": self.execution_count, "last_inference_ms": self.last_inference_ms,
                    "batches": {k: Duration(**vars(v)) for k, v in sorted(self.batches.items())}}
