"""`bound(var, value)`: a block in which a context variable holds `value` (this thread or task only),
as the cpu target's build-time caches are made active (generated kernels, packed weights, a compiled
file's artifacts)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def bound(var: contextvars.ContextVar[T], value: T) -> Iterator[T]:
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
