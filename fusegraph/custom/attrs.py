"""Typed attributes of a custom op: a type, a default, and a check whose failure names the attribute."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import ArgumentError

# the attribute types a custom op may declare, and what values of each look like once normalized
ATTR_TYPES: dict[Any, str] = {int: "an int", float: "a float", str: "a string", bool: "a bool",
                              tuple[int, ...]: "a tuple of ints", tuple[float, ...]: "a tuple of floats"}


class CustomOpAttributeError(ArgumentError):
    """A custom op's attribute has the wrong type or fails its check; names the op and the attribute."""


@dataclasses.dataclass(frozen=True)
class Attr:
    """One attribute: `type` (int, float, str, bool, tuple[int, ...] or tuple[float, ...]), its
    `default` (None: required), and `check(value) -> bool` with `must` saying what it requires
    (e.g. check=lambda v: v > 0, must="be positive")."""

    type: Any
    default: Any = None
    check: Callable[[Any], bool] | None = None
    must: str = "pass its check"

    def __post_init__(self) -> None:
        if self.type not in ATTR_TYPES:
            raise ArgumentError(f"attribute type {self.type!r} is not one of {', '.join(ATTR_TYPES.values())}")

    def normalize(self, op: str, name: str, value: Any) -> Any:
        """`value` as this attribute's type (ONNX gives ints for bools and lists for tuples), checked."""
        if value is None:
            if self.default is None:
                raise CustomOpAttributeError(f"custom op {op}: attribute {name!r} is required")
            value = self.default
        v = _convert(self.type, value)
        if v is None:
            raise CustomOpAttributeError(f"custom op {op}: attribute {name!r} must be {ATTR_TYPES[self.type]}, "
                                         f"got {value!r}")
        if self.check is not None and not self.check(v):
            raise CustomOpAttributeError(f"custom op {op}: attribute {name}={v!r} must {self.must}")
        return v


def _convert(kind: Any, value: Any) -> Any:
    """`value` as `kind`, or None when it is not one (no silent float -> int truncation)."""
    import numpy as np

    if isinstance(value, np.generic):
        value = value.item()
    if kind is bool:
        return bool(value) if isinstance(value, (bool, int)) and value in (0, 1) else None
    if kind is int:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if kind is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind is str:
        return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) else None
    if isinstance(value, (list, tuple, np.ndarray)):
        item = int if kind == tuple[int, ...] else float
        items = [_convert(item, x) for x in list(value)]
        return None if any(x is None for x in items) else tuple(items)
    return None
