"""Memory descriptors and the buffers behind them.

A `MemDesc` owns a dnnl memory descriptor. Plain descriptors are written from numpy shapes and element
strides, so any strided numpy view (NCHW, NHWC, a transposed matrix) is described without a copy.
Descriptors a primitive chose (`format_tag_any`) may be blocked, e.g. nChw16c: such a tensor lives in
an opaque byte buffer of `desc.nbytes` and only oneDNN primitives (a `Reorder` back to a plain
descriptor) can read it.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from ctypes import c_int, c_int64, c_void_p

import numpy as np

from ....errors import InputError, ResourceError
from . import _lib

_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.int32): "s32", np.dtype(np.int8): "s8",
           np.dtype(np.uint8): "u8", np.dtype(np.float16): "f16"}
_BY_CODE = {code: name for name, code in _lib.DT.items()}
ALIGN = 64  # oneDNN's kernels load whole cache lines; keep every buffer we allocate on one


def dnnl_dtype(dtype) -> str:
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":  # ml_dtypes.bfloat16
        return "bf16"
    if dt not in _DTYPES:
        raise InputError(f"oneDNN has no data type for numpy {dt}")
    return _DTYPES[dt]


def aligned_empty(nbytes: int, dtype=np.uint8, shape: Sequence[int] | None = None) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ALIGN-byte boundary."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    buf = raw[start:start + nbytes].view(dtype)
    return buf.reshape(shape) if shape is not None else buf


# oneDNN takes int64 dims but some of its kernels keep a dim in 32 bits: a matmul of 2**32 rows
# (any multiple of 2**32 up to 2**60) divides by the truncated 0 and kills the process with SIGFPE.
MAX_DIM = 2**31 - 1


def check_dims(shape: Sequence[int]) -> tuple[int, ...]:
    """The dims as ints; ResourceError before oneDNN sees one it cannot index."""
    dims = tuple(int(d) for d in shape)
    if any(d > MAX_DIM for d in dims):
        raise ResourceError(f"oneDNN: a tensor of dims {list(dims)} has a dim past {MAX_DIM}, "
                            f"more than its kernels index")
    return dims


class MemDesc:
    """One dnnl_memory_desc_t, owned (destroyed with this object)."""

    __slots__ = ("handle", "shape", "dtype", "nbytes", "strides", "_lib")

    def __init__(self, handle: c_void_p):
        lib = _lib.load()
        self._lib, self.handle = lib, handle
        nd = c_int()
        lib.dnnl_memory_desc_query(handle, _lib.Q_NDIMS, ctypes.byref(nd))
        self.shape = self._dims_query(_lib.Q_DIMS, nd.value)
        dt = c_int()
        lib.dnnl_memory_desc_query(handle, _lib.Q_DATA_TYPE, ctypes.byref(dt))
        self.dtype = _BY_CODE.get(dt.value, "undef")
        self.nbytes = int(lib.dnnl_memory_desc_get_size(handle))
        # element strides when the layout is plain (no inner blocks), else None
        self.strides = self._dims_query(_lib.Q_STRIDES, nd.value) if self._plain() else None

    def _dims_query(self, what: int, n: int) -> tuple[int, ...]:
        ptr = ctypes.POINTER(c_int64)()
        _lib.check(self._lib.dnnl_memory_desc_query(self.handle, what, ctypes.byref(ptr)), "memory desc query")
        return tuple(ptr[:n])

    def _plain(self) -> bool:
        kind, nblks = c_int(), c_int()
        self._lib.dnnl_memory_desc_query(self.handle, _lib.Q_FORMAT_KIND, ctypes.byref(kind))
        if kind.value != _lib.FORMAT_KIND_BLOCKED:
            return False
        self._lib.dnnl_memory_desc_query(self.handle, _lib.Q_INNER_NBLKS, ctypes.byref(nblks))
        return nblks.value == 0

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def plain(cls, shape: Sequence[int], dtype="f32", strides: Sequence[int] | None = None) -> MemDesc:
        """A plain tensor; `strides` in elements (default: C-contiguous)."""
        shape = check_dims(shape)
        if strides is None:
            strides = tuple(int(math.prod(shape[i + 1:])) for i in range(len(shape)))
        md = c_void_p()
        lib = _lib.load()
        _lib.check(lib.dnnl_memory_desc_create_with_strides(
            ctypes.byref(md), len(shape), _lib.dims(shape), _lib.DT[dtype], _lib.dims(strides)),
            f"plain memory desc {shape} strides {tuple(strides)}")
        return cls._known(md, lib, shape, dtype, tuple(int(s) for s in strides))

    @classmethod
    def _known(cls, handle: c_void_p, lib, shape: tuple[int, ...], dtype: str, strides: tuple[int, ...]) -> MemDesc:
        """A plain descriptor just created from these dims and strides: nothing to ask oneDNN but its size."""
        self = cls.__new__(cls)
        self._lib, self.handle, self.shape, self.dtype, self.strides = lib, handle, shape, dtype, strides
        self.nbytes = int(lib.dnnl_memory_desc_get_size(handle))
        return self

    @classmethod
    def of_array(cls, a: np.ndarray) -> MemDesc:
        """The plain descriptor of a numpy array as it is laid out (its strides included)."""
        if any(s % a.itemsize for s in a.strides):
            raise InputError(f"array strides {a.strides} are not whole elements")
        return cls.plain(a.shape, dnnl_dtype(a.dtype), [s // a.itemsize for s in a.strides])

    @classmethod
    def any(cls, shape: Sequence[int], dtype="f32") -> MemDesc:
        """A placeholder that lets the primitive choose its preferred (often blocked) layout."""
        shape = check_dims(shape)
        md = c_void_p()
        _lib.check(_lib.load().dnnl_memory_desc_create_with_tag(
            ctypes.byref(md), len(shape), _lib.dims(shape), _lib.DT[dtype], _lib.FORMAT_TAG_ANY),
            f"memory desc {tuple(shape)} format any")
        return cls(md)

    @classmethod
    def borrowed(cls, handle: int | None) -> MemDesc:
        """A copy of a descriptor owned by someone else (a primitive descriptor's query result)."""
        md = c_void_p()
        _lib.check(_lib.load().dnnl_memory_desc_clone(ctypes.byref(md), handle), "cloning a memory desc")
        return cls(md)

    # -- properties -------------------------------------------------------------------------------
    @property
    def is_plain(self) -> bool:
        return self.strides is not None

    @property
    def byte_strides(self) -> tuple[int, ...] | None:
        if self.strides is None:
            return None
        size = np.dtype(self.numpy_dtype).itemsize
        return tuple(s * size for s in self.strides)

    @property
    def layout_key(self) -> str | None:
        """Everything that places this tensor's elements in its bytes (dims, padding, strides, inner
        blocks, size), as text: equal keys mean equal layouts, also across processes (a packed weight
        saved in a compiled file is checked against it). None for a format that is not blocked."""
        kind = c_int()
        self._lib.dnnl_memory_desc_query(self.handle, _lib.Q_FORMAT_KIND, ctypes.byref(kind))
        if kind.value != _lib.FORMAT_KIND_BLOCKED:
            return None
        nd, nblks, offset0 = len(self.shape), c_int(), c_int64()
        self._lib.dnnl_memory_desc_query(self.handle, _lib.Q_INNER_NBLKS, ctypes.byref(nblks))
        self._lib.dnnl_memory_desc_query(self.handle, _lib.Q_SUBMEMORY_OFFSET, ctypes.byref(offset0))
        q = self._dims_query
        return (f"{self.dtype} dims={list(self.shape)} padded={list(q(_lib.Q_PADDED_DIMS, nd))} "
                f"offsets={list(q(_lib.Q_PADDED_OFFSETS, nd))}+{offset0.value} strides={list(q(_lib.Q_STRIDES, nd))} "
                f"blocks={list(q(_lib.Q_INNER_BLKS, nblks.value))}@{list(q(_lib.Q_INNER_IDXS, nblks.value))} "
                f"bytes={self.nbytes}")

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.dtype == "bf16":
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return next(k for k, v in _DTYPES.items() if v == self.dtype)

    def empty(self) -> np.ndarray:
        """A fresh aligned buffer for this descriptor: shaped and strided like it when plain, else bytes."""
        if not self.is_plain:
            return aligned_empty(self.nbytes)
        buf = aligned_empty(self.nbytes, self.numpy_dtype)
        return np.lib.stride_tricks.as_strided(buf, self.shape, self.byte_strides)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemDesc) and bool(self._lib.dnnl_memory_desc_equal(self.handle, other.handle))

    __hash__ = None  # type: ignore[assignment]  # mutable identity, equality by layout

    def __repr__(self) -> str:
        layout = f"strides={self.strides}" if self.is_plain else "blocked"
        return f"MemDesc({self.dtype}{list(self.shape)}, {layout}, {self.nbytes} bytes)"

    def __del__(self):
        if getattr(self, "handle", None) is not None and self._lib is not None:
            self._lib.dnnl_memory_desc_destroy(self.handle)
            self.handle = None
