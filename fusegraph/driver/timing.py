"""Timing fusegraph against a peer on a shared, noisy machine (see shared BENCHMARKS.md).

Everything measured runs in this process: a warm-up first, then the runners alternate run by run,
and who goes first swaps every round, so drift (another process waking up, the clock slowing down)
hits every runner alike. Results are medians; a comparison is a ratio of medians. `fusegraph perf
--compare` and `benchmarks/cpu_vs_ort.py` both measure with `measure` and summarize with `summary`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def measure(runners: Mapping[str, Callable[[], Any]], iterations: int, warmup: int,
            on_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each runner: `warmup` untimed rounds, then `iterations` timed ones,
    interleaved (round k runs the runners in order when k is even, reversed when odd).
    `on_round(k)` is called after each timed round (a progress bar)."""
    names = list(runners)
    for _ in range(warmup):
        for name in names:
            runners[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    for k in range(iterations):
        for name in names if k % 2 == 0 else reversed(names):
            fn = runners[name]
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
        if on_round is not None:
            on_round(k)
    return times


def summary(times_s: Sequence[float], batch: int = 1) -> dict[str, float]:
    """Median, p90 and p99 latency (ms) and throughput (samples per second at the median)."""
    ms = np.asarray(times_s, dtype=np.float64) * 1e3
    median = float(np.median(ms))
    return {"median_ms": median, "p90_ms": float(np.percentile(ms, 90)), "p99_ms": float(np.percentile(ms, 99)),
            "throughput": batch / (median / 1e3) if median > 0 else float("inf")}


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs (below 1 for latencies: fusegraph is faster); NaN when the peer took no time."""
    return ours / theirs if theirs > 0 else float("nan")


def geomean(values: Sequence[float]) -> float:
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in finite) / len(finite)) if finite else float("nan")
