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
    # Whether symbolic dims (ir/symbolic.py) may be read off this op's static shape rule. None: when
    # the op keeps the derived dynamic rule; an op that overrides it (data-dependent outputs, say)
    # opts in with True where its static rule still gives the output dims of static inputs.
    symbolic_probe: ClassVar[bool | None] = None

    # -- shapes -----------------------------------------------------------------------------------
    def compute_shape(self, inputs: Sequence[Shape]) -> AnyShape:
        raise NotImplementedError(f"{self.name}: no shape rule")

    def infer_shape(self, inputs: Sequence[AnyShape]) -> AnyShape:
        """The output shape for these inputs, static or dynamic."""
        if not any(s.is_dynamic for s in inputs):
            return self.compute_shape(inputs)
        out = self.compute_dynamic_shape(inputs)
        probe = self.symbolic_probe
        if probe is None:
            probe = type(self).compute_dynamic_shape is Op.compute_dynamic_shape
        return with_symbols(self, inputs, out) if probe else out

    def compute_dynamic_shape(self, inputs: Sequence[AnyShape]) -> AnyShape:
        # Shape rules are monotonic in their input dims for every op we have: evaluating at the
        # smallest and at the largest inputs bounds each output dim. Unbounded dims are probed a
        # little above their minimum: output dims that move with them are unbounded too, the
        # others stay fixed.
        try:
            lo = self.compute_shape([_corner(s, "min") for s in inputs])
        except ShapeError as refusal:
            # a rule that refuses the smallest inputs (a window wider than a dim that may be 0: the
            # boxes a detector kept) bounds the output from the smallest it takes; a run below that
            # is the op's error then, as it is ONNX Runtime's
            lo = self._smallest_taken(inputs, refusal)
        hi = self.compute_shape([_corner(s, "max") for s in inputs])
        return _merge(lo, hi, unbounded=any(_unbounded(s) for s in inputs))

    def _smallest_taken(self, inputs: Sequence[AnyShape], refusal: ShapeError) -> AnyShape:
        """The rule's output at the smallest inputs it takes, every dynamic dim raised from its
        minimum together (the rules are monotonic); `refusal` (the minimum's) where none is."""
        for step in _RAISES:
            try:
                return self.compute_shape([_corner(s, "min", step) for s in inputs])
            except ShapeError:
                continue
        raise refusal

    # -- reference --------------------------------------------------------------------------------
    def compute(self, args: list[np.ndarray]) -> Any:
        raise NotImplementedError(f"{self.name}: no reference implementation")

    # -- description ------------------------------------------------------------------------------
    def attributes(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __str__(self) -> str:
        from .text import format_op

        return format_op(self)


def _corner(s: AnyShape, which: str, raised: int = 0) -> AnyShape:
    """`s` at its smallest ("min", each dynamic dim `raised` above its minimum, up to its maximum)
    or largest dims."""
    if isinstance(s, TupleShape):
        return TupleShape(tuple(_corner(e, which, raised) for e in s.elements))
    if not s.is_dynamic:
        return s
    if which == "min":
        if not raised:
            return Shape.of(s.dtype, s.min_lens)
        return Shape.of(s.dtype, [d.min if d.is_fixed else d.min + raised if d.max is None else min(d.min + raised, d.max)
                                  for d in s.dims])
    return Shape.of(s.dtype, [d.max if d.max is not None else d.min + _PROBE for d in s.dims])


_PROBE = 7  # how far above its minimum an unbounded dim is probed
_RAISES = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)  # how far above their minimum dims are raised to find a size a rule takes


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


# -- symbolic dims ----------------------------------------------------------------------------------
def with_symbols(op: Op, inputs: Sequence[AnyShape], out: AnyShape) -> AnyShape:
    """`out` with the symbols its dynamic dims take in the inputs' named dims (ir/symbolic.py): the
    static rule evaluated at three probe assignments, each output dim fitted, the fit checked at the
    corners of the ranges. Any rule that refuses a probe leaves `out` as it is."""
    from .symbolic import fit, probe_values

    dims = [d for s in _leaves(inputs) for d in s.dims if not d.is_fixed]
    named = sorted({n for d in dims if d.sym is not None for n in d.sym.names})
    if not named or not any(not d.is_fixed for s in _leaves([out]) for d in s.dims):
        return out
    anonymous = [f"?{k}" for k, d in enumerate(dims) if d.sym is None]  # vary too: no fit may ignore them
    probes = [probe_values(named + anonymous, r) for r in range(3)]
    try:
        results = [_leaves([op.compute_shape(_probe_inputs(inputs, p, anonymous))]) for p in probes]
    except (IRError, ShapeError, ValueError, IndexError, TypeError, ArithmeticError, AssertionError):
        return out
    if any(r.is_dynamic or len(r.dims) != len(o.dims) for res in results for r, o in zip(res, _leaves([out]))):
        return out
    corners = [{n: _corner_of(dims, n, which) for n in named} for which in ("min", "max")]
    leaves = []
    for k, o in enumerate(_leaves([out])):
        new = []
        for i, d in enumerate(o.dims):
            sym = None if d.is_fixed else fit(named, probes, [res[k].dims[i].min for res in results])
            if sym is not None and None not in corners[0].values() and (
                    sym.evaluate(corners[0]) != d.min or (d.max is not None and None not in corners[1].values()
                                                           and sym.evaluate(corners[1]) != d.max)):
                sym = None  # the fit holds at the probes but not over the range: not this polynomial
            new.append(Dim(d.min, d.max, d.optimals, sym) if sym is not None else d)
        leaves.append(Shape(o.dtype, tuple(new), o.strides_))
    it = iter(leaves)
    return _rebuild(out, it)


def _leaves(shapes: Sequence[AnyShape]) -> list[Shape]:
    out: list[Shape] = []
    for s in shapes:
        if isinstance(s, TupleShape):
            out += _leaves(s.elements)
        elif isinstance(s, Shape):
            out.append(s)
    return out


def _rebuild(s: AnyShape, leaves) -> AnyShape:
    if isinstance(s, TupleShape):
        return TupleShape(tuple(_rebuild(e, leaves) for e in s.elements))
    return next(leaves)


def _probe_inputs(inputs: Sequence[AnyShape], values: dict[str, int], anonymous: list[str]) -> list[AnyShape]:
    names = iter(anonymous)  # in the order `with_symbols` numbered the unnamed dims
    return [_at(s, values, names) for s in inputs]


def _at(s: AnyShape, values: dict[str, int], anonymous) -> AnyShape:
    """`s` at a probe: named dims evaluated, unnamed dynamic dims at their own probe values."""
    if isinstance(s, TupleShape):
        return TupleShape(tuple(_at(e, values, anonymous) for e in s.elements))
    if not isinstance(s, Shape) or not s.is_dynamic:
        return s
    lens = [d.min if d.is_fixed else d.sym.evaluate(values) if d.sym is not None else values[next(anonymous)]
            for d in s.dims]
    return Shape.of(s.dtype, lens)


def _corner_of(dims: list[Dim], name: str, which: str) -> int | None:
    """The smallest / largest value of `name`, read off an input dim that is exactly that name."""
    for d in dims:
        if d.sym is not None and d.sym.single_name == name:
            return d.min if which == "min" else d.max
    return None


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
