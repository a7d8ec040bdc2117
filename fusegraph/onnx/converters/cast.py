"""Cast and CastLike -> `convert` (BitCast, which keeps bits rather than values, is in misc.py).

ONNX quirks that end here: Cast-1 names its target type as a string; Cast-19 adds `saturate` (float8
results clamp to their finite range, on by default); Cast-24 adds `round_mode` (float8e8m0 results
only). Strings parse to float64 before a saturating float8 conversion, whose clamp needs numbers.
"""

from __future__ import annotations

from onnx import TensorProto

from ...ir.dtypes import DType
from ...ops.pointwise import SATURATING
from ..registry import converter


def _target(ctx, node) -> DType:
    to = node.attr("to")
    try:
        if isinstance(to, str):  # Cast-1: the type's name, e.g. "FLOAT"
            return DType.from_onnx(TensorProto.DataType.Value(to.upper()))
        return DType.from_onnx(to)
    except (TypeError, ValueError) as e:
        raise ctx.error(f"cannot cast to {to!r}: {e}") from None


def _cast(ctx, node, x, to: DType):
    saturate = bool(node.attr("saturate", 1))
    round_mode = node.attr("round_mode", "up")
    if round_mode not in ("up", "down", "nearest"):
        raise ctx.error(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    if to is DType.float8_e8m0fnu and (round_mode != "up" or not saturate):
        raise ctx.error(f"float8e8m0 results support the default round_mode 'up' with saturate=1 only, "
                        f"got round_mode={round_mode!r}, saturate={int(saturate)}")
    if x.shape.dtype == to:
        return x
    if x.shape.dtype is DType.string and saturate and to in SATURATING:
        x = ctx.convert(x, DType.float64)
    return ctx.add("convert", x, to=to, saturate=saturate)


@converter("Cast")
def cast(ctx, node, args):
    return _cast(ctx, node, args[0], _target(ctx, node))


@converter("CastLike", since=15)
def cast_like(ctx, node, args):
    return _cast(ctx, node, args[0], args[1].shape.dtype)

