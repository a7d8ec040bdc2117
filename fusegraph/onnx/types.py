"""ONNX type protos -> fusegraph shapes (for subgraph inputs and value infos)."""

from __future__ import annotations

import onnx

from ..errors import ParseError
from ..ir.dtypes import DType
from ..ir.shape import Dim, Shape


def shape_from_type(tp: onnx.TypeProto, name: str = "") -> Shape:
    """A tensor type as a Shape; unknown dims become unbounded dynamic dims."""
    if not tp.HasField("tensor_type"):
        raise ParseError(f"value {name!r}: only tensor types are supported here")
    tt = tp.tensor_type
    try:
        dtype = DType.from_onnx(tt.elem_type)
    except TypeError as e:
        raise ParseError(f"value {name!r}: {e}") from None
    if not tt.HasField("shape"):
        raise ParseError(f"value {name!r}: its rank is unknown")
    dims = [Dim.fixed(d.dim_value) if d.HasField("dim_value") else Dim(0, None) for d in tt.shape.dim]
    return Shape.dynamic(dtype, dims)
