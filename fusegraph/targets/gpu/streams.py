"""Async runs on CUDA streams, and the order between runs of one executable on several streams.

`run_async(exe, inputs, stream)` queues a run on `stream` (the executable's own one when None) and
returns a DeviceFuture at once: no host thread, no sync. Its outputs are copies made on that stream
(a context's output buffers are overwritten by its next run, which may be queued before the caller
reads them). `future.event` is recorded after them: `other_stream.wait_event(future.event)`, or
`run_async(..., after=[future])`, orders a later run on another stream after it without the host
waiting; that is how two programs on two streams form a pipeline.

One executable's buffers (its inputs, arena, graph) serve one run at a time: a run queued on a
stream other than the one its previous run went to waits, on the device, for that run's event
(`RunOrder`). Different contexts (executable.context()) have different buffers and run at once.
An index out of range in a run (index_checks.py) is raised by its future's `result()`, or by the
executable's next call if that comes first; nothing waits for the device to find out.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import api_boundary
from ...ir.run_limits import running
from ...runtime.validate import check_inputs
from .device import current_stream, to_host, torch


class RunOrder:
    """The event of an executable's last run and the stream it went to: a run on another stream
    waits for it on the device (the buffers are the executable's, whichever stream runs it)."""

    __slots__ = ("event", "stream")

    def __init__(self):
        self.event = self.stream = None

    def before(self, stream: Any) -> None:
        """Make `stream` (the run's; None off CUDA) wait for the last run when that went to another."""
        if self.event is not None and stream is not None and stream != self.stream:
            stream.wait_event(self.event)

    def after(self, stream: Any) -> None:
        """Record the run just queued on `stream` (None off CUDA)."""
        if stream is None:
            return
        self.stream = stream
        if self.event is None:
            self.event = torch().cuda.Event()
        self.event.record(stream)


class DeviceFuture:
    """A run queued on a CUDA stream. `result()` waits for it (the host blocks on its event only)
    and gives its outputs: device tensors, or numpy arrays when the run was given numpy arrays."""

    def __init__(self, event: Any, outputs: list[Any], shapes: list[Any], host: bool, checks: list[Any]):
        self.event, self._outputs, self._shapes, self._host = event, outputs, shapes, host
        self._checks = checks  # the executables of this run and of the runs it was queued after

    def done(self) -> bool:
        return bool(self.event.query())

    def result(self, timeout: float | None = None) -> list[Any]:
        """The outputs, once the run is done (`timeout` is accepted for concurrent.futures' form; a
        CUDA event is waited for without one). The run's error (an index out of range), or that of
        a run it was queued after (`after=`: a pipeline's earlier stage), is raised here, unless a
        later call on that executable raised it first."""
        self.event.synchronize()
        for exe in self._checks:  # their runs ended before this one: their flags are read by now
            exe._raise_late(wait=False)
        if not self._host:
            t = torch()
            for o in self._outputs:  # made on the run's stream, read on the caller's: not freed under it
                if isinstance(o, t.Tensor) and o.is_cuda:
                    o.record_stream(current_stream(o.device))
            return self._outputs
        return [to_host(v, s.dtype) if isinstance(v, torch().Tensor) else v for v, s in zip(self._outputs, self._shapes)]

    @property
    def device_outputs(self) -> list[Any]:
        """The outputs as device tensors, valid on the device once `event` has passed: what a later
        run on another stream reads after waiting for `event`."""
        return self._outputs


def run_async(exe: Any, inputs: Mapping[str, Any], stream: Any, after: Iterable[Any],
              deadline: float | None) -> Any:
    """Queue `exe`'s run on `stream` (None: the executable's own stream) after the runs `after`."""
    from .executable import is_device_tensor

    t = torch()
    host = not any(is_device_tensor(v) for v in inputs.values())
    if host:  # numpy in: checked (names, dtypes, shapes) as `run` checks them
        inputs = check_inputs(exe.input_specs, inputs)
    if exe.device.type != "cuda":  # Triton's interpreter: nothing to queue on; the run is done when returned
        return _done(exe, inputs, after, deadline, host)
    stream = stream if stream is not None else own_stream(exe)
    checks: list[Any] = []  # the earlier stages' executables first: their error is the first one
    for f in after:
        if isinstance(f, DeviceFuture):
            stream.wait_event(f.event)
            checks += [e for e in f._checks if e not in checks]
        else:
            f.result()
    checks += [exe] if exe not in checks else []
    for v in inputs.values():  # the caching allocator must not hand their memory out before the copy-in
        if isinstance(v, t.Tensor) and v.is_cuda:
            v.record_stream(stream)
    with running(deadline, exe.options.max_loop_iterations):
        outputs = exe.run_device(inputs, stream=stream, copy_outputs=True)
    event = t.cuda.Event()
    event.record(stream)
    return DeviceFuture(event, outputs, exe.output_shapes, host, checks)


def own_stream(exe: Any) -> Any:
    """The executable's (context's) own stream, made on first use."""
    s = exe.__dict__.get("_own_stream")
    if s is None:
        s = exe._own_stream = torch().cuda.Stream(exe.device)
    return s


def _done(exe: Any, inputs: Mapping[str, Any], after: Iterable[Any], deadline: float | None,
          host: bool) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()

    @api_boundary
    def run_async() -> list[Any]:
        for f in after:
            f.result()
        exe._run_pending_checks()
        with running(deadline, exe.options.max_loop_iterations):
            return exe.execute(dict(inputs)) if host else exe.run_device(inputs, copy_outputs=True)

    try:
        future.set_result(run_async())
    except Exception as e:  # the run's error is the future's, as on a worker thread
        future.set_exception(e)
    return future
