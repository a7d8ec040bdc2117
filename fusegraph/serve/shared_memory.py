"""Triton's system shared-memory extension: regions a client registers by POSIX shared-memory key, and
tensors read from and written into them in place of the request's and the response's bytes.

A region is (name, key, offset, byte_size): bytes offset..offset+byte_size of the object `key` names
(`/dev/shm/KEY`, as `tritonclient.utils.shared_memory` creates it). Registrations are the server's, seen by
both front ends. An input in a region is a numpy view of its mapping (no copy; the client must leave the
bytes alone until it has the answer, as with Triton). An output asked for in a region is written there
and answered with its parameters only. Unregistering drops the server's mapping; arrays of requests still
running keep it alive until they end. CUDA shared memory is answered as not supported.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InvalidRequestError, NotSupportedError, RegionExistsError, RegionNotFoundError
from .tensors import Datatype, from_raw

SHM_ROOT = Path("/dev/shm")
CUDA_UNSUPPORTED = "CUDA shared memory is not supported by this server: use system shared memory"


@dataclass(frozen=True)
class ShmRef:
    """Where a request puts one tensor: `byte_size` bytes from `offset` within region `region`."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(frozen=True)
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def view(self, tensor: str, ref: ShmRef) -> memoryview:
        if ref.offset < 0 or ref.byte_size < 0 or ref.offset + ref.byte_size > self.byte_size:
            raise InvalidRequestError(f"tensor {tensor!r}: bytes {ref.offset}..{ref.offset + ref.byte_size} run "
                                      f"past shared memory region {self.name!r} of {self.byte_size} bytes")
        start = self.offset + ref.offset
        return memoryview(self.mapping)[start:start + ref.byte_size]


def _map(name: str, key: str, offset: int, byte_size: int) -> mmap.mmap:
    stem = key[1:] if key.startswith("/") else key
    if not stem or "/" in stem or stem in (".", ".."):
        raise InvalidRequestError(f"shared memory region {name!r}: key {key!r} is not a POSIX shared memory name")
    if offset < 0 or byte_size <= 0:
        raise InvalidRequestError(f"shared memory region {name!r}: offset {offset} and byte_size {byte_size} "
                                  f"must be >= 0 and > 0")
    try:
        fd = os.open(SHM_ROOT / stem, os.O_RDWR)
    except OSError as e:
        raise InvalidRequestError(f"shared memory region {name!r}: cannot open key {key!r}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if offset + byte_size > size:
            raise InvalidRequestError(f"shared memory region {name!r}: offset {offset} + byte_size {byte_size} "
                                      f"exceeds the {size} bytes of key {key!r}")
        return mmap.mmap(fd, size)  # the mapping keeps its own reference to the object
    finally:
        os.close(fd)


class SharedMemoryRegistry:
    """The system shared-memory regions the clients have registered, by name."""

    def __init__(self):
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidRequestError("a shared memory region needs a name")
        with self._lock:
            if name in self._regions:
                raise RegionExistsError(f"shared memory region {name!r} is already registered")
            self._regions[name] = Region(name, key, offset, byte_size, _map(name, key, offset, byte_size))

    def unregister(self, name: str = "") -> None:
        """Drop region `name` (all regions for ""); a name not registered is no error, as with Triton."""
        with self._lock:
            if name:
                self._regions.pop(name, None)
            else:
                self._regions.clear()

    def status(self, name: str = "") -> list[dict]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            return [self._get(name).status()]

    def _get(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFoundError(f"no shared memory region {name!r} is registered")
        return region

    def region(self, name: str) -> Region:
        with self._lock:
            return self._get(name)

    def read(self, tensor: str, dt: Datatype, shape, ref: ShmRef) -> np.ndarray:
        """Input `tensor` as a view of its bytes in shared memory (their count must be the shape's)."""
        return from_raw(tensor, dt, shape, self.region(ref.region).view(tensor, ref))

    def check(self, tensor: str, ref: ShmRef) -> None:
        """Before the request is queued: the region of output `tensor` exists and holds the bytes named."""
        self.region(ref.region).view(tensor, ref)

    def write(self, tensor: str, ref: ShmRef, arr: np.ndarray) -> None:
        """Output `tensor` into its bytes in shared memory; they must hold it."""
        if arr.nbytes > ref.byte_size:
            raise InvalidRequestError(f"output {tensor!r}: {arr.nbytes} bytes do not fit the {ref.byte_size} "
                                      f"bytes given in shared memory region {ref.region!r}")
        view = self.region(ref.region).view(tensor, ShmRef(ref.region, arr.nbytes, ref.offset))
        np.frombuffer(view, dtype=arr.dtype.newbyteorder("<"), count=arr.size).reshape(arr.shape)[...] = arr


def cuda_unsupported() -> NotSupportedError:
    return NotSupportedError(CUDA_UNSUPPORTED)
