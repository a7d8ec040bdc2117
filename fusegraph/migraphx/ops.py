"""`migraphx.op`: an operation by MIGraphX name and attributes, made a fusegraph op once its inputs
are known (`module.add_instruction`).

fusegraph's ops mostly carry MIGraphX's names and attributes already (its IR follows MIGraphX's);
the tables below hold where they differ. Attribute lists become tuples, MIGraphX type values become
DTypes, and a window padding given once per spatial axis (MIGraphX's symmetric form) is written out
as begins and ends, fusegraph's form.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from ..errors import NotSupportedError
from ..ir.op import Op, make_op, registered_ops
from ..ir.shape import Shape
from .shape import to_dtype

# MIGraphX op name -> fusegraph op name, where they differ
OP_NAMES = {"multibroadcast": "broadcast", "quant_convolution": "convolution"}
# (fusegraph op, MIGraphX attribute) -> fusegraph attribute, where they differ
ATTR_NAMES = {("transpose", "permutation"): "perm", ("convert", "target_type"): "to"}
# attributes that name an element type
_TYPE_ATTRS = {("convert", "to")}
# ops whose `padding` may be given once per spatial axis
_WINDOW_OPS = {"convolution", "pooling", "deconvolution"}


class op:  # noqa: N801  (MIGraphX's name)
    """An operation: op("convolution", padding=[1, 1], stride=[1, 1])."""

    class pooling_mode(str, enum.Enum):  # noqa: N801
        average = "average"
        max = "max"
        lpnorm = "lpnorm"

    class rnn_direction(str, enum.Enum):  # noqa: N801
        forward = "forward"
        reverse = "reverse"
        bidirectional = "bidirectional"

    def __init__(self, name: str, **attrs: Any):
        fg = OP_NAMES.get(name, name)
        if fg not in registered_ops() or fg.startswith("@"):
            raise NotSupportedError(f"migraphx.op({name!r}): fusegraph has no such op; its ops are "
                                    "fusegraph.ir.op.registered_ops()")
        self._name, self.fusegraph_name = name, fg
        self.attrs = {ATTR_NAMES.get((fg, k), k): v for k, v in attrs.items()}

    def name(self) -> str:
        return self._name

    def build(self, inputs: Sequence[Any]) -> Op:
        """The fusegraph op for these input shapes."""
        attrs = {k: _value(self.fusegraph_name, k, v) for k, v in self.attrs.items()}
        pad = attrs.get("padding")
        first = inputs[0] if inputs else None
        if self.fusegraph_name in _WINDOW_OPS and pad and isinstance(first, Shape) and len(pad) == first.ndim - 2:
            attrs["padding"] = tuple(pad) * 2
        return make_op(self.fusegraph_name, **attrs)

    def __repr__(self) -> str:
        return f"{self._name}[{', '.join(f'{k}={v!r}' for k, v in self.attrs.items())}]"


def _value(op_name: str, key: str, v: Any) -> Any:
    if (op_name, key) in _TYPE_ATTRS:
        return to_dtype(v)
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, (list, tuple)):
        return tuple(_value(op_name, key, x) for x in v)
    return v
