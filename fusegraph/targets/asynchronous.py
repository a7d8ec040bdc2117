"""`Executable.run_async` on the host targets (ref, cpu): a run on a worker thread, a
`concurrent.futures.Future` back.

Each executable has a pool of its own, made on the first `run_async`, with as many workers as it
can run at once without oversubscribing the cores (`Executable.async_workers`: the cpu target's
runs each use `threads` cores, so cores // threads of them): further runs queue. On cpu each worker
also takes its run's cores from the process's budget (targets/cpu/cores.py), so the async runs of
several programs do not oversubscribe the cores either. The gpu target
has its own `run_async` (targets/gpu/streams.py: work queued on a CUDA stream, no host thread).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ArgumentError, api_boundary
from ..ir.limits import cores  # noqa: F401  (imported from here by the targets)

_pool_lock = threading.Lock()


def submit(exe: Any, inputs: Mapping[str, Any], stream: Any, after: Iterable[Any],
           deadline: float | None) -> concurrent.futures.Future:
    """`exe.run(inputs)` on one of `exe`'s async workers, once the futures `after` have finished."""
    if stream is not None:
        raise ArgumentError(f"run_async(stream=...): streams are the gpu target's; this program runs on "
                            f"{getattr(exe.program, 'target_name', None)!r}")
    after = tuple(after)
    inputs = dict(inputs)  # the caller may change its dict meanwhile

    @api_boundary
    def run_async() -> list[Any]:
        for f in after:
            f.result()  # an earlier stage's error is this run's too
        with exe.holding_cores():
            return exe.run(inputs, deadline=deadline)

    return _pool(exe).submit(run_async)


def _pool(exe: Any) -> concurrent.futures.ThreadPoolExecutor:
    pool = exe.__dict__.get("_async_pool")
    if pool is None:
        with _pool_lock:
            pool = exe.__dict__.get("_async_pool")
            if pool is None:
                pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(1, exe.async_workers()), thread_name_prefix="fusegraph-run")
                exe._async_pool = pool
    return pool
