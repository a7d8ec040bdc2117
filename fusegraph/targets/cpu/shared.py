"""What the static compiles of one dynamic program share on cpu: one copy of each constant and of each
packed weight, however many input shapes it was specialized to (targets/specialize.py).

Most constants do not depend on the input shape: the parsed weights (every specialization reads the
same arrays already) and what the passes compute from them (BERT's merged QKV weights, YOLOv8n's
sliced convolutions), which each compile computes again, equal byte for byte. Before a
specialization is lowered, `intern` replaces each of its literals that equals (dtype, lens, bytes) a
constant an earlier one holds by that constant (a pass that derives a constant from weights asks
`computed` for it, which computes it once for all of them). oneDNN's packed weights are then named by the
constant array they view (a token per array, never reused, and the view's offset, lens and byte
strides), so a packing done for one shape serves the next wherever the kernel chose the same layout
(`MemDesc.layout_key`: for a convolution or product with fixed K and N, it usually does): a packed
weight is a function of the bytes it was packed from and of its layout, so this is exact.

Arrays are held weakly: a constant that only evicted specializations used goes with them, and its
name with it (a weakref callback drops the span before numpy frees the bytes, so a new array at the
same address is never taken for it).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextvars import ContextVar

import numpy as np

from ...ir.builtin import Literal
from ...ir.program import Program
from .context import bound

# below this a literal is cheaper to keep twice than to hash (shape values, scalars)
INTERN_BYTES = 512


class _Spans:
    """The byte spans of registered arrays by start address, each with its token; held weakly. A span
    may go at any moment (an evicted specialization freed in another thread, or by the collector in
    this one): the lock orders the changes, and `find` answers None rather than misname a view."""

    def __init__(self) -> None:
        self._at: dict[int, list[tuple[int, int, weakref.ref]]] = {}
        self._starts: list[int] = []
        self._tokens = itertools.count()
        self._lock = threading.RLock()  # reentrant: the collector may drop a span inside `add`

    def add(self, a: np.ndarray) -> None:
        lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
        token = next(self._tokens)
        ref = weakref.ref(a, lambda r, lo=lo, token=token: self._drop(lo, token))
        with self._lock:
            if lo not in self._at:
                bisect.insort(self._starts, lo)
            self._at[lo] = [*self._at.get(lo, ()), (hi, token, ref)]  # a new list: readers hold the old

    def _drop(self, lo: int, token: int) -> None:
        with self._lock:
            entries = [e for e in self._at.get(lo, ()) if e[1] != token]
            if entries:
                self._at[lo] = entries
            elif lo in self._at:
                del self._at[lo]
                i = bisect.bisect_left(self._starts, lo)
                if i < len(self._starts) and self._starts[i] == lo:
                    del self._starts[i]

    def find(self, a: np.ndarray) -> tuple[int, int] | None:
        """(token, offset) of a live registered array holding every byte `a` reads, or None."""
        if not a.size:
            return None
        lo = hi = a.ctypes.data
        for n, s in zip(a.shape, a.strides):
            lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
        with self._lock:
            i = bisect.bisect_right(self._starts, lo) - 1
            start = self._starts[i] if 0 <= i < len(self._starts) else None
            entries = self._at.get(start, ()) if start is not None else ()
        for end, token, ref in entries:
            if hi + a.itemsize <= end and ref() is not None:
                return token, a.ctypes.data - start
        return None


class SharedConstants:
    """The constants and packed weights of one dynamic program's specializations (see the module)."""

    def __init__(self, program: Program):
        from . import onednn

        self._spans = _Spans()
        self._by_content: dict[tuple, weakref.ref] = {}
        self._computed: dict[tuple, weakref.ref] = {}
        for m in program.modules_in_order():  # the parsed weights: shared by every specialization already
            for ins in m.instructions:
                if ins.is_literal and ins.literal.size:
                    self._spans.add(ins.literal)
        self.packing = onednn.PackingCache(self.name)
        self.interned = 0  # literals replaced by an equal constant an earlier specialization holds

    def name(self, a: np.ndarray) -> list[Hashable]:
        """How `pack` names the weight view `a`: by the constant it views, or not at all."""
        found = self._spans.find(a)
        if found is None:
            return []
        return [("shared", *found, tuple(a.shape), tuple(a.strides), a.dtype.str)]

    def intern(self, program: Program) -> None:
        """Replace `program`'s literals by equal constants held already; register the new ones."""
        for m in program.modules_in_order():
            for ins in m.instructions:
                if not ins.is_literal:
                    continue
                a = ins.literal
                if a.nbytes < INTERN_BYTES or not a.flags.c_contiguous or self._spans.find(a) is not None:
                    continue
                key = (a.dtype.str, a.shape, hashlib.blake2b(a.data, digest_size=20).digest())
                ref = self._by_content.get(key)
                held = ref() if ref is not None else None
                if held is not None and np.array_equal(held.view(np.uint8), a.view(np.uint8)):
                    ins.op = Literal(held)  # the same value: NaN payloads and signed zeros compare as bytes
                    self.interned += 1
                    continue
                self._by_content[key] = weakref.ref(a)
                self._spans.add(a)
        self._by_content = {k: r for k, r in self._by_content.items() if r() is not None}

    def computed(self, what: str, inputs: Sequence[np.ndarray], compute: Callable[[], np.ndarray]) -> np.ndarray:
        """`compute()` of constants `inputs`, or the array an earlier specialization got for the same
        `what` of the same constants (held ones only; any other input: computed, not kept)."""
        names = [self._spans.find(a) for a in inputs]
        if any(n is None for n in names):
            return compute()
        key = (what, *((*n, a.shape, a.strides, a.dtype.str) for n, a in zip(names, inputs)))
        ref = self._computed.get(key)
        held = ref() if ref is not None else None
        if held is None:
            held = compute()
            self._computed[key] = weakref.ref(held)
            self._spans.add(held)
        return held

    @contextlib.contextmanager
    def scope(self) -> Iterator[SharedConstants]:
        """The block in which one specialization is compiled with what the others share."""
        with bound(_ACTIVE, self):
            yield self


_ACTIVE: ContextVar[SharedConstants | None] = ContextVar("cpu_shared_constants", default=None)


def active() -> SharedConstants | None:
    """The dynamic program's shared constants while one of its specializations compiles, else None."""
    return _ACTIVE.get()


def computed(what: str, inputs: Sequence[np.ndarray], compute: Callable[[], np.ndarray]) -> np.ndarray:
    """`compute()`, a pure function named by `what` of the constant arrays `inputs`: a pass that
    derives a constant from weights calls this, so that a dynamic program's specializations compute
    it once (and hold it once) where their weights are the same."""
    shared = _ACTIVE.get()
    return compute() if shared is None else shared.computed(what, inputs, compute)
