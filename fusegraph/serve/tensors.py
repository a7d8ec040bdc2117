"""Tensors on the wire: the protocol's datatypes, and their decoding into numpy arrays and back.

One table holds every fact about a datatype: its KServe v2 name, its model-config enum name, its numpy
dtype, and the typed-contents field of the gRPC protocol (None: raw bytes only, as for FP16 and BF16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import InvalidRequestError


@dataclass(frozen=True)
class Datatype:
    name: str            # "FP32": the protocol's name
    numpy: np.dtype
    contents: str | None  # InferTensorContents field, None where only raw bytes carry the type

    @property
    def config_name(self) -> str:  # "TYPE_FP32": model_config.proto's DataType enum
        return f"TYPE_{self.name}"


_TABLE = [
    ("BOOL", np.bool_, "bool_contents"), ("UINT8", np.uint8, "uint_contents"),
    ("UINT16", np.uint16, "uint_contents"), ("UINT32", np.uint32, "uint_contents"),
    ("UINT64", np.uint64, "uint64_contents"), ("INT8", np.int8, "int_contents"),
    ("INT16", np.int16, "int_contents"), ("INT32", np.int32, "int_contents"),
    ("INT64", np.int64, "int64_contents"), ("FP16", np.float16, None), ("BF16", ml_dtypes.bfloat16, None),
    ("FP32", np.float32, "fp32_contents"), ("FP64", np.float64, "fp64_contents"),
]
DATATYPES: dict[str, Datatype] = {n: Datatype(n, np.dtype(t), c) for n, t, c in _TABLE}
_BY_NUMPY = {d.numpy: d for d in DATATYPES.values()}
_BY_CONFIG = {d.config_name: d for d in DATATYPES.values()}


def datatype(name: str) -> Datatype:
    """The protocol datatype `name` ("FP32"); an InvalidRequestError for names the server does not carry."""
    try:
        return DATATYPES[name]
    except KeyError:
        raise InvalidRequestError(f"unsupported datatype {name!r}; supported: {', '.join(DATATYPES)}") from None


def from_config(enum_name: str) -> Datatype | None:
    """The datatype of a model-config enum name ("TYPE_FP32"); None for those not served (STRING)."""
    return _BY_CONFIG.get(enum_name)


def from_numpy(dtype: np.dtype | None) -> Datatype | None:
    return None if dtype is None else _BY_NUMPY.get(np.dtype(dtype))


def element_count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def from_raw(name: str, dt: Datatype, shape: Sequence[int], raw: bytes | memoryview) -> np.ndarray:
    """The array that raw little-endian bytes hold; the byte count must be exactly the shape's."""
    expected = element_count(shape) * dt.numpy.itemsize
    if len(raw) != expected:
        raise InvalidRequestError(f"input {name!r}: {len(raw)} bytes of data, but {dt.name} {list(shape)} "
                                  f"needs {expected}")
    return np.frombuffer(raw, dtype=dt.numpy).reshape(shape)


def from_values(name: str, dt: Datatype, shape: Sequence[int], values: Sequence) -> np.ndarray:
    """The array of a flat (or nested, for JSON) list of values; the element count must be the shape's."""
    try:
        arr = np.asarray(values, dtype=dt.numpy)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidRequestError(f"input {name!r}: data is not {dt.name}: {e}") from None
    if arr.size != element_count(shape):
        raise InvalidRequestError(f"input {name!r}: {arr.size} values, but shape {list(shape)} needs "
                                  f"{element_count(shape)}")
    return arr.reshape(shape)


def to_raw(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
