"""A serialized ModelProto split into its graph and its main graph's initializer bytes, so the
protobuf parse does not copy the weights.

Parsing a model copies every initializer's `raw_data` into the message, and reading `raw_data` back
copies it again: GPT-2's 498 MB took 0.30 s to parse and 0.30 s to read on the 2-core VM, most of a
0.78 s `parse_onnx`. `split_weights` walks the bytes' top levels (ModelProto → graph → initializer)
without decoding them and returns the model with each large initializer's `raw_data` field cut out,
and where each lay in the bytes; the parser makes the initializer's array from there (one copy, into
an aligned array of its own: a view would keep the caller's whole buffer alive and could be
misaligned for native kernels).

Only what is unambiguous is cut: one graph field, an initializer with one `raw_data` and one
`data_type` of a plain type (one element a fixed number of bytes, read by `np.frombuffer` as
`numpy_helper.to_array` reads it), no segment and no external data. Anything the walk does not
understand (a truncated length, an unknown wire type) returns None and the caller parses the bytes
whole, so protobuf's own errors stand.
"""

from __future__ import annotations

import sys

from onnx import TensorProto

# smaller initializers stay in the message, unwalked: their copies cost little, and walking 20,000
# initializers of 128 bytes added ~8 % to such a model's parse on the VM
SPLIT_MIN_BYTES = 1024

_GRAPH = 7          # ModelProto.graph
_INITIALIZER = 5    # GraphProto.initializer
_DATA_TYPE, _SEGMENT, _RAW, _EXTERNAL, _LOCATION = 2, 3, 9, 13, 14  # TensorProto fields
_LEN = 2            # the length-delimited wire type
PLAIN_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16,
    TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE,
    TensorProto.UINT32, TensorProto.UINT64, TensorProto.BFLOAT16,
})


class _Malformed(Exception):
    """The walk met bytes it does not take apart (protobuf's parse then says what is wrong)."""


def _varint(data: bytes, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end or shift > 63:
            raise _Malformed
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(data: bytes, start: int, end: int):
    """(field number, wire type, field start, end of its key, value start, value end, varint value)
    of each field of the message in data[start:end] (a length-delimited value starts after its
    length)."""
    i = start
    while i < end:
        key, j = _varint(data, i, end)
        key_end = j
        field, wire = key >> 3, key & 7
        value = 0
        if field == 0:
            raise _Malformed
        if wire == 0:
            value, k = _varint(data, j, end)
        elif wire == 1:
            k = j + 8
        elif wire == 5:
            k = j + 4
        elif wire == _LEN:
            n, j = _varint(data, j, end)
            k = j + n
        else:  # groups: not in ONNX
            raise _Malformed
        if k > end:
            raise _Malformed
        yield field, wire, i, key_end, j, k, value
        i = k


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cut_raw(data: bytes, start: int, end: int) -> tuple[bytes, tuple[int, int]] | None:
    """The TensorProto in data[start:end] without its raw_data field, and where that data lay; None
    unless it is a plain tensor with one large raw_data field."""
    raw, types = [], []
    for field, wire, at, _, vstart, vend, value in _fields(data, start, end):
        if field == _RAW and wire == _LEN:
            raw.append((at, vstart, vend))
        elif field == _DATA_TYPE and wire == 0:
            types.append(value)
        elif field in (_SEGMENT, _EXTERNAL, _LOCATION, _RAW, _DATA_TYPE):  # (the last two: another wire type)
            return None
    if len(raw) != 1 or len(types) != 1 or types[0] not in PLAIN_TYPES:
        return None
    at, vstart, vend = raw[0]
    if vend - vstart < SPLIT_MIN_BYTES:
        return None
    return data[start:at] + data[vend:end], (vstart, vend)


def split_weights(data: bytes) -> tuple[bytes, dict[int, tuple[int, int]]] | None:
    """`data` (a serialized ModelProto) with its main graph's large plain initializers' raw_data cut
    out, and {initializer index: (start, end) of its raw data in `data`}; None when nothing was cut
    or the bytes are not taken apart here (the caller parses them whole)."""
    if sys.byteorder != "little":  # raw_data is little-endian: numpy_helper swaps it there
        return None
    try:
        graphs = [f for f in _fields(data, 0, len(data)) if f[0] == _GRAPH]
        if len(graphs) != 1 or graphs[0][1] != _LEN:
            return None  # several graph fields merge in protobuf's parse
        _, _, _, g_key_end, g_start, g_end, _ = graphs[0]
        pieces: list[bytes] = []
        spans: dict[int, tuple[int, int]] = {}
        index, kept = 0, g_start  # initializers seen; the graph's bytes not yet in `pieces`
        for field, wire, _, key_end, vstart, vend, _ in _fields(data, g_start, g_end):
            if field != _INITIALIZER or wire != _LEN:
                continue
            cut = _cut_raw(data, vstart, vend) if vend - vstart >= SPLIT_MIN_BYTES else None
            if cut is not None:
                tensor, spans[index] = cut
                pieces += [data[kept:key_end], _encode_varint(len(tensor)), tensor]
                kept = vend
            index += 1
    except _Malformed:
        return None
    if not spans:
        return None
    pieces.append(data[kept:g_end])
    graph = b"".join(pieces)
    return b"".join([data[:g_key_end], _encode_varint(len(graph)), graph, data[g_end:]]), spans

