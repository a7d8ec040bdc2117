"""Limits one run keeps to, so that no input makes it spin: a deadline checked between steps, and a
bound on every Loop's iterations.

`Executable.run(inputs, deadline=...)` opens a `running(...)` block for the call with its deadline and
the program's `CompileOptions.max_loop_iterations`; the steps of every target, and control-flow bodies
at any depth, check them through `check_deadline` and `check_loop`. The limits are the call's own
(a context variable: another thread's run, or a run nested in a custom op, has its own); outside a run
nothing is limited.

The default bound on a Loop, 10**6 iterations: every target runs a body's steps from Python (a one-add
body took 190-260 µs an iteration on the ref and cpu targets on the 2-core development VM under load,
so 10**6 iterations were 3-4 minutes there), while the loops of real models are far shorter (token
generation: thousands; loops over boxes or classes: at most about 10**5) and a loop over every sample
of a long signal still fits. A Loop whose trip count is past the bound and whose condition cannot stop
it earlier (the body returns its condition unchanged) fails before its first iteration; any other
fails at the iteration past the bound, and a `deadline` stops it sooner.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections.abc import Iterator

from ..errors import DeadlineExceeded, ExecutionError, InputError

DEFAULT_MAX_LOOP_ITERATIONS = 10**6


@dataclasses.dataclass(frozen=True)
class RunLimits:
    deadline_at: float | None = None  # time.monotonic() past which the run stops
    seconds: float | None = None      # the deadline as given, for messages
    max_loop_iterations: int | None = None


_UNLIMITED = RunLimits()  # frozen: one shared default is safe
_LIMITS: contextvars.ContextVar[RunLimits] = contextvars.ContextVar("run_limits", default=_UNLIMITED)


@contextlib.contextmanager
def running(deadline: float | None, max_loop_iterations: int | None) -> Iterator[RunLimits]:
    """The limits of one run: `deadline` seconds from now (None: none), `max_loop_iterations`."""
    token = start(deadline, max_loop_iterations)
    try:
        yield _LIMITS.get()
    finally:
        _LIMITS.reset(token)


def start(deadline: float | None, max_loop_iterations: int | None) -> contextvars.Token:
    """`running` without its context manager (a small model's run is microseconds): the caller
    resets the returned token (`_LIMITS.reset` through `stop`) in a finally block."""
    if deadline is None:
        limits = _NO_DEADLINE.get(max_loop_iterations)
        if limits is None:
            limits = _NO_DEADLINE[max_loop_iterations] = RunLimits(None, None, max_loop_iterations)
        return _LIMITS.set(limits)
    if not (isinstance(deadline, (int, float)) and deadline > 0):
        raise InputError(f"deadline must be a positive number of seconds, not {deadline!r}")
    return _LIMITS.set(RunLimits(time.monotonic() + deadline, deadline, max_loop_iterations))


def stop(token: contextvars.Token) -> None:
    _LIMITS.reset(token)


_NO_DEADLINE: dict[int | None, RunLimits] = {}  # frozen values: shared by every run without a deadline


def current() -> RunLimits:
    return _LIMITS.get()


def check_deadline(what: str = "") -> None:
    """DeadlineExceeded if this run is past its deadline (`what`: the step about to run)."""
    at = _LIMITS.get().deadline_at
    if at is not None and time.monotonic() > at:
        where = f" before {what}" if what else ""
        raise DeadlineExceeded(f"the run passed its deadline of {_LIMITS.get().seconds} s{where}")


def check_loop(iterations: int, what: str, before: bool = False) -> None:
    """ExecutionError when a Loop reaches `iterations` past this run's bound; `before`: the loop is
    known to run that many times, and is refused before its first."""
    bound = _LIMITS.get().max_loop_iterations
    if bound is not None and iterations > bound:
        when = f"would run {iterations} iterations" if before else f"ran past {bound} iterations"
        raise ExecutionError(f"{what} {when}, more than max_loop_iterations={bound} "
                             f"(CompileOptions.max_loop_iterations raises the bound)")
