"""How large a tensor may be: what the kernels' index types hold and what this machine's memory holds.

Sizes come from files and from values (a Range's limit, a Tile's repeats, a Resize's scales), so they
are checked before anything is allocated or handed to native code: a tensor past these limits is a
`ResourceError` naming it, at once, instead of a MemoryError after seconds of work or a native
library's integer overflow. Compiles check their peak memory against `CompileOptions.max_memory`
(targets/resources.py); ops that make a tensor from values check its size here first, against the
machine's physical memory, the most any run could hold.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import IRError, ResourceError
from .dtypes import DType

# Every kernel addresses bytes with int64 (numpy's intp, the generated C's int64_t, oneDNN's dims):
# a tensor's byte size, and so every dim and element count, must stay below this.
MAX_BYTES = 2**63 - 1


@functools.cache
def physical_memory() -> int:
    """This machine's RAM in bytes (the most any tensor or run could hold); MAX_BYTES if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system, or it will not say
        return MAX_BYTES


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def tensor_bytes(lens: Sequence[int], dtype: DType) -> int:
    """The bytes of a dense tensor (exact: Python ints do not overflow)."""
    return math.prod(int(n) for n in lens) * (8 if dtype == DType.string else dtype.itemsize)  # strings: pointers


def check_tensor(lens: Sequence[int], dtype: DType, what: str, limit: int | None = None) -> None:
    """Raise ResourceError, naming `what`, unless a `lens` tensor of `dtype` fits `limit` bytes
    (default: this machine's memory)."""
    if any(int(n) < 0 for n in lens):
        return  # the op's own checks refuse negative dims with their message
    need = tensor_bytes(lens, dtype)
    cap = min(MAX_BYTES, physical_memory() if limit is None else limit)
    if need > cap:
        which = "the machine's memory" if limit is None else "the memory limit"
        raise ResourceError(f"{what}: its output {dtype}[{','.join(map(str, lens))}] would take "
                            f"{format_bytes(need)}, more than {which} ({format_bytes(cap)})")


# Control flow nests bodies in bodies; every level costs each target a few Python frames when it runs
# (the cpu target about six), so past this a run would end in RecursionError. ONNX models cannot nest
# deeper than about 48 (protobuf's decoder stops at 100 nested messages, two per level).
MAX_NESTING = 100


def check_nesting(modules: Iterable[Any]) -> None:
    """IRError unless every module's chain of parents is finite (no cycle) and at most MAX_NESTING long."""
    for m in modules:
        depth, seen, p = 0, {id(m)}, m.parent
        while p is not None:
            depth += 1
            if id(p) in seen:
                raise IRError(f"module {m.name}: its parents form a cycle")
            if depth > MAX_NESTING:
                raise IRError(f"module {m.name} is nested more than {MAX_NESTING} bodies deep (control flow "
                              f"in control flow), more than fusegraph runs")
            seen.add(id(p))
            p = p.parent
