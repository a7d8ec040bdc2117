"""One inference request, whatever protocol carried it: validated against the model's config before it
reaches the scheduler, queued, awaited, and recorded in the model's statistics."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import (
    InvalidRequestError,
    RequestCancelledError,
    RequestTimeoutError,
    ServeError,
    UnavailableError,
)
from .repository import LoadedModel
from .tensors import Datatype

# How long past its timeout a request waits for an answer whose batch has already started.
_RESULT_GRACE_S = 1.0


def check_input(loaded: LoadedModel, name: str, datatype: str, shape: Sequence[int]) -> Datatype:
    """The spec'd datatype of input `name` after checking its name, datatype and shape; raised as
    InvalidRequestError naming what differs. Called before the tensor's bytes are decoded."""
    model = loaded.model
    spec = next((s for s in model.inputs if s.name == name), None)
    if spec is None:
        raise InvalidRequestError(f"model {model.name!r} has no input {name!r}; its inputs are "
                                  f"{[s.name for s in model.inputs]}")
    if datatype != spec.datatype.name:
        raise InvalidRequestError(f"input {name!r} of model {model.name!r}: datatype {datatype}, expected "
                                  f"{spec.datatype.name}")
    shape = [int(d) for d in shape]
    if model.max_batch_size > 0:
        ok = len(shape) == len(spec.dims) + 1 and tuple(shape[1:]) == spec.dims
        expect = f"[N, {', '.join(map(str, spec.dims))}] with 1 <= N <= {model.max_batch_size}"
        if ok and not 1 <= shape[0] <= model.max_batch_size:
            raise InvalidRequestError(f"input {name!r} of model {model.name!r}: batch {shape[0]} outside "
                                      f"1..{model.max_batch_size} (max_batch_size)")
    else:
        ok, expect = tuple(shape) == spec.dims, str(list(spec.dims))
    if not ok:
        raise InvalidRequestError(f"input {name!r} of model {model.name!r}: shape {shape}, expected {expect}")
    return spec.datatype


def check_outputs(loaded: LoadedModel, requested: Sequence[str]) -> list[str]:
    """The output names to answer with: those requested (checked), else all."""
    names = [s.name for s in loaded.model.outputs]
    for r in requested:
        if r not in names:
            raise InvalidRequestError(f"model {loaded.name!r} has no output {r!r}; its outputs are {names}")
    if len(set(requested)) != len(requested):
        raise InvalidRequestError(f"outputs requested more than once: {list(requested)}")
    return list(requested) or names


@dataclass
class Submitted:
    """A request queued on its model's scheduler: its future, the outputs to answer with, and how long
    to wait for it (None: no limit)."""

    loaded: LoadedModel
    future: concurrent.futures.Future
    names: list[str]
    limit_s: float | None       # the request's timeout or deadline, whichever is first

    @property
    def wait_s(self) -> float | None:
        return None if self.limit_s is None else self.limit_s + _RESULT_GRACE_S

    def drop(self) -> bool:
        """Cancel it if it is still queued (the scheduler then drops it and counts it CANCELED)."""
        if self.future.cancel():
            self.loaded.scheduler.cancelled()
            return True
        return False

    def timed_out(self) -> RequestTimeoutError:
        return RequestTimeoutError(f"model {self.loaded.name!r}: no answer within the request's timeout "
                                   f"({self.limit_s * 1e3:.0f} ms)")

    def answer(self, result: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: result[k] for k in self.names}


def submit(loaded: LoadedModel, build: Callable[[], tuple[dict[str, np.ndarray], Sequence[str]]],
           timeout_s: float | None, arrival_ns: int, priority: int = 0,
           deadline_s: float | None = None) -> Submitted:
    """Decode a request with `build` (-> its inputs by name, the outputs it asks for; it checks each input
    with `check_input` before decoding it) and queue it. `timeout_s` is the request's `timeout`
    parameter, `deadline_s` the transport's limit. A request refused here is counted in the model's
    statistics, as Triton labels it; the scheduler counts what fails from then on."""
    model = loaded.model
    try:
        inputs, requested = build()
        names = check_outputs(loaded, requested)
        missing = [s.name for s in model.inputs if s.name not in inputs]
        if missing:
            raise InvalidRequestError(f"model {model.name!r}: request lacks inputs {missing}")
        n = 0
        if model.max_batch_size > 0:
            batches = {k: v.shape[0] for k, v in inputs.items()}
            if len(set(batches.values())) != 1:
                raise InvalidRequestError(f"model {model.name!r}: inputs differ in batch size {batches}")
            n = next(iter(batches.values()))
        future = loaded.scheduler.submit(inputs, n, arrival_ns, timeout_s, priority, deadline_s)
    except ServeError as e:
        reason = "REJECTED" if isinstance(e, UnavailableError) else "OTHER"  # queue full is UNAVAILABLE too
        loaded.stats.record_failure(reason, time.monotonic_ns() - arrival_ns)
        raise
    limits = [t for t in (timeout_s, deadline_s) if t is not None]
    return Submitted(loaded, future, names, min(limits) if limits else None)


def infer(loaded: LoadedModel, build: Callable[[], tuple[dict[str, np.ndarray], Sequence[str]]],
          timeout_s: float | None, arrival_ns: int, priority: int = 0, deadline_s: float | None = None,
          on_cancel: Callable[[Callable[[], None]], None] | None = None) -> dict[str, np.ndarray]:
    """`submit` a request and wait for it, in this thread: the requested outputs by name. `on_cancel`
    registers what to call when the client goes away (the request is then dropped from the queue)."""
    sub = submit(loaded, build, timeout_s, arrival_ns, priority, deadline_s)
    if on_cancel is not None:
        on_cancel(sub.drop)
    try:
        result = sub.future.result(sub.wait_s)
    except concurrent.futures.TimeoutError:
        if sub.drop():
            raise sub.timed_out() from None
        result = sub.future.result()  # running: its answer is moments away
    except concurrent.futures.CancelledError:
        raise RequestCancelledError(f"model {loaded.name!r}: the client cancelled the request") from None
    return sub.answer(result)


async def infer_async(loaded: LoadedModel, build: Callable[[], tuple[dict[str, np.ndarray], Sequence[str]]],
                      timeout_s: float | None, arrival_ns: int, priority: int = 0,
                      deadline_s: float | None = None) -> dict[str, np.ndarray]:
    """`infer` for an event loop: the loop is woken once, when the answer comes (no thread waits for
    it). Cancelling the awaiting task (the client went away) drops the request if it is still queued."""
    sub = submit(loaded, build, timeout_s, arrival_ns, priority, deadline_s)
    loop = asyncio.get_running_loop()
    answer = loop.create_future()

    def settle(f: concurrent.futures.Future) -> None:  # on the loop, once the scheduler is done with it
        if answer.done():
            return
        if f.cancelled():
            answer.set_exception(RequestCancelledError(f"model {loaded.name!r}: the request was cancelled"))
        elif f.exception() is not None:
            answer.set_exception(f.exception())
        else:
            answer.set_result(f.result())

    sub.future.add_done_callback(lambda f: loop.call_soon_threadsafe(settle, f))
    try:
        result = await asyncio.wait_for(asyncio.shield(answer), sub.wait_s)
    except TimeoutError:
        if sub.drop():
            raise sub.timed_out() from None
        result = await answer  # running: its answer is moments away
    except asyncio.CancelledError:
        sub.drop()
        raise
    return sub.answer(result)
