"""The scheduler alone, on a stand-in model whose runs the test holds and releases: batching, the queue
limit, timeouts, cancellation, a failing batch, and draining on close."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc", reason="the model config comes from tritonclient's model_config_pb2")

from fusegraph.serve.config import pb  # noqa: E402
from fusegraph.serve.errors import (  # noqa: E402
    ModelExecutionError,
    QueueFullError,
    RequestTimeoutError,
    UnavailableError,
)
from fusegraph.serve.scheduler import Scheduler  # noqa: E402
from fusegraph.serve.stats import ModelStats  # noqa: E402


class HeldModel:
    """y = 2x; each run waits for `gate`; a batch holding a NaN raises, as a failing model would."""

    name, instances = "held", 1

    def __init__(self, max_batch_size=8, delay_us=20000, max_queue=0):
        self.config = pb().ModelConfig(name="held", max_batch_size=max_batch_size)
        self.config.dynamic_batching.max_queue_delay_microseconds = delay_us
        self.config.dynamic_batching.default_queue_policy.max_queue_size = max_queue
        self.max_batch_size = max_batch_size
        self.gate = threading.Event()
        self.batches: list[int] = []

    def execute(self, inputs, n):
        assert self.gate.wait(10)
        if np.isnan(inputs["x"]).any():
            raise FloatingPointError("NaN in the batch")
        self.batches.append(n)
        return {"y": inputs["x"] * 2}


def _submit(s: Scheduler, value: float, n: int = 1, timeout_s=None):
    return s.submit({"x": np.full((n, 2), value, np.float32)}, n, time.monotonic_ns(), timeout_s)


def _until(cond, limit_s: float = 5.0) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.002)


def _busy(model: HeldModel):
    """A scheduler whose one instance holds a first request (value 0) until the model's gate opens."""
    stats = ModelStats("held", "1")
    s = Scheduler(model, stats)
    first = _submit(s, 0.0)
    _until(lambda: s.pending == 0)
    return s, stats, first


@pytest.fixture
def held():
    model = HeldModel()
    yield model
    model.gate.set()


def test_queued_requests_run_as_one_batch_and_split_back(held):
    s, _, first = _busy(held)
    rest = [_submit(s, float(k), n=1 + k % 2) for k in range(1, 6)]  # 2+1+2+1+2 = 8 samples
    held.gate.set()
    assert first.result(5)["y"].shape == (1, 2)
    for k, f in enumerate(rest, start=1):
        y = f.result(5)["y"]
        assert y.shape == (1 + k % 2, 2) and (y == 2.0 * k).all()
    assert held.batches == [1, 8]
    s.close()


def test_a_batch_never_exceeds_max_batch_size(held):
    s, _, _ = _busy(held)
    futures = [_submit(s, 1.0, n=3) for _ in range(4)]  # 12 samples: batches of 6 (3+3), never 9
    held.gate.set()
    for f in futures:
        f.result(5)
    assert held.batches == [1, 6, 6]
    s.close()


def test_full_queue_rejects_cleanly():
    model = HeldModel(max_queue=2)
    s, _, running = _busy(model)
    queued = [_submit(s, 1.0), _submit(s, 2.0)]
    with pytest.raises(QueueFullError, match="queue full"):
        _submit(s, 3.0)
    model.gate.set()
    assert running.result(5) and all(f.result(5) for f in queued)
    s.close()


def test_request_that_times_out_in_the_queue_fails_and_never_runs(held):
    s, stats, _ = _busy(held)
    late = _submit(s, 1.0, timeout_s=0.05)
    with pytest.raises(RequestTimeoutError, match="timed out"):
        late.result(5)
    held.gate.set()
    _until(lambda: held.batches == [1])
    assert stats.snapshot()["failures_by_reason"] == {"REJECTED": 1}
    s.close()


def test_cancelled_request_is_dropped(held):
    s, stats, _ = _busy(held)
    gone, kept = _submit(s, 1.0), _submit(s, 2.0)
    assert gone.cancel()
    held.gate.set()
    assert (kept.result(5)["y"] == 4.0).all()
    with pytest.raises(CancelledError):
        gone.result(0)
    assert held.batches == [1, 1] and stats.snapshot()["failures_by_reason"] == {"CANCELED": 1}
    s.close()


def test_failing_batch_fails_its_requests_only(held):
    s = Scheduler(held, ModelStats("held", "1"))
    held.gate.set()
    with pytest.raises(ModelExecutionError, match="FloatingPointError: NaN in the batch"):
        _submit(s, float("nan")).result(5)
    assert (_submit(s, 1.0).result(5)["y"] == 2.0).all()  # the instance thread lives on
    s.close()


def test_close_drains_what_is_queued_then_refuses(held):
    s = Scheduler(held, ModelStats("held", "1"))
    futures = [_submit(s, float(k)) for k in range(3)]
    closer = threading.Thread(target=s.close)
    closer.start()
    with pytest.raises(UnavailableError, match="unloading"):
        _until(lambda: s._closed)
        _submit(s, 9.0)
    held.gate.set()
    closer.join(10)
    assert [float(f.result(0)["y"][0, 0]) for f in futures] == [0.0, 2.0, 4.0]


