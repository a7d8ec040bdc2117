"""The op definition protocol and the op registry.

An op is a frozen dataclass: its fields are its attributes. It knows its kind, its shape rule
(`compute_shape`, written for static shapes; dynamic shapes are derived from it by evaluating the
rule at the smallest and largest input shapes) and its numpy reference (`compute`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import IRError, ShapeError
from .shape import AnyShape, Dim, Shape, TupleShape


class OpKind(enum.Enum):
    POINTWISE = "pointwise"
    REDUCE = "reduce"
    MOVEMENT = "movement"
    GEMM = "gemm"
    CONV = "conv"
    OPAQUE = "opaque"
    CONTROL = "control"
    BUILTIN = "builtin"  # @param, @literal, @return


@dataclasses.dataclass(frozen=True)
class Op:
    name: ClassVar[str] = ""
    kind: ClassVar[OpKind] = OpKind.OPAQUE
    # Whether the result depends only on input values (constant propagation may evaluate it).
    deterministic: ClassVar[bool] = True
    # Whether a target without a kernel for it may run its reference on the host (custom ops say;
    # custom/definition.py): the gpu target's host steps honour it.
    host_fallback: ClassVar[bool] = True

    # -- shapes -----------------------------------------------------------------------------------
    def compute_shape(self, inputs: Sequence[Shape]) -> AnyShape:
        raise NotImplementedError(f"{self.name}: no shape rule")

    def infer_shape(self, inputs: Sequence[AnyShape]) -> AnyShape:
        """The output shape for these inputs, static or dynamic."""
        if not any(s.is_dynamic for s in inputs):
            return self.compute_shape(inputs)
        return self.compute_dynamic_shape(inputs)

    def compute_dynamic_shape(self, inputs: Sequence[AnyShape]) -> AnyShape:
        # Shape rules are monotonic in their input dims for every op we have: evaluating at the
        # smallest and at the largest inputs bounds each output dim. Unbounded dims are probed a
        # little above their minimum: output dims that move with them are unbounded too, the
        # others stay fixed.
        lo = self.compute_shape([_corner(s, "min") for s in inputs])
        hi = self.compute_shape([_corner(s, "max") for s in inputs])
        return _merge(lo, hi, unbounded=any(_unbounded(s) for s in inputs))

    # -- reference --------------------------------------------------------------------------------
    def compute(self, args: list[np.ndarray]) -> Any:
        raise NotImplementedError(f"{self.name}: no reference implementation")

    # -- description ------------------------------------------------------------------------------
    def attributes(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __str__(self) -> str:
        from .text import format_op

        return format_op(self)


def _corner(s: AnyShape, which: str) -> AnyShape:
    if isinstance(s, TupleShape):
        return TupleShape(tuple(_corner(e, which) for e in s.elements))
    if not s.is_dynamic:
        return s
    if which == "min":
        return Shape.of(s.dtype, s.min_lens)
    return Shape.of(s.dtype, [d.max if d.max is not None else d.min + _PROBE for d in s.dims])


_PROBE = 7  # how far above its minimum an unbounded dim is probed


def _unbounded(s: AnyShape) -> bool:
    if isinstance(s, TupleShape):
        return any(_unbounded(e) for e in s.elements)
    return any(d.max is None for d in s.dims)


def _merge(lo: AnyShape, hi: AnyShape, unbounded: bool) -> AnyShape:
    if isinstance(lo, TupleShape):
        return TupleShape(tuple(_merge(a, b, unbounded) for a, b in zip(lo.elements, hi.elements)))
    if lo.ndim != hi.ndim:
        raise ShapeError(f"rank depends on the input dims ({lo} vs {hi})")
    dims = [Dim(a, a) if a == b else Dim(min(a, b), None if unbounded else max(a, b))
            for a, b in zip(lo.lens, hi.lens)]
    return Shape.dynamic(lo.dtype, dims)


# -- registry ---------------------------------------------------------------------------------------
_OPS: dict[str, type[Op]] = {}


def register_op(cls: type[Op]) -> type[Op]:
    """Class decorator: make `cls` a frozen dataclass and register it under `cls.name`."""
    if not dataclasses.is_dataclass(cls) or cls.__dict__.get("__dataclass_params__") is None:
        cls = dataclasses.dataclass(frozen=True)(cls)
    if not cls.name:
        raise IRError(f"op class {cls.__name__} has no name")
    if cls.name in _OPS and _OPS[cls.name] is not cls:
        raise IRError(f"op {cls.name!r} registered twice ({_OPS[cls.name].__name__}, {cls.__name__})")
    _OPS[cls.name] = cls
    return cls


def get_op_class(name: str) -> type[Op]:
    try:
        return _OPS[name]
    except KeyError:
        raise IRError(f"unknown op {name!r}") from None


def make_op(name: str, **attrs: Any) -> Op:
    cls = get_op_class(name)
    try:
        return cls(**attrs)
    except TypeError as e:
        raise IRError(f"bad attributes for op {name!r}: {e}") from None


def registered_ops() -> dict[str, type[Op]]:
    return dict(_OPS)


def op_builder(name: str) -> Callable[..., Op]:
    return lambda **attrs: make_op(name, **attrs)
