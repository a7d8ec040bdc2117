"""Native-program records of indexing steps (native_program.py runs them): gathers and scatters by
run-time indices, each checking its indices first (one out of range stops the region there, and the
step's Python form raises its error)."""

from __future__ import annotations

import ctypes

import numpy as np

from .native_program import GATHER, GATHER_ELEMENTS, GATHER_ND, SCATTER_ELEMENTS, SCATTER_ND, Call, copy


def gather(out: np.ndarray, data: np.ndarray, indices: np.ndarray, axis: int) -> Call | None:
    """out = take(data, indices, axis) (negative indices from the end); an index out of range stops
    the region there, so the step's Python form raises its error. None unless all three are dense
    and the indices int32 or int64."""
    if (not all(a.flags.c_contiguous for a in (out, data, indices)) or indices.dtype not in (np.int32, np.int64)
            or out.dtype != data.dtype or out.size == 0 or indices.size == 0):
        return None
    outer = int(np.prod(data.shape[:axis]))
    block = int(np.prod(data.shape[axis + 1:])) * data.itemsize
    geometry = (ctypes.c_int64 * 4)(outer, block, data.shape[axis], indices.itemsize)
    return ((GATHER, 1, indices.ctypes.data, out.ctypes.data, data.ctypes.data, ctypes.addressof(geometry),
             indices.size), (out, data, indices, geometry))


def gather_nd(out: np.ndarray, data: np.ndarray, indices: np.ndarray) -> Call | None:
    """out = data[tuple(indices[..., k])] (ONNX GatherND, batch_dims 0; negative indices from the
    end); an index out of range stops the region there, as `gather`. None unless all are dense and
    the indices int64."""
    if (not all(a.flags.c_contiguous for a in (out, data, indices)) or indices.dtype != np.int64
            or out.dtype != data.dtype or out.size == 0 or indices.size == 0 or indices.ndim < 1):
        return None
    k = indices.shape[-1]
    lens = data.shape[:k]
    block = int(np.prod(data.shape[k:])) * data.itemsize
    strides = [int(np.prod(lens[j + 1:])) for j in range(k)]
    geometry = (ctypes.c_int64 * (2 + 2 * k))(k, block, *lens, *strides)
    return ((GATHER_ND, 1, indices.ctypes.data, out.ctypes.data, data.ctypes.data, ctypes.addressof(geometry),
             indices.size // k), (out, data, indices, geometry))


_SCATTER = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


def scatter_nd(out: np.ndarray, data: np.ndarray, indices: np.ndarray, updates: np.ndarray,
               reduction: str) -> list[Call] | None:
    """out = data with `updates` written (or reduced) at the tuples of `indices` (ONNX ScatterND,
    float32), in order like numpy's ufunc.at; an index out of range stops the region as `gather`."""
    if (not all(a.flags.c_contiguous for a in (out, data, indices, updates)) or indices.dtype != np.int64
            or not out.dtype == data.dtype == updates.dtype == np.float32 or reduction not in _SCATTER
            or indices.size == 0 or indices.ndim < 1 or np.shares_memory(out, updates)):
        return None
    k = indices.shape[-1]
    lens = data.shape[:k]
    strides = [int(np.prod(lens[j + 1:])) for j in range(k)]
    geometry = (ctypes.c_int64 * (4 + 2 * k))(k, int(np.prod(data.shape[k:])), *lens, *strides, _SCATTER[reduction],
                                              updates.ctypes.data)
    calls = [] if out.ctypes.data == data.ctypes.data else [copy(out, data)]
    return [*calls, ((SCATTER_ND, 1, indices.ctypes.data, out.ctypes.data, 0, ctypes.addressof(geometry),
                      indices.size // k), (out, data, indices, updates, geometry))]


def scatter_elements(out: np.ndarray, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int,
                     reduction: str) -> list[Call] | None:
    """out = data with `updates` written (or reduced) where `indices` say along `axis` (ONNX
    ScatterElements, float32, indices as long as data on every other axis), in order like numpy's
    ufunc.at; an index out of range stops the region as `gather`."""
    if (not all(a.flags.c_contiguous for a in (out, data, indices, updates)) or indices.dtype != np.int64
            or not out.dtype == data.dtype == updates.dtype == np.float32 or reduction not in _SCATTER
            or indices.shape != updates.shape or indices.size == 0 or np.shares_memory(out, updates)
            or any(a != b for k, (a, b) in enumerate(zip(indices.shape, data.shape)) if k != axis)):
        return None
    outer, inner = int(np.prod(data.shape[:axis])), int(np.prod(data.shape[axis + 1:]))
    geometry = (ctypes.c_int64 * 6)(outer, indices.shape[axis], inner, data.shape[axis], _SCATTER[reduction],
                                    updates.ctypes.data)
    calls = [] if out.ctypes.data == data.ctypes.data else [copy(out, data)]
    return [*calls, ((SCATTER_ELEMENTS, 1, indices.ctypes.data, out.ctypes.data, 0, ctypes.addressof(geometry),
                      indices.size), (out, data, indices, updates, geometry))]




def gather_elements(out: np.ndarray, data: np.ndarray, indices: np.ndarray, axis: int) -> Call | None:
    """out = take_along_axis(data, indices, axis) (ONNX GatherElements; indices as long as data on
    every other axis; negative ones from the end), any element of 1-8 bytes; an index out of range
    stops the region. None unless all three are dense and the indices int64."""
    if (not all(a.flags.c_contiguous for a in (out, data, indices)) or indices.dtype != np.int64
            or out.dtype != data.dtype or out.shape != indices.shape or indices.size == 0 or data.itemsize > 8
            or any(a != b for k, (a, b) in enumerate(zip(indices.shape, data.shape)) if k != axis)):
        return None
    outer, inner = int(np.prod(data.shape[:axis])), int(np.prod(data.shape[axis + 1:]))
    geometry = (ctypes.c_int64 * 5)(outer, indices.shape[axis], inner, data.shape[axis], data.itemsize)
    return ((GATHER_ELEMENTS, 1, indices.ctypes.data, out.ctypes.data, data.ctypes.data, ctypes.addressof(geometry),
             indices.size), (out, data, indices, geometry))
