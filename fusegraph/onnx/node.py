"""A read-only view of an ONNX node with decoded attributes."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, external_data_helper, numpy_helper

from ..errors import ModelLoadError, ParseError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor

_REQUIRED = object()


def tensor_to_array(t) -> np.ndarray:
    if external_data_helper.uses_external_data(t):
        # loading.py reads every external tensor it may; numpy_helper would read this one from the
        # working directory
        raise ModelLoadError(f"tensor {t.name!r} keeps its data in an external file, which is not read here "
                             f"(external data is read for initializers and node attributes only)")
    arr = numpy_helper.to_array(t)
    if arr.dtype.kind in "SU":
        arr = arr.astype(object)
    return arr


def sparse_to_dense(sparse) -> np.ndarray:
    """A SparseTensorProto as a dense array; its dims are checked before the zeros are made."""
    vals = tensor_to_array(sparse.values)
    idx = tensor_to_array(sparse.indices)
    check_tensor(list(sparse.dims), DType.from_numpy(vals.dtype), f"sparse tensor {sparse.values.name!r}")
    dense = np.zeros(tuple(sparse.dims), dtype=vals.dtype)
    if idx.ndim == 1:
        dense.reshape(-1)[idx] = vals
    else:
        dense[tuple(idx.T)] = vals
    return dense


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


class Node:
    def __init__(self, proto: NodeProto, opset: int):
        self.proto = proto
        self.op_type = proto.op_type
        self.domain = proto.domain if proto.domain != "ai.onnx" else ""
        self.name = proto.name or (proto.output[0] if proto.output else proto.op_type)
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
