"""ONNX type protos -> fusegraph shapes (for graph inputs, subgraph inputs and value infos)."""

from __future__ import annotations

import onnx

from ..errors import ParseError
from ..ir.dtypes import DType
from ..ir.shape import Dim, OptionalShape, SequenceShape, Shape, ValueShape


def shape_from_type(tp: onnx.TypeProto, name: str = "") -> ValueShape:
    """A tensor, sequence or optional type as a shape; unknown dims become unbounded dynamic dims."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        shape = _tensor_shape(tp.tensor_type, name)
        if shape is None:
            raise ParseError(f"value {name!r}: its rank is unknown")
        return shape
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise ParseError(f"value {name!r}: only sequences of tensors are supported")
        return SequenceShape(_dtype(elem.tensor_type.elem_type, name), _tensor_shape(elem.tensor_type, name))
    if kind == "optional_type":
        inner = shape_from_type(tp.optional_type.elem_type, name)
        if isinstance(inner, OptionalShape):
            raise ParseError(f"value {name!r}: an optional of an optional")
        return OptionalShape(inner)
    raise ParseError(f"value {name!r}: {kind or 'untyped'} values are not supported")


def _dtype(elem_type: int, name: str) -> DType:
    try:
        return DType.from_onnx(elem_type)
    except TypeError as e:
        raise ParseError(f"value {name!r}: {e}") from None


def _tensor_shape(tt: onnx.TypeProto.Tensor, name: str) -> Shape | None:
    """The tensor's shape, or None when its rank is unknown."""
    dtype = _dtype(tt.elem_type, name)
    if not tt.HasField("shape"):
        return None
    dims = [Dim.fixed(d.dim_value) if d.HasField("dim_value") else Dim(0, None) for d in tt.shape.dim]
    return Shape.dynamic(dtype, dims)
