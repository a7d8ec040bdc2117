"""How the cpu target's OpenMP workers wait between kernels (oneDNN and the generated kernels share
libgomp's one pool).

libgomp's default (no OMP_WAIT_POLICY): a worker that finished its part spins GOMP_SPINCOUNT = 300000
rounds (milliseconds) before it sleeps. On a machine whose cores other processes share, that spin
holds a core the worker it waits for needs: every barrier then waits out a scheduler slice. On the
2-core AVX-512 VM with other processes using about one core (load 3-4), two-thread runs took
YOLOv8n (nudenet, 320²) 47-538 ms against 12-18 ms with 10000 rounds, ResNet-50 278-664 ms against
70-89 ms (PASSIVE: 12-25 and 44-89 ms); ONNX Runtime's own pool spins briefly, then blocks, and did
not collapse. Quiet, 10000 rounds cost nothing measurable against the default (YOLOv8n 6.9-8.1 ms
against 6.7-8.3, ResNet-50 21.9-22.1 against 22.8-36.9; ppocr_cls 0.30 against 0.35, CRNN 0.82
against 1.11 ms in benchmarks/cpu_vs_ort.py), where 1000 rounds made the small models sleep between
their kernels (ppocr_cls 0.84 ms, CRNN 1.73) and PASSIVE made ResNet-50 1.7x slower.

Set before libgomp loads (it reads its environment once): when this package is imported, unless the
user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment: theirs applies). Where
libgomp was already loaded (another library brought it in first), this changes nothing.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from typing import TypeVar

SPINCOUNT = "10000"
T = TypeVar("T")


def set_wait_defaults(environ=os.environ) -> bool:
    """Whether the default was set (False: the user's policy stands)."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ["GOMP_SPINCOUNT"] = SPINCOUNT
    return True


def on_passing_thread(fn: Callable[..., T], *args) -> T:
    """`fn(*args)` on a thread that ends when it returns (in the caller's context), so that the
    caller's thread is left without an OpenMP team.

    libgomp gives every thread that runs a parallel region a team of its own, kept while that thread
    lives, and once it manages more threads than cores it cuts every team's spinning at barriers to
    100 rounds: each worker then sleeps at nearly every kernel and is woken for the next. Lowering
    runs parallel regions (oneDNN's weight packing), so a program lowered on a thread that lives on
    (a server's main thread) and run on others paid that on every run: ResNet-50 at 2 threads on the
    2-core machine slept 103-108 times a run against 2-28, p50 47-80 ms against 39-51 (alternating,
    load 1.6-1.9). A daemon thread: an interrupt stops the wait, not the process."""
    done: dict[str, object] = {}

    def work() -> None:
        try:
            done["value"] = fn(*args)
        except BaseException as e:  # re-raised on the caller's thread
            done["error"] = e

    thread = threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True,
                              name="fusegraph-cpu-lower")
    thread.start()
    thread.join()
    if "error" in done:
        raise done["error"]
    return done["value"]
