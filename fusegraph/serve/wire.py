"""Messages between the server and its worker processes, over a stream socket: never pickle.

A frame is an 8-byte little-endian length of the JSON header, the header, then the raw bytes of the
tensors the header lists (`"tensors": [[name, datatype, shape], ...]`, protocol datatype names from
`tensors.DATATYPES`), back to back. Tensors are written from their own buffers (no join of a batch's
bytes) and read into one buffer that the arrays view. A tensor that lies in the worker's shared arena
(`arena.py`) is listed with its offset, `[name, datatype, shape, offset]`, and carries no bytes; the
header's `"arena"` is then the arena's size.
"""

from __future__ import annotations

import json
import socket
import struct

import numpy as np

from .arena import Arena
from .tensors import DATATYPES, element_count, from_numpy

_LEN = struct.Struct("<Q")
MAX_HEADER_BYTES = 16 << 20  # a header is names, shapes and a config's text: anything larger is corrupt


class PeerClosed(ConnectionError):
    """The other end closed the socket (the worker process exited, or the server went away)."""


def send(sock: socket.socket, header: dict, tensors: dict[str, np.ndarray] | None = None,
         arena: Arena | None = None) -> None:
    # np.ascontiguousarray would make a 0-d array 1-d
    arrays = [(k, np.asarray(v, order="C")) for k, v in (tensors or {}).items()]
    described, blobs = [], []
    for name, arr in arrays:
        dt = from_numpy(arr.dtype)
        if dt is None:
            raise TypeError(f"tensor {name!r} has dtype {arr.dtype}, which the protocol does not carry")
        offset = arena.offset_of(arr) if arena is not None else None
        if offset is not None:
            described.append([name, dt.name, list(arr.shape), offset])
            continue
        described.append([name, dt.name, list(arr.shape)])
        if arr.nbytes:  # bytes of any dtype (bfloat16 and bool too) as a flat uint8 view: no copy
            blobs.append(arr.astype(arr.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8))
    if any(len(d) == 4 for d in described):
        header = {**header, "arena": arena.size}
    head = json.dumps({**header, "tensors": described}).encode()
    _send_all(sock, [_LEN.pack(len(head)) + head, *blobs])


def _send_all(sock: socket.socket, buffers: list) -> None:
    """Write `buffers` back to back with as few syscalls as the socket takes (one, for a frame that fits
    its buffer): a frame sent in pieces wakes the reader once per piece, a process switch each on a
    busy machine."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]


def _read_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerClosed(f"connection closed after {got} of {n} bytes")
        got += k
    return buf


def recv(sock: socket.socket, arena: Arena | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    (size,) = _LEN.unpack(_read_exact(sock, _LEN.size))
    if size > MAX_HEADER_BYTES:
        raise ConnectionError(f"a frame header of {size} bytes: the stream is corrupt")
    header = json.loads(_read_exact(sock, size))
    described = header.pop("tensors")
    tensors = {}
    if "arena" in header:
        if arena is None:
            raise ConnectionError("a frame names arena tensors, but this end has no arena")
        arena.map(header.pop("arena"))
        for name, dt, shape, at in (d for d in described if len(d) == 4):
            tensors[name] = arena.view(DATATYPES[dt].numpy, tuple(shape), at)
    layout = [(name, DATATYPES[dt].numpy, tuple(shape)) for name, dt, shape, *at in described if not at]
    total = sum(element_count(shape) * dtype.itemsize for _, dtype, shape in layout)
    data = _read_exact(sock, total) if total else bytearray()
    offset = 0
    for name, dtype, shape in layout:
        nbytes = element_count(shape) * dtype.itemsize
        tensors[name] = np.frombuffer(data, dtype=dtype, count=element_count(shape), offset=offset).reshape(shape)
        offset += nbytes
    return header, tensors
