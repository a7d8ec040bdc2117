"""The shared memory a worker process reads its batches' inputs from: a memfd the server and the worker
both map. The server gathers a batch's requests straight into it (the copy batching makes anyway), and
the frame over the socket names the tensors' offsets instead of carrying their bytes: a ResNet-50 batch
of 16 is 9.6 MB that the socket copied twice (into the kernel, out of it), the second time in the
worker, before the device saw a byte.

One batch at a time uses it: the server writes the next batch only after the worker answered the last
(`WorkerProcess.execute` holds its lock across the round trip).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

_ALIGN = 64  # each tensor starts on a cache line


class Arena:
    def __init__(self, fd: int):
        self.fd = fd
        self.size = 0
        self._bytes: np.ndarray | None = None  # the mapping as uint8 (its data pointer is the base)

    @classmethod
    def create(cls) -> Arena:
        return cls(os.memfd_create("fusegraph-serve-arena", 0))

    def map(self, size: int) -> None:
        """Make it `size` bytes (the server sizes it; the worker maps what a frame says it is)."""
        if size == self.size:
            return
        if os.fstat(self.fd).st_size < size:
            os.ftruncate(self.fd, size)
        self._bytes = np.frombuffer(mmap.mmap(self.fd, size), np.uint8) if size else None
        self.size = size

    def offset_of(self, arr: np.ndarray) -> int | None:
        """Where `arr`'s bytes lie in the arena, if they do (and are contiguous), else None."""
        if self._bytes is None or not arr.flags.c_contiguous:
            return None
        offset = arr.ctypes.data - self._bytes.ctypes.data
        return offset if 0 <= offset and offset + arr.nbytes <= self.size else None

    def view(self, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        if self._bytes is None or offset < 0 or offset + count * dtype.itemsize > self.size:
            raise ConnectionError(f"a tensor at offset {offset} of {count * dtype.itemsize} bytes lies outside "
                                  f"the {self.size}-byte arena: the stream is corrupt")
        return self._bytes[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)

    def gather(self, parts: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
        """Each input's parts, concatenated along the batch dim into the arena, back to back (those that
        do not fit are concatenated in memory of their own, and travel over the socket)."""
        out, offset = {}, 0
        for name, arrays in parts.items():
            first = arrays[0]
            shape = (sum(a.shape[0] for a in arrays), *first.shape[1:]) if first.ndim else first.shape
            nbytes = int(np.prod(shape, dtype=np.int64)) * first.dtype.itemsize
            if offset + nbytes > self.size:
                out[name] = np.concatenate(arrays) if len(arrays) > 1 else first
                continue
            view = self.view(first.dtype, shape, offset)
            if len(arrays) == 1:
                np.copyto(view, first)
            else:
                np.concatenate(arrays, out=view)
            out[name] = view
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return out

    def close(self) -> None:
        self._bytes = None  # the mapping goes with the last view of it
        os.close(self.fd)
