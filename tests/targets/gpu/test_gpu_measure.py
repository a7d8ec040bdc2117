"""The device timing of measure.py against a simulated device: a queue of work that starts when both
the host has enqueued it and the work before it is done, so CUDA events time device idle gaps too.
A candidate whose host work outlasts a fixed sleep (cuSPARSELt's plan built at every call: ~0.2 s on
the H200) must still be timed by its kernels alone."""

from __future__ import annotations

import types

import pytest

from fusegraph.targets.gpu import device, measure

RATE = 2e9  # simulated sleep cycles per second


class Device:
    """Host clock and device queue; `call(host_s, gpu_s)` is one candidate call."""

    def __init__(self):
        self.host = 0.0
        self.free = 0.0  # when the device's queue has run dry

    def clock(self) -> float:
        return self.host

    def enqueue(self, seconds: float) -> float:
        start = max(self.free, self.host)
        self.free = start + seconds
        return start

    def call(self, host_s: float, gpu_s: float) -> None:
        self.host += host_s
        self.enqueue(gpu_s)

    def torch(self):
        sim = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = sim.enqueue(0.0)

            def synchronize(self):
                sim.host = max(sim.host, self.at)

            def query(self):  # the device has passed it
                return self.at <= sim.host

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

        def synchronize():
            sim.host = max(sim.host, sim.free)

        cuda = types.SimpleNamespace(Event=Event, synchronize=synchronize, current_device=lambda: 0,
                                     _sleep=lambda cycles: sim.enqueue(cycles / RATE))
        return types.SimpleNamespace(cuda=cuda)


@pytest.fixture()
def sim(monkeypatch):
    d = Device()
    monkeypatch.setattr(device, "torch", d.torch)
    monkeypatch.setattr(measure, "sleep_rate", lambda index: RATE)
    return d


@pytest.mark.parametrize("host_s", [5e-6, 80e-6, 0.2])  # a cuBLAS launch .. a cuSPARSELt plan per call
def test_events_time_the_kernels_not_the_host(sim, host_s):
    gpu_s = 20e-6
    got = measure.cuda_measure(lambda: sim.call(host_s, gpu_s), reps=15, clock=sim.clock)
    assert got == pytest.approx(gpu_s, rel=1e-6)


def test_runs_queued_slower_than_measured_are_timed_again_behind_a_longer_sleep(sim):
    """The host time measured on one call (5 us), then 200 us per call while timing (a compile's threads
    holding the GIL): the first sleep is over before the runs are queued, and the events would time the
    host; the check sees the device awake and times them again behind a sleep that covers them."""
    calls = []

    def run():
        calls.append(1)
        sim.call(5e-6 if len(calls) <= 2 else 200e-6, 20e-6)

    got = measure.cuda_measure(run, reps=15, clock=sim.clock)
    assert got == pytest.approx(20e-6, rel=1e-6)
    assert len(calls) == 2 + 2 * 15  # the first timing was thrown away
    calls.clear()
    slow = measure.cuda_measure(run, reps=15, clock=sim.clock, attempts=1)  # what one attempt measured
    assert slow > 150e-6


def test_a_fixed_100us_sleep_would_time_the_host(sim):
    """What the tuner did before: 100 us of sleep before each call; the 0.2 s host call is timed."""
    t = sim.torch()
    start, end = t.cuda.Event(), t.cuda.Event()
    t.cuda._sleep(int(100e-6 * RATE))
    start.record()
    sim.call(0.2, 20e-6)
    end.record()
    assert start.elapsed_time(end) / 1e3 > 0.19


def test_host_time_per_call(sim):
    assert measure.host_measure(lambda: sim.call(0.2, 20e-6), clock=sim.clock) == pytest.approx(0.2)


def test_sleep_is_bounded():
    assert measure.sleep_cycles(0.0, 15, RATE) == int(measure.MIN_SLEEP_S * RATE)
    assert measure.sleep_cycles(10.0, 15, RATE) == int(measure.MAX_SLEEP_S * RATE)
    assert measure.sleep_cycles(0.2, 15, RATE) == int(measure.COVER * 0.2 * 15 * RATE)
