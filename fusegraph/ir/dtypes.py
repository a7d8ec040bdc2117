"""Tensor element types: one table mapping fusegraph names, numpy dtypes and ONNX enums."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np
from onnx import TensorProto


class DType(enum.Enum):
    bool = "bool"
    int2 = "int2"
    int4 = "int4"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint2 = "uint2"
    uint4 = "uint4"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    float4_e2m1fn = "float4_e2m1fn"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2 = "float8_e5m2"
    float8_e5m2fnuz = "float8_e5m2fnuz"
    float8_e8m0fnu = "float8_e8m0fnu"  # a power of two (exponent only): MX block scales
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"
    complex64 = "complex64"
    complex128 = "complex128"
    string = "string"

    @property
    def np(self) -> np.dtype:
        return self._np  # type: ignore[attr-defined]  # set on every member below (read everywhere: no lookup)

    @property
    def itemsize(self) -> int:
        return self._itemsize  # type: ignore[attr-defined]

    @property
    def is_float(self) -> bool:
        return self in FLOAT_TYPES

    @property
    def is_int(self) -> bool:
        return self in INT_TYPES

    @property
    def is_signed(self) -> bool:
        return self.is_float or self.name.startswith("int")

    @property
    def onnx(self) -> int:
        return _TO_ONNX[self]

    @staticmethod
    def from_numpy(dt) -> DType:
        dt = np.dtype(dt)
        try:
            return _FROM_NUMPY[dt]
        except KeyError:
            if dt.kind in "USO":
                return DType.string
            raise TypeError(f"no fusegraph dtype for numpy dtype {dt}") from None

    @staticmethod
    def from_onnx(elem_type: int) -> DType:
        try:
            return _FROM_ONNX[elem_type]
        except KeyError:
            name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
            raise TypeError(f"unsupported ONNX tensor element type {name}") from None

    def __str__(self) -> str:
        return self.value


_NUMPY = {
    DType.bool: np.dtype(np.bool_),
    DType.int2: np.dtype(ml_dtypes.int2),
    DType.int4: np.dtype(ml_dtypes.int4),
    DType.int8: np.dtype(np.int8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.uint2: np.dtype(ml_dtypes.uint2),
    DType.uint4: np.dtype(ml_dtypes.uint4),
    DType.uint8: np.dtype(np.uint8),
    DType.uint16: np.dtype(np.uint16),
    DType.uint32: np.dtype(np.uint32),
    DType.uint64: np.dtype(np.uint64),
    DType.float4_e2m1fn: np.dtype(ml_dtypes.float4_e2m1fn),
    DType.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.float8_e4m3fnuz: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    DType.float8_e5m2fnuz: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.float8_e8m0fnu: np.dtype(ml_dtypes.float8_e8m0fnu),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
    DType.complex64: np.dtype(np.complex64),
    DType.complex128: np.dtype(np.complex128),
    DType.string: np.dtype(object),
}
_FROM_NUMPY = {v: k for k, v in _NUMPY.items()}
for _member, _dt in _NUMPY.items():
    _member._np, _member._itemsize = _dt, _dt.itemsize

_TO_ONNX = {
    DType.bool: TensorProto.BOOL,
    DType.int2: TensorProto.INT2,
    DType.int4: TensorProto.INT4,
    DType.int8: TensorProto.INT8,
    DType.int16: TensorProto.INT16,
    DType.int32: TensorProto.INT32,
    DType.int64: TensorProto.INT64,
    DType.uint2: TensorProto.UINT2,
    DType.uint4: TensorProto.UINT4,
    DType.uint8: TensorProto.UINT8,
    DType.uint16: TensorProto.UINT16,
    DType.uint32: TensorProto.UINT32,
    DType.uint64: TensorProto.UINT64,
    DType.float4_e2m1fn: TensorProto.FLOAT4E2M1,
    DType.float8_e4m3fn: TensorProto.FLOAT8E4M3FN,
    DType.float8_e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ,
    DType.float8_e5m2: TensorProto.FLOAT8E5M2,
    DType.float8_e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ,
    DType.float8_e8m0fnu: TensorProto.FLOAT8E8M0,
    DType.float16: TensorProto.FLOAT16,
    DType.bfloat16: TensorProto.BFLOAT16,
    DType.float32: TensorProto.FLOAT,
    DType.float64: TensorProto.DOUBLE,
    DType.complex64: TensorProto.COMPLEX64,
    DType.complex128: TensorProto.COMPLEX128,
    DType.string: TensorProto.STRING,
}
_FROM_ONNX = {v: k for k, v in _TO_ONNX.items()}

FLOAT_TYPES = frozenset(
    {DType.float16, DType.bfloat16, DType.float32, DType.float64, DType.float4_e2m1fn, DType.float8_e4m3fn,
     DType.float8_e4m3fnuz, DType.float8_e5m2, DType.float8_e5m2fnuz, DType.float8_e8m0fnu}
)
INT_TYPES = frozenset(
    {DType.int2, DType.int4, DType.int8, DType.int16, DType.int32, DType.int64,
     DType.uint2, DType.uint4, DType.uint8, DType.uint16, DType.uint32, DType.uint64}
)
