"""The cpu target's core budget (targets/cpu/cores.py): runs hold their threads' cores, never more
than the process has, first come first served; many threads running cpu programs stay correct."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from onnx import helper as h

import fusegraph
from fusegraph.targets.asynchronous import cores
from fusegraph.targets.cpu.cores import CoreBudget, per_instance_threads
from tests.util import make_model, target_or_skip


def test_runs_that_fit_side_by_side_hold_their_cores_together():
    budget = CoreBudget(2)
    both_in, both_seen = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)
    seen: list[int] = []

    def run():
        with budget.take(1):
            both_in.wait()  # a BrokenBarrierError if the second could not come in beside the first
            seen.append(budget.used)
            both_seen.wait()  # (neither leaves before both have looked)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [2, 2]  # (checked here: an assertion in a thread fails no test)
    assert budget.used == 0


def test_a_run_waits_for_the_cores_it_needs_and_the_line_is_kept():
    budget = CoreBudget(2)
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def small():
        with budget.take(1):
            holding.set()
            release.wait(10)
            order.append("small")

    def big(name):
        with budget.take(2):
            order.append(name)

    first = threading.Thread(target=small)
    first.start()
    holding.wait(10)
    waiting = [threading.Thread(target=big, args=(f"big{k}",)) for k in range(2)]
    for k, t in enumerate(waiting):
        t.start()
        while len(budget._queue) < k + 1:  # in line before the next one comes
            time.sleep(0.001)
    assert budget.used == 1 and not order  # both wait: 1 + 2 > 2 cores
    release.set()
    for t in [first, *waiting]:
        t.join(10)
    assert order == ["small", "big0", "big1"] and budget.used == 0


def test_a_run_wanting_more_than_all_cores_runs_alone():
    budget = CoreBudget(2)
    with budget.take(5):
        assert budget.used == 2


def test_per_instance_threads_divide_the_cores():
    assert per_instance_threads(1) == cores()
    assert per_instance_threads(10 * cores()) == 1


def test_many_threads_on_two_cpu_programs_give_their_own_results():
    x = np.zeros((4, 32), np.float32)
    rng = np.random.default_rng(0)
    progs = []
    for threads in (1, None):
        w = rng.standard_normal((32, 32)).astype(np.float32)
        p = fusegraph.parse_onnx(make_model([h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Tanh", ["y"], ["z"])],
                                            {"x": x}, ["z"], {"w": w}))
        p.compile(target_or_skip("cpu"), fusegraph.CompileOptions(threads=threads))
        progs.append(p)
    feeds = [{"x": rng.standard_normal((4, 32)).astype(np.float32)} for _ in range(12)]
    want = [[p.run(f)[0] for f in feeds] for p in progs]
    jobs = [(k % 2, j) for k in range(4) for j in range(12)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda job: progs[job[0]].run(feeds[job[1]])[0], jobs))
    for (i, j), g in zip(jobs, got):
        np.testing.assert_array_equal(g, want[i][j])
