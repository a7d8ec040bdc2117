"""What every bound primitive shares: created once, called many times over caller-owned buffers.

A `Primitive` holds a primitive descriptor, the primitive, and its constant arguments (packed
weights, bias). Calling it binds numpy buffers zero-copy: their data pointers become the handles of
dnnl memory objects, reset only when a pointer changes (a runtime that reuses one arena pays nothing).
Those memory objects, the argument array and the scratchpad belong to the calling thread, so one
primitive may run from several threads at once. Scratchpad is in user mode: `scratchpad_bytes` tells
how much, and a call may pass its own (a slice of the runtime's arena); otherwise each thread
allocates one buffer once.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from ctypes import c_void_p

import numpy as np

from ....errors import CompileError, FusegraphError, InputError
from ....ir.shape import same_steps
from ..context import bound
from . import _lib
from .memory import ALIGN, MemDesc, aligned_empty
from .postops import Attr


class _Slot:
    """One execution argument: its id, its descriptor and how a buffer for it is checked."""

    __slots__ = ("arg", "desc", "name", "shape", "strides", "dtype", "nbytes")

    def __init__(self, arg: int, desc: MemDesc, name: str, ndim: int | None = None):
        self.arg, self.desc, self.name = arg, desc, name
        self.shape, self.strides, self.nbytes = desc.shape, desc.byte_strides, desc.nbytes
        self.dtype = desc.numpy_dtype
        if ndim is not None and self.strides is not None:  # the caller's array lacks the leading 1-dims
            self.shape, self.strides = self.shape[len(self.shape) - ndim:], self.strides[len(self.shape) - ndim:]

    def pointer(self, a: np.ndarray, owner: str) -> int:
        if self.strides is not None:  # plain: the array must be laid out exactly as described
            if a.shape != self.shape or a.dtype != self.dtype or not same_steps(a.strides, self.strides, self.shape):
                raise InputError(f"{owner}: {self.name} must be {self.dtype}{list(self.shape)} with byte "
                                 f"strides {self.strides}; got {a.dtype}{list(a.shape)} strides {a.strides}")
        elif not a.flags.c_contiguous or a.nbytes < self.nbytes:  # blocked: an opaque byte buffer
            raise InputError(f"{owner}: {self.name} is blocked ({self.desc}); it needs a contiguous "
                             f"buffer of {self.nbytes} bytes, got {a.nbytes} bytes")
        return a.ctypes.data


class _Context:
    """Per-thread execution state: memory objects, the argument array, the last bound pointers."""

    def __init__(self, prim: Primitive):
        lib = _lib.load()
        slots = prim._slots + [_Slot(arg, desc, "constant") for arg, desc, _ in prim._constants]
        self.mems = []
        for s in slots:
            m = c_void_p()
            _lib.check(lib.dnnl_memory_create(ctypes.byref(m), s.desc.handle, lib.engine, None), "memory object")
            self.mems.append(m)
        for m, (_, _, array) in zip(self.mems[len(prim._slots):], prim._constants):
            lib.dnnl_memory_set_data_handle(m, array.ctypes.data)
        self.args = (_lib.ExecArg * len(slots))(*[_lib.ExecArg(s.arg, m) for s, m in zip(slots, self.mems)])
        self.last = [0] * len(prim._slots)
        self.stream = lib.stream()
        self.scratchpad = None

    def __del__(self):
        lib = _lib.load()
        for m in self.mems:
            lib.dnnl_memory_destroy(m)


class Primitive:
    """Base of the bound primitives. A subclass's __init__ creates its descriptor with `_create(...)`,
    packs its constants, then calls `_finish(pd, slots, constants)`.

    Calls take the primary inputs, then one array per Binary post-op, then `out=` (allocated when
    omitted) and optionally `scratchpad=`; they return `out`. `threads` (default: all cores) is set
    for OpenMP before creating (kernels split work by it) and before every call (OpenMP keeps the
    setting per calling thread).
    """

    n_inputs = 1

    def __init__(self, threads: int | None, allow_ref: bool = False):
        self._lib = _lib.load()
        self.threads = threads or _lib.default_threads()
        self.allow_ref = allow_ref
        # Kernels split work by the thread count seen at creation; set it before creating.
        self._lib.omp_set_num_threads(self.threads)
        self._pd = self._prim = None
        self._local = threading.local()

    def _create(self, what: str, fn, *args) -> c_void_p:
        """Call a *_primitive_desc_create function and own the result. oneDNN's answer to a problem its
        optimized kernels do not cover is its naive reference kernel (`ref:any`, 100-1000x slower): that
        is a CompileError too unless `allow_ref`, so the caller can choose another formulation."""
        pd = c_void_p()
        st = fn(ctypes.byref(pd), *args)
        if st:
            raise CompileError(f"oneDNN has no {what} ({_lib.STATUS.get(st, st)})")
        self._pd = pd
        if not self.allow_ref and self.impl.startswith("ref"):
            raise CompileError(f"oneDNN has only its reference kernel ({self.impl}) for {what}; "
                               "pass allow_ref=True to accept it")
        return pd

    def _finish(self, pd: c_void_p, slots: Sequence[tuple],
                constants: Sequence[tuple[int, MemDesc, np.ndarray]] = ()) -> None:
        """Take ownership of `pd`, create the primitive. `slots`: the per-call arguments as (arg id, desc,
        name[, rank the caller's arrays have]), inputs first and the destination last; `constants`:
        arguments bound once (their arrays are kept alive here)."""
        lib = self._lib
        self._pd = pd
        prim = c_void_p()
        _lib.check(lib.dnnl_primitive_create(ctypes.byref(prim), pd), f"creating {type(self).__name__}")
        self._prim = prim
        self.scratchpad_bytes = int(lib.dnnl_memory_desc_get_size(lib.dnnl_primitive_desc_query_md(
            pd, _lib.Q_SCRATCHPAD_MD, 0)))
        # the descriptors the primitive settled on: what was passed as `any` is concrete now (run-time
        # scales and zero points are the caller's plain vectors: the primitive describes none)
        quant_args = _lib.ARG_ATTR_SCALES | _lib.ARG_ATTR_ZERO_POINTS
        slots = [(arg, given if arg & quant_args else self._settled(arg, given), *rest) for arg, given, *rest in slots]
        if self.scratchpad_bytes:
            slots.append((_lib.ARG_SCRATCHPAD, self.query_md(_lib.Q_SCRATCHPAD_MD), "scratchpad"))
        self._slots = [_Slot(*s) for s in slots]
        self._constants = list(constants)
        self._n_call = len(self._slots) - (1 if self.scratchpad_bytes else 0)
        self._owner = f"oneDNN {type(self).__name__}"

    def _settled(self, arg: int, given: MemDesc | None) -> MemDesc:
        """The descriptor the primitive takes argument `arg` in: `given` itself when it is that (most
        plain activations; one comparison instead of a copy and its queries), else a copy of it."""
        handle = self._lib.dnnl_primitive_desc_query_md(self._pd, _lib.Q_EXEC_ARG_MD, arg)
        if given is not None and self._lib.dnnl_memory_desc_equal(handle, given.handle):
            return given
        return MemDesc.borrowed(handle)

    # -- queries ----------------------------------------------------------------------------------
    def query_md(self, what: int, index: int = 0) -> MemDesc:
        return MemDesc.borrowed(self._lib.dnnl_primitive_desc_query_md(self._pd, what, index))

    @property
    def impl(self) -> str:
        """oneDNN's name of the implementation it picked (e.g. brg:avx512_core_amx, jit:avx512_core)."""
        pd = self._pd
        cached = getattr(self, "_impl", None)
        if cached is not None and cached[0] is pd:
            return cached[1]
        s = ctypes.c_char_p()
        _lib.check(self._lib.dnnl_primitive_desc_query(pd, _lib.Q_IMPL_INFO_STR, 0, ctypes.byref(s)), "impl")
        self._impl = (pd, (s.value or b"").decode())
        return self._impl[1]

    @property
    def dst_desc(self) -> MemDesc:
        return self._slots[self._n_call - 1].desc

    def input_desc(self, i: int) -> MemDesc:
        return self._slots[i].desc

    # -- execution --------------------------------------------------------------------------------
    def __call__(self, *inputs: np.ndarray, out: np.ndarray | None = None,
                 scratchpad: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = self._fresh_out()
        ctx = self._bind(inputs, out, scratchpad)
        self._lib.omp_set_num_threads(self.threads)
        st = self._lib.dnnl_primitive_execute(self._prim, ctx.stream, len(ctx.args), ctx.args)
        if st:
            raise FusegraphError(f"{self._owner}: execution failed ({_lib.STATUS.get(st, st)})")
        return out

    def native_call(self, *inputs: np.ndarray, out: np.ndarray) -> tuple[int, int, int, int, int]:
        """(primitive, stream, argument count, argument array, threads): dnnl_primitive_execute's
        arguments over these buffers, for a native program to call from C (native_program.py). The
        calling thread's memory objects are bound to them: its calls of the step from Python bind
        the same buffers (a thread's arena stays where it is), so the binding holds."""
        ctx = self._bind(inputs, out, None)
        return self._prim.value, ctx.stream.value, len(ctx.args), ctypes.addressof(ctx.args), self.threads

    def _bind(self, inputs: Sequence[np.ndarray], out: np.ndarray, scratchpad: np.ndarray | None) -> _Context:
        """This thread's execution context with its memory objects pointing at `inputs` and `out`."""
        n = self._n_call - 1
        if len(inputs) != n:
            raise InputError(f"{self._owner}: expected {n} input arrays ({self.n_inputs} inputs + binary "
                             f"post-op operands), got {len(inputs)}")
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            ctx = self._local.ctx = _Context(self)
        slots, last, mems, lib, owner = self._slots, ctx.last, ctx.mems, self._lib, self._owner
        for i, a in enumerate((*inputs, out)):
            p = slots[i].pointer(a, owner)
            if p != last[i]:
                lib.dnnl_memory_set_data_handle(mems[i], p)
                last[i] = p
        if self.scratchpad_bytes:
            if scratchpad is None:
                if ctx.scratchpad is None:
                    ctx.scratchpad = slots[-1].desc.empty()
                scratchpad = ctx.scratchpad
            p = slots[-1].pointer(scratchpad, owner)
            if p != last[-1]:  # the scratchpad is the last slot (constants follow it in `mems`)
                lib.dnnl_memory_set_data_handle(mems[len(slots) - 1], p)
                last[-1] = p
        return ctx

    def _fresh_out(self) -> np.ndarray:
        return self.dst_desc.empty()

    def __del__(self):
        lib = getattr(self, "_lib", None)
        if lib is not None and getattr(self, "_prim", None) is not None:
            lib.dnnl_primitive_destroy(self._prim)
        if lib is not None and getattr(self, "_pd", None) is not None:
            lib.dnnl_primitive_desc_destroy(self._pd)


class Reorder(Primitive):
    """Copies a tensor between two layouts of the same shape (plain <-> blocked, NCHW <-> NHWC)."""

    def __init__(self, src: MemDesc, dst: MemDesc, threads: int | None = None):
        super().__init__(threads, allow_ref=True)  # edges and weight packing only; any kernel will do
        if src.shape != dst.shape:
            raise CompileError(f"oneDNN Reorder: shapes differ, {list(src.shape)} -> {list(dst.shape)}")
        lib = self._lib
        with Attr((), ()) as attr:
            pd = self._create(f"reorder {src} -> {dst}", lib.dnnl_reorder_primitive_desc_create,
                              src.handle, lib.engine, dst.handle, lib.engine, attr.handle)
        self._finish(pd, [(_lib.ARG_SRC, src, "src"), (_lib.ARG_DST, dst, "dst")])


def pack(array: np.ndarray, desc: MemDesc, threads: int | None = None) -> np.ndarray:
    """`array` (plain, as laid out) reordered into `desc`; a plain copy when they already agree. Within
    `packing_cache(cache)`, a packing the cache holds is not done again, and what is packed is recorded."""
    cache = _PACKING.get()
    return cache.pack(array, desc, threads) if cache is not None else _reorder(array, desc, threads)


def _reorder(array: np.ndarray, desc: MemDesc, threads: int | None) -> np.ndarray:
    src = MemDesc.of_array(array)
    return np.array(array, copy=True) if src == desc else Reorder(src, desc, threads)(array)


class PackingCache:
    """Packed weights kept beyond one process: `pack` records what it packs here, and takes what was
    packed before (`provided`: a compiled file's bytes) instead of packing again.

    `identify(array)` names the weights `pack` reads in a way that holds across processes (the cpu
    target: an IR literal and the view of it), or returns () where it cannot; the first name is the one
    recorded, any may match. A provided packing is used only for exactly the layout it was packed for
    (`MemDesc.layout_key`), and without a copy where its buffer is ALIGN-byte aligned.
    """

    def __init__(self, identify: Callable[[np.ndarray], Sequence[Hashable]],
                 provided: Mapping[tuple[Hashable, str], memoryview] | None = None,
                 shared: PackingCache | None = None):
        self.identify = identify
        self.provided = dict(provided or {})
        self.shared = shared  # asked for what this one lacks (the packings of a dynamic program's other shapes)
        self._packed: dict[tuple[Hashable, str], weakref.ref] = {}
        self._from_file: set[tuple[Hashable, str]] = set()

    def pack(self, array: np.ndarray, desc: MemDesc, threads: int | None = None) -> np.ndarray:
        """`pack(array, desc)` through this cache: what it (or `shared`) holds, else packed and recorded."""
        names = self.identify(array)
        layout = desc.layout_key if names else None
        if layout is not None:
            packed = self.lookup(names, layout, desc.nbytes)
            if packed is not None:
                return packed
        packed = self.shared.pack(array, desc, threads) if self.shared is not None else _reorder(array, desc, threads)
        if layout is not None:
            self.record(names[0], layout, packed)
        return packed

    @property
    def hits(self) -> int:
        """How many distinct packings were taken from `provided`."""
        return len(self._from_file)

    def lookup(self, names: Sequence[Hashable], layout: str, nbytes: int) -> np.ndarray | None:
        for name in names:
            # packed already (two primitives over one weight: a kernel's fast and exact forms): one copy
            done = self._packed.get((name, layout))
            if done is not None and (packed := done()) is not None and packed.nbytes == nbytes:
                return packed
            saved = self.provided.get((name, layout))
            if saved is None or saved.nbytes != nbytes:
                continue
            packed = np.frombuffer(saved, np.uint8)
            if packed.ctypes.data % ALIGN:  # oneDNN's kernels load whole cache lines: an aligned copy
                packed = aligned_empty(nbytes)
                packed[:] = np.frombuffer(saved, np.uint8)
            self._from_file.add((name, layout))
            self.record(name, layout, packed)
            return packed
        return None

    def record(self, name: Hashable, layout: str, packed: np.ndarray) -> None:
        # weakly: a primitive built and discarded (a kernel choice that was refused) keeps nothing alive
        self._packed[(name, layout)] = weakref.ref(packed)

    def packed(self) -> dict[tuple[Hashable, str], np.ndarray]:
        """What was packed or taken (and is still used), by (name, layout)."""
        live = {key: ref() for key, ref in self._packed.items()}
        return {key: a for key, a in live.items() if a is not None}


_PACKING: contextvars.ContextVar[PackingCache | None] = contextvars.ContextVar("onednn_packing", default=None)


def packing_cache(cache: PackingCache) -> contextlib.AbstractContextManager[PackingCache]:
    """Make `pack` consult and fill `cache` in this block (this thread or task only)."""
    return bound(_PACKING, cache)
