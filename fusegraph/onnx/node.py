"""A read-only view of an ONNX node with decoded attributes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import (
    AttributeProto,
    NodeProto,
    SparseTensorProto,
    TensorProto,
    external_data_helper,
    helper,
    numpy_helper,
)

from ..errors import ModelLoadError, ParseError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor

_REQUIRED = object()


_ELEM_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}


def tensor_to_array(t: TensorProto, raw: memoryview | None = None) -> np.ndarray:
    """A tensor's value; a ParseError naming it when its type, dims or data are not a tensor. `raw`:
    its raw data, where read_model left it out of the message (a plain type: wire.py)."""
    what = f"tensor {t.name!r}" if t.name else "a tensor"
    if external_data_helper.uses_external_data(t):
        # loading.py reads every external tensor it may; numpy_helper would read this one from the
        # working directory
        raise ModelLoadError(f"{what} keeps its data in an external file, which is not read here "
                             f"(external data is read for initializers and node attributes only)")
    if t.data_type not in _ELEM_TYPES:
        raise ParseError(f"{what} has data type {t.data_type}, which ONNX does not define")
    if any(d < 0 for d in t.dims):
        raise ParseError(f"{what} has dims {list(t.dims)}: a stored tensor's dims are >= 0")
    if raw is not None:
        return _plain_array(t, raw, what)
    try:
        arr = numpy_helper.to_array(t)
    except (ValueError, TypeError, KeyError) as e:  # data length disagreeing with dims, odd encodings
        raise ParseError(f"{what} (dims {list(t.dims)}, {TensorProto.DataType.Name(t.data_type)}) cannot be "
                         f"read: {e}") from None
    if arr.dtype.kind in "SU":
        arr = arr.astype(object)
    return arr


def _plain_array(t: TensorProto, raw: memoryview, what: str) -> np.ndarray:
    """numpy_helper.to_array's value of a plain-typed tensor whose raw data is `raw`: a read-only view
    of a copy of it in bytes of its own, as numpy_helper's of the `raw_data` it reads (aligned, not
    keeping the model's bytes alive; bytes, not a numpy copy: numpy asks for huge pages, whose
    faults took up to 4x as long on the 2-core VM)."""
    dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
    size = math.prod(t.dims) * dtype.itemsize
    if len(raw) != size:
        raise ParseError(f"{what} (dims {list(t.dims)}, {TensorProto.DataType.Name(t.data_type)}) cannot be "
                         f"read: its raw data holds {len(raw)} bytes, its dims {size}")
    return np.frombuffer(bytes(raw), dtype).reshape(t.dims)


def sparse_to_dense(sparse: SparseTensorProto) -> np.ndarray:
    """A sparse tensor (COO indices, flat or per dimension) as a dense array; bad indices are a
    ParseError naming it."""
    from ..ops.sparse import densify

    vals, flat, dims = sparse_coo(sparse)
    return densify(vals, flat, dims)


def sparse_coo(sparse: SparseTensorProto) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """A sparse tensor's values [NNZ], their flat (row-major) int64 indices and its dims, checked;
    bad indices are a ParseError naming it."""
    vals, idx = tensor_to_array(sparse.values), tensor_to_array(sparse.indices)
    dims = tuple(sparse.dims)
    what = f"sparse tensor {sparse.values.name!r}"
    if any(d < 0 for d in dims):
        raise ParseError(f"{what} has dims {list(dims)}: dims are >= 0")
    if idx.dtype.kind not in "iu":
        raise ParseError(f"{what}: its indices are {idx.dtype}, not integers")
    n = vals.reshape(-1).size
    flat = idx.ndim == 1
    if vals.ndim != 1 or (idx.shape != (n,) if flat else idx.shape != (n, len(dims))):
        raise ParseError(f"{what}: {n} values, indices of shape {list(idx.shape)}, dims {list(dims)}: they "
                         "do not match (indices are [NNZ] flat or [NNZ, rank])")
    bound = np.asarray([int(np.prod(dims))]) if flat else np.asarray(dims)
    if idx.size and (idx.min() < 0 or (idx.reshape(n, -1) >= bound).any()):
        raise ParseError(f"{what}: an index is outside its dims {list(dims)}")
    check_tensor(list(dims), DType.from_numpy(vals.dtype), what)  # its size, before the zeros are made
    if not flat:
        idx = np.ravel_multi_index(tuple(idx.T), dims) if dims else np.zeros(n, np.int64)
    return vals, np.asarray(idx, np.int64).reshape(n), dims


def decode_attribute(a: AttributeProto) -> Any:
    T = AttributeProto
    if a.type == T.FLOAT:
        return float(a.f)
    if a.type == T.INT:
        return int(a.i)
    if a.type == T.STRING:
        return a.s.decode("utf-8", errors="replace")
    if a.type == T.TENSOR:
        return tensor_to_array(a.t)
    if a.type == T.GRAPH:
        return a.g
    if a.type == T.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == T.INTS:
        return [int(x) for x in a.ints]
    if a.type == T.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if a.type == T.TENSORS:
        return [tensor_to_array(t) for t in a.tensors]
    if a.type == T.GRAPHS:
        return list(a.graphs)
    if a.type == T.SPARSE_TENSOR:
        return sparse_to_dense(a.sparse_tensor)
    if a.type == T.TYPE_PROTO:
        return a.tp
    if a.type == T.TYPE_PROTOS:
        return list(a.type_protos)
    raise ParseError(f"attribute {a.name!r}: unsupported attribute type {a.type}")


def check_text(proto, fields: tuple[str, ...], what: str) -> None:
    """ONNX's strings are proto2 `string`s, which protobuf does not validate: one that is not UTF-8
    comes back as bytes. Refuse it here, by name, rather than where it is first used as text."""
    for f in fields:
        values = getattr(proto, f)
        for v in (values,) if isinstance(values, (str, bytes)) else values:
            if not isinstance(v, str):
                raise ParseError(f"{what}: its {f} {v!r} is not valid UTF-8 text")


class Node:
    def __init__(self, proto: NodeProto, opset: int):
        check_text(proto, ("op_type", "domain", "name", "input", "output"), f"node {proto.name!r}"
                   if isinstance(proto.name, str) else "a node")
        self.proto = proto
        self.op_type = proto.op_type
        self.domain = proto.domain if proto.domain != "ai.onnx" else ""
        self.name = proto.name or next((o for o in proto.output if o), proto.op_type)
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.opset = opset
        self.attrs = {a.name: a for a in proto.attribute}

    def has(self, name: str) -> bool:
        return name in self.attrs

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        a = self.attrs.get(name)
        if a is None:
            if default is _REQUIRED:
                raise ParseError(f"node {self.name!r} ({self.op_type}): missing required attribute {name!r}")
            return default
        if a.ref_attr_name:
            raise ParseError(f"node {self.name!r}: attribute references (functions) are not supported")
        return decode_attribute(a)

    @property
    def n_outputs(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return f"{self.op_type} node {self.name!r}"
