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


PHASES = ("compute_input", "compute_infer", "compute_output")  # a batch's: gather inputs, run, split outputs


@dataclass
class BatchStats:
    """One batch size's runs, by phase; each phase counts every run (perf_analyzer checks they agree)."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    name: str
    version: str
    success: Duration = field(default_factory=Duration)   # whole request: arrival to response
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)     # arrival to the start of its batch
    # a request's batch's phases, counted per request (Triton's inference_stats)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    failures_by_reason: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    inference_count: int = 0   # samples answered (a request of batch 4 counts 4)
    execution_count: int = 0   # batches run
    last_inference_ms: int = 0
    batches: dict[int, BatchStats] = field(default_factory=lambda: defaultdict(BatchStats))  # batch size -> runs
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_batch(self, size: int, phase_ns: tuple[int, int, int], queue_ns: list[int]) -> None:
        """A batch of `size` samples ran: its (input, infer, output) phase times, each request's queue time."""
        with self.lock:
            self.execution_count += 1
            runs = self.batches[size]
            for name, ns in zip(PHASES, phase_ns, strict=True):
                getattr(runs, name).add(ns)
                getattr(self, name).add(ns * len(queue_ns), len(queue_ns))
            for q in queue_ns:
                self.queue.add(q)

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
                    "queue": Duration(**vars(self.queue)),
                    **{name: Duration(**vars(getattr(self, name))) for name in PHASES},
                    "failures_by_reason": dict(self.failures_by_reason), "inference_count": self.inference_count,
                    "execution_count": self.execution_count, "last_inference_ms": self.last_inference_ms,
                    "batches": {k: {name: Duration(**vars(getattr(v, name))) for name in PHASES}
                                for k, v in sorted(self.batches.items())}}
