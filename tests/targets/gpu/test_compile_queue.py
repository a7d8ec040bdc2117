"""The compile scopes' threads (compile_queue.py): urgent submissions first, the rest in order."""

from __future__ import annotations

import threading

import pytest

from fusegraph.targets.gpu.compile_queue import PriorityThreads, urgent


def test_urgent_compiles_go_before_those_queued_and_the_rest_keep_their_order():
    started, release, ran = threading.Event(), threading.Event(), []
    pool = PriorityThreads(1)

    def block():
        started.set()
        release.wait(10)
    futures = [pool.submit(block)]
    assert started.wait(10)  # the one thread busy: the rest queue
    futures += [pool.submit(ran.append, name) for name in ("a", "b")]
    with urgent():
        futures += [pool.submit(ran.append, name) for name in ("x", "y")]
    futures.append(pool.submit(ran.append, "c"))
    release.set()
    pool.shutdown(wait=True)
    assert all(f.done() for f in futures)
    assert ran == ["x", "y", "a", "b", "c"]


def test_results_errors_initializer_and_shutdown():
    marked = threading.local()
    with PriorityThreads(3, initializer=lambda: setattr(marked, "on", True)) as pool:
        assert pool.submit(lambda: getattr(marked, "on", False)).result(10) is True
        assert [f.result(10) for f in [pool.submit(pow, 2, n) for n in range(8)]] == [2 ** n for n in range(8)]
        failed = pool.submit(int, "not a number")
        with pytest.raises(ValueError):
            failed.result(10)
    with pytest.raises(RuntimeError):
        pool.submit(int, "1")


def test_cancelled_futures_do_not_run():
    started, release, ran = threading.Event(), threading.Event(), []
    pool = PriorityThreads(1)
    pool.submit(lambda: (started.set(), release.wait(10)))
    assert started.wait(10)
    queued = pool.submit(ran.append, "late")
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    pool.shutdown(wait=True)
    assert queued.cancelled() and ran == []
