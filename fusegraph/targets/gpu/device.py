"""The gpu target's one door to torch and triton: imported here, lazily, with a typed error when absent,
and the table between fusegraph dtypes and torch / triton dtypes."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from ...errors import TargetError
from ...ir.dtypes import DType


@functools.cache
def torch() -> Any:
    """The torch module; TargetError (naming the extra to install) when it is missing."""
    try:
        import torch as _torch
    except ModuleNotFoundError:
        raise TargetError("target 'gpu' needs torch and triton: pip install 'fusegraph[gpu]'") from None
    return _torch


@functools.cache
def triton() -> Any:
    try:
        import triton as _triton
    except ModuleNotFoundError:
        raise TargetError("target 'gpu' needs triton for its generated kernels: pip install 'fusegraph[gpu]'") from None
    from .triton_key import use_quick_key

    use_quick_key(_triton)  # before any compile or cache lookup of this process keys on it
    return _triton


def resolve_device(name: str | None) -> Any:
    """The torch device to compile for: `name` if given, else the current CUDA device. No silent CPU:
    a missing GPU is a TargetError (tests may ask for 'cpu' explicitly, with Triton's interpreter)."""
    t = torch()
    if name is None:
        if not t.cuda.is_available():
            raise TargetError("target 'gpu' found no CUDA device (torch.cuda.is_available() is False)")
        return t.device("cuda", t.cuda.current_device())
    return t.device(name)


# fusegraph dtype -> torch dtype name (None: torch has no such tensor type)
_TORCH_NAMES = {
    DType.bool: "bool", DType.int8: "int8", DType.int16: "int16", DType.int32: "int32", DType.int64: "int64",
    DType.uint8: "uint8", DType.uint16: "uint16", DType.uint32: "uint32", DType.uint64: "uint64",
    DType.float16: "float16", DType.bfloat16: "bfloat16", DType.float32: "float32", DType.float64: "float64",
    DType.float8_e4m3fn: "float8_e4m3fn", DType.float8_e4m3fnuz: "float8_e4m3fnuz",
    DType.float8_e5m2: "float8_e5m2", DType.float8_e5m2fnuz: "float8_e5m2fnuz",
    DType.complex64: "complex64", DType.complex128: "complex128",
}

# dtypes the generated Triton kernels compute with (others go through torch, or are a CompileError)
TRITON_TYPES = {
    DType.bool: "tl.int1", DType.int8: "tl.int8", DType.int16: "tl.int16", DType.int32: "tl.int32",
    DType.int64: "tl.int64", DType.uint8: "tl.uint8", DType.uint16: "tl.uint16", DType.uint32: "tl.uint32",
    DType.uint64: "tl.uint64", DType.float16: "tl.float16", DType.bfloat16: "tl.bfloat16",
    DType.float32: "tl.float32", DType.float64: "tl.float64",
}


def has_torch_dtype(dt: DType) -> bool:
    return dt in _TORCH_NAMES


def torch_dtype(dt: DType) -> Any:
    name = _TORCH_NAMES.get(dt)
    if name is None:
        raise TargetError(f"target 'gpu' has no device tensor type for {dt}")
    return getattr(torch(), name)


# numpy dtypes torch.from_numpy cannot take are moved as raw bits of the same width
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def host_tensor(arr: np.ndarray, dt: DType) -> Any:
    """A CPU tensor of `dt` viewing `arr`'s memory, read-only arrays included (a loaded program's
    memory-mapped weights: copying them first cost BERT-base's load 50 ms). Only ever read from it.
    ml_dtypes' bf16 and fp8 travel as raw bits."""
    t = torch()
    arr = np.ascontiguousarray(arr).reshape(np.shape(arr))  # ascontiguousarray makes 0-d arrays 1-d
    if arr.dtype.kind == "V" or dt in (DType.bfloat16, DType.uint16, DType.uint32, DType.uint64) \
            or dt.name.startswith("float8"):
        arr = arr.view(getattr(np, _BITS[arr.dtype.itemsize]))
    if arr.flags.writeable:  # (a run's numpy inputs: no warning filters touched on that path)
        view = t.from_numpy(arr)
    else:
        with warnings.catch_warnings():  # torch warns that it cannot protect read-only memory
            warnings.simplefilter("ignore", UserWarning)
            view = t.from_numpy(arr)
    return view.view(torch_dtype(dt)) if view.dtype != torch_dtype(dt) else view


def to_device(arr: np.ndarray, dt: DType, device: Any) -> Any:
    """A host array as a device tensor of `dt`, never sharing memory with a read-only array."""
    host = host_tensor(arr, dt)
    moved = host.to(device)
    if moved.data_ptr() == host.data_ptr() and not np.asarray(arr).flags.writeable:
        moved = moved.clone()  # a "cpu" device: the caller may write into what it gets
    return moved


def to_host(tensor: Any, dt: DType) -> np.ndarray:
    """A (host or device) tensor as a numpy array of `dt`, C-contiguous, owning its memory."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.contiguous()
    if dt is DType.bfloat16 or dt.name.startswith("float8") or dt in (DType.uint16, DType.uint32, DType.uint64):
        bits = getattr(torch(), _BITS[tensor.element_size()])
        return tensor.view(bits).numpy().view(dt.np).copy()
    return tensor.numpy().copy()


# -- streams on the run path ---------------------------------------------------------------------------
# torch.cuda.current_stream(device) and torch.cuda.stream(s) resolve the device anew on every call, in
# Python under the GIL, which bounds several streams' throughput from threads (cProfile of ResNet-50 fp16
# b1's run_async on the H200: 216 us a call with them, 89 us with these). The run path knows its device:
# these go straight to torch's stream registry (with torch's public calls as the fallback).
def current_stream(device: Any) -> Any:
    """The current CUDA stream of `device` (a cuda torch.device)."""
    t = torch()
    return _stream_at(t, device.index if device.index is not None else t.cuda.current_device())


def _stream_at(t: Any, index: int) -> Any:
    get = getattr(t._C, "_cuda_getCurrentStream", None)
    if get is None:
        return t.cuda.current_stream(index)
    sid, index, kind = get(index)
    return t.cuda.Stream(stream_id=sid, device_index=index, device_type=kind)


def _make_current(t: Any, stream: Any) -> None:
    """`stream` current on its device, and its device the current device (as torch.cuda.set_stream)."""
    put = getattr(t._C, "_cuda_setStream", None)
    if put is None:
        t.cuda.set_stream(stream)
    else:
        put(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


class StreamScope:
    """`with StreamScope(stream, device) as s:` runs on `stream` (None: on the current stream, left
    as it is) and gives the stream the run goes to; None off CUDA (Triton's interpreter). On exit the
    streams and the current device are as they were, as with torch.cuda.stream."""

    __slots__ = ("_stream", "_device", "_prev")

    def __init__(self, stream: Any, device: Any):
        self._stream, self._device, self._prev = stream, device, ()

    def __enter__(self) -> Any:
        if self._device.type != "cuda":
            return None
        if self._stream is None:
            return current_stream(self._device)
        t = torch()
        here, there = t.cuda.current_device(), self._stream.device_index
        # restored in this order: the stream's device's stream, then the current device's (made current again)
        self._prev = (_stream_at(t, there),) + ((_stream_at(t, here),) if here != there else ())
        _make_current(t, self._stream)
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        if self._prev:
            t = torch()
            for s in self._prev:
                _make_current(t, s)
            self._prev = ()
