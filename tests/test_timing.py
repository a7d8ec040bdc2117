"""fusegraph.driver.timing: the alternating measurement `perf --compare` and the benchmarks share."""

from __future__ import annotations

import math

from fusegraph.driver.timing import geomean, measure, ratio, summary


def test_measure_alternates_and_swaps_who_goes_first():
    calls: list[str] = []
    runners = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    rounds: list[int] = []
    times = measure(runners, iterations=3, warmup=2, on_round=rounds.append)
    assert calls[:4] == ["a", "b", "a", "b"]            # warm-up, in order
    assert calls[4:] == ["a", "b", "b", "a", "a", "b"]  # timed rounds, first runner swapped each round
    assert rounds == [0, 1, 2] and all(len(t) == 3 for t in times.values())


def test_summary_ratio_geomean():
    s = summary([0.001, 0.002, 0.003], batch=4)
    assert s["median_ms"] == 2.0 and math.isclose(s["throughput"], 2000.0)
    assert ratio(2.0, 4.0) == 0.5 and math.isnan(ratio(1.0, 0.0))
    assert math.isclose(geomean([0.5, 2.0, float("nan")]), 1.0)
