"""How the gpu target times a candidate kernel on the device (the GEMM tuner, the 2:4 choice, the
sparse benchmark): the GPU time of its kernels, as a replay of the program's CUDA graph pays it,
never the host time of launching them.

CUDA events recorded around a call time everything between them on the device, idle gaps included:
if the device runs dry while the host is still inside the call, the host's time is what gets
measured. So the device is kept busy by a GPU-side sleep for as long as the host needs to enqueue
every timed call, and only then reaches the events. The sleep's length is set from the call's own
host time, measured first. (A fixed 100 us sleep hid cuBLAS's launches, but not cuSPARSELt's: torch's
`_cslt_sparse_mm` builds and destroys a cuSPARSELt plan at every call, and on the H200 that host work
took ~0.2 s a call, which the 2:4 rows of benchmarks/sparse_gpu.py and the tuner's 2:4 choices then
reported as kernel time.) Timing captured CUDA graphs instead is not done: their cuBLAS workspace
was shared with the program's graph, and a ResNet-50 replay at batch 32 then failed on the H200.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

MIN_SLEEP_S = 100e-6  # the least cover: longer than launching a small candidate from Python
COVER = 1.5  # the sleep covers this many times the host time of the timed calls (host timing jitters)
MAX_SLEEP_S = 20.0  # a candidate whose host work needs more cover than this is timed with what it gets
CALIBRATION_CYCLES = 2_000_000  # one timed sleep of this many cycles gives the device's sleep rate


@functools.cache
def sleep_rate(device_index: int) -> float:
    """Cycles per second of `torch.cuda._sleep` on this device (its SM clock, as the sleep counts it)."""
    from .device import torch

    t = torch()
    t.cuda._sleep(CALIBRATION_CYCLES // 10)  # the first launch loads the kernel: not timed
    start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
    start.record()
    t.cuda._sleep(CALIBRATION_CYCLES)
    end.record()
    end.synchronize()
    return CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)


def sleep_cycles(host_seconds: float, reps: int, rate: float) -> int:
    """GPU-side sleep, in cycles at `rate`, that outlasts `reps` calls of `host_seconds` host time each."""
    cover = min(max(COVER * host_seconds * reps, MIN_SLEEP_S), MAX_SLEEP_S)
    return int(cover * rate)


def cuda_measure(run: Callable[[], Any], reps: int = 15, clock: Callable[[], float] = time.perf_counter,
                 attempts: int = 3) -> float:
    """Seconds per run on the device: the median over `reps` runs, each between CUDA events that the
    device reaches only after a sleep covering the host's enqueueing of all of them (module docstring).
    The first call compiles and allocates what the candidate keeps; the second is the host time. If
    the sleep was over before the last run was queued (the timed calls queued slower than the one
    measured: a compile's threads holding the GIL meanwhile), the device timed host gaps, and the runs
    are timed again behind a sleep sized from how long they took to queue (up to `attempts` times)."""
    from .device import torch

    t = torch()
    run()
    t.cuda.synchronize()
    t0 = clock()
    run()
    host = clock() - t0
    t.cuda.synchronize()
    rate = sleep_rate(t.cuda.current_device())
    for _ in range(attempts):
        t.cuda._sleep(sleep_cycles(host, reps, rate))
        slept = t.cuda.Event()
        slept.record()
        t0 = clock()
        pairs = []
        for _ in range(reps):
            start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            pairs.append((start, end))
        covered = not slept.query()  # the device still asleep once every run was queued
        queued = clock() - t0
        pairs[-1][1].synchronize()
        if covered:
            break
        host = max(host, queued / reps)
    return statistics.median(a.elapsed_time(b) for a, b in pairs) / 1e3


def host_measure(run: Callable[[], Any], reps: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of host time per call (launch and library work, the device synchronized between calls):
    what a call costs where no CUDA graph replays it."""
    from .device import torch

    t = torch()
    run()
    samples = []
    for _ in range(reps):
        t.cuda.synchronize()
        t0 = clock()
        run()
        samples.append(clock() - t0)
    t.cuda.synchronize()
    return statistics.median(samples)
