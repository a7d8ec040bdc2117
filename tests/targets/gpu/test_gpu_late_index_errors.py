"""An index out of range in a gpu `run_device` or `run_async` (index_checks.py): the call does not
wait for the device; the op's ExecutionError comes at the executable's next call, `check()`, or
the future's `result()`, and the executable goes on working. `run` (and `checked=True`) raise it at
once, with the offending value. Off CUDA (Triton's interpreter) every run is done when it returns,
so there `run_device` raises at once too."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.errors import ExecutionError
from tests.ops.test_index_range import ERROR, model_of
from tests.util import run_fusegraph

LATE = "outside its axis in an earlier run_device or run_async call"


def _torch():
    import torch

    return torch


def _program(op: str, target) -> tuple[fusegraph.Program, dict, dict, np.ndarray]:
    """The compiled one-op program, its good and bad device feeds, and the good feeds' ref output."""
    t = _torch()
    model, good = model_of(op, -4)
    bad = model_of(op, 4)[1]
    p = fusegraph.parse_onnx(model)
    p.compile(target)
    dev = p.executable.device
    on_device = lambda feeds: {k: t.from_numpy(v).to(dev) for k, v in feeds.items()}  # noqa: E731
    return p, on_device(good), on_device(bad), run_fusegraph(model, good, "ref")[0]


def test_run_device_off_cuda_raises_in_the_call(gpu_target):
    p, good, bad, want = _program("Gather", gpu_target)
    if p.executable.device.type == "cuda":
        pytest.skip("the interpreter's case: on CUDA the error is late (the tests below)")
    with pytest.raises(ExecutionError, match=ERROR.format(4)):
        p.executable.run_device(bad)
    np.testing.assert_array_equal(p.executable.run_device(good)[0].cpu().numpy(), want)
    p.executable.check()  # nothing left over


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["Gather", "embedding", "GatherND", "ScatterND"])
def test_a_bad_run_device_is_raised_by_check_once(op, gpu_target):
    p, good, bad, want = _program(op, gpu_target)
    exe = p.executable
    exe.run_device(bad)  # returns: nothing waited for the device
    with pytest.raises(ExecutionError, match=LATE):
        exe.check()
    exe.check()  # read once: raised once
    np.testing.assert_array_equal(exe.run_device(good)[0].cpu().numpy(), want)
    exe.check()


@pytest.mark.gpu
def test_a_bad_run_device_is_raised_by_the_next_call_and_not_after(gpu_target):
    t = _torch()
    p, good, bad, want = _program("Gather", gpu_target)
    exe = p.executable
    exe.run_device(bad)
    t.cuda.synchronize()  # the flags' copy is done: the next call finds it
    with pytest.raises(ExecutionError, match=LATE):
        exe.run_device(good)
    for _ in range(3):
        np.testing.assert_array_equal(exe.run_device(good)[0].cpu().numpy(), want)
    exe.check()


@pytest.mark.gpu
def test_run_raises_an_earlier_run_devices_error_then_runs(gpu_target):
    p, good, bad, want = _program("Gather", gpu_target)
    p.executable.run_device(bad)
    with pytest.raises(ExecutionError, match=LATE):
        p.run(good)
    np.testing.assert_array_equal(p.run(good)[0].cpu().numpy(), want)


@pytest.mark.gpu
def test_checked_run_device_raises_now_with_the_value(gpu_target):
    p, good, bad, want = _program("GatherElements", gpu_target)
    with pytest.raises(ExecutionError, match=ERROR.format(4)):
        p.executable.run_device(bad, checked=True)
    np.testing.assert_array_equal(p.executable.run_device(good, checked=True)[0].cpu().numpy(), want)
    p.executable.check()


@pytest.mark.gpu
def test_a_bad_run_async_is_raised_by_its_result(gpu_target):
    t = _torch()
    p, good, bad, want = _program("Gather", gpu_target)
    s = t.cuda.Stream()
    with pytest.raises(ExecutionError, match=LATE):
        p.run_async(bad, stream=s).result()
    first, second = p.run_async(good, stream=s), p.run_async(good, stream=s)
    for f in (first, second):
        np.testing.assert_array_equal(f.result()[0].cpu().numpy(), want)


@pytest.mark.gpu
def test_run_device_reads_nothing_back_and_waits_for_nothing(gpu_target, monkeypatch):
    # what the late check is for: the host queues the next run while the device runs this one
    t = _torch()
    p, good, bad, _ = _program("Gather", gpu_target)
    exe = p.executable
    exe.check()

    def host_wait(*args, **kwargs):
        raise AssertionError("run_device waited for the device or read a device value back")

    with monkeypatch.context() as m:
        for owner, method in ((t.Tensor, "cpu"), (t.Tensor, "item"), (t.Tensor, "__bool__"),
                              (t.Tensor, "tolist"), (t.cuda.Event, "synchronize"), (t.cuda.Stream, "synchronize")):
            m.setattr(owner, method, host_wait)
        m.setattr(t.cuda, "synchronize", host_wait)
        exe.run_device(bad)
    with pytest.raises(ExecutionError, match=LATE):
        exe.check()


@pytest.mark.gpu
def test_a_bad_earlier_stage_is_raised_by_the_last_stages_result(gpu_target):
    # a pipeline's request fails by its own stage's error, not the next request's (the first
    # stage's future is never waited for: the second is queued after its event on the device)
    import onnx

    from tests.util import make_model

    t = _torch()
    p, good, bad, want = _program("Gather", gpu_target)
    n = onnx.helper.make_node
    y = np.zeros(want.shape, np.float32)
    second = fusegraph.parse_onnx(make_model([n("Neg", ["y"], ["z"])], {"y": y}, ["z"]))
    second.compile(gpu_target)
    s = t.cuda.Stream()
    first = p.run_async(bad, stream=s)
    last = second.run_async({"y": first.device_outputs[0]}, stream=s, after=[first])
    with pytest.raises(ExecutionError, match=LATE):
        last.result()
    first = p.run_async(good, stream=s)
    last = second.run_async({"y": first.device_outputs[0]}, stream=s, after=[first])
    np.testing.assert_array_equal(last.result()[0].cpu().numpy(), -want)


@pytest.mark.parametrize("values, flagged", [
    ([0, 3, -1, -4, 2], False),      # in range, negatives counted from the end
    ([0, 4, 1], True),               # one past the end
    ([-5, 1], True),                 # one before the start
    ([[1, 2], [3, 9]], True),        # a 2-D index tensor, the last entry out
])
def test_the_fused_wrap_kernel_matches_clamp_and_remainder(gpu_target, values, flagged):
    """index_checks.wrapped (one Triton kernel) gives what the clamp / remainder ops gave, and sets
    its cell exactly when an index is outside [-n, n)."""
    t = _torch()
    from fusegraph.targets.gpu.index_checks import wrapped

    dev = "cuda" if t.cuda.is_available() else "cpu"
    n = 4
    for dtype in (t.int64, t.int32):
        idx = t.tensor(values, dtype=dtype, device=dev)
        cell = t.zeros(3, dtype=t.bool, device=dev)[1:2]
        got = wrapped(idx.to(t.int64), n, cell)
        want = t.remainder(t.clamp(idx.to(t.int64), -n, n - 1), n)
        assert t.equal(got, want) and got.dtype == t.int64
        assert bool(cell.item()) == flagged