def _prioritized(levels=2, default=2, **policy):
    model = HeldModel(max_batch_size=1, delay_us=0)
    db = model.config.dynamic_batching
    db.priority_levels, db.default_priority_level = levels, default
    for level, size in policy.items():
        db.priority_queue_policy[int(level[1:])].max_queue_size = size
    return model


def _value(f) -> float:
    return float(f.result(5)["y"][0, 0]) / 2


def test_higher_priority_runs_first_and_zero_or_out_of_range_gets_the_default():
    model = _prioritized(levels=3, default=2)
    s, _, _ = _busy(model)
    order = []
    futures = [s.submit({"x": np.full((1, 2), v, np.float32)}, 1, time.monotonic_ns(), priority=p)
               for v, p in [(1, 3), (2, 0), (3, 1), (4, 9), (5, 2), (6, 1)]]
    for f in futures:
        f.add_done_callback(lambda f: order.append(_value(f)))
    model.gate.set()
    for f in futures:
        f.result(5)
    # level 1: 3, 6; level 2 (the default, for priority 0 and 9 too): 2, 4, 5; level 3: 1
    assert order == [3.0, 6.0, 2.0, 4.0, 5.0, 1.0]
    s.close()


def test_each_priority_level_has_its_own_queue_limit():
    model = _prioritized(p1=1, p2=2)
    s, _, running = _busy(model)
    high = _submit_p(s, 1.0, 1)
    with pytest.raises(QueueFullError, match="queue of priority level 1 full"):
        _submit_p(s, 2.0, 1)
    low = [_submit_p(s, 3.0, 2), _submit_p(s, 4.0, 0)]
    with pytest.raises(QueueFullError, match="level 2 full"):
        _submit_p(s, 5.0, 2)
    model.gate.set()
    assert [_value(f) for f in [running, high, *low]] == [0.0, 1.0, 3.0, 4.0]
    s.close()


def _submit_p(s, value, priority, timeout_s=None):
    return s.submit({"x": np.full((1, 2), value, np.float32)}, 1, time.monotonic_ns(), timeout_s, priority)


@pytest.mark.parametrize("override", [False, True])
def test_request_timeout_overrides_the_policy_default_only_where_allowed(override):
    model = HeldModel(max_batch_size=1, delay_us=0)
    policy = model.config.dynamic_batching.default_queue_policy
    policy.default_timeout_microseconds, policy.allow_timeout_override = 50_000, override
    s, _, _ = _busy(model)
    f = _submit_p(s, 1.0, 0, timeout_s=30.0)
    time.sleep(0.3)  # past the default's 50 ms, well within the request's 30 s
    assert f.done() is (not override)
    model.gate.set()
    if override:
        assert _value(f) == 1.0
    else:
        with pytest.raises(RequestTimeoutError):
            f.result(0)
    s.close()


def test_a_cancelled_request_leaves_the_queue_at_once(held):
    s, stats, _ = _busy(held)
    f = _submit(s, 1.0)
    assert s.pending == 1 and f.cancel()
    s.cancelled()
    _until(lambda: s.pending == 0)  # dropped while the instance is still busy, not when it frees up
    assert stats.snapshot()["failures_by_reason"] == {"CANCELED": 1}
    held.gate.set()
    s.close()


def test_queue_full_is_unavailable_as_triton_answers_it():
    assert QueueFullError.grpc_code == "UNAVAILABLE" and QueueFullError.http_status == 503


def test_bad_priority_config_is_refused_by_name():
    from fusegraph.serve.errors import ModelConfigError

    model = _prioritized(levels=2, default=3)
    with pytest.raises(ModelConfigError, match="default_priority_level 3 outside 1..2"):
        Scheduler(model, ModelStats("held", "1"))
    model = HeldModel()
    model.config.dynamic_batching.default_queue_policy.timeout_action = 1
    with pytest.raises(ModelConfigError, match="DELAY is not supported"):
        Scheduler(model, ModelStats("held", "1"))


class SoloModel(HeldModel):
    """Two instances with solo programs: records whether each batch was told it runs alone."""

    instances, solo_threads = 2, 2

    def __init__(self):
        super().__init__(max_batch_size=0)
        self.config.ClearField("dynamic_batching")
        self.solos: list[bool] = []
        self.started = threading.Semaphore(0)

    def execute(self, inputs, n, solo=False):
        self.solos.append(solo)
        self.started.release()
        return super().execute(inputs, n)


def test_a_batch_runs_solo_only_while_the_other_instances_are_idle_and_nothing_waits():
    model = SoloModel()
    s = Scheduler(model, ModelStats("held", "1"))
    try:
        one = s.submit({"x": np.ones((1, 2), np.float32)}, 0, time.monotonic_ns())
        assert model.started.acquire(timeout=5)
        two = s.submit({"x": np.ones((1, 2), np.float32)}, 0, time.monotonic_ns())  # the other instance takes it
        assert model.started.acquire(timeout=5)
        assert model.solos == [True, False]
        model.gate.set()
        one.result(5), two.result(5)
        _until(lambda: s._running == 0)
        s.submit({"x": np.ones((1, 2), np.float32)}, 0, time.monotonic_ns()).result(5)
        assert model.solos == [True, False, True]  # alone again
    finally:
        model.gate.set()
        s.close()
