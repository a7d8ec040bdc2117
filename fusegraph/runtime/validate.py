"""Checking run inputs against a program's parameter shapes, with errors that name the input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.dtypes import DType
from ..ir.shape import AnyShape, OptionalShape, SequenceShape, Shape


def check_inputs(specs: Mapping[str, AnyShape], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Return the inputs as arrays, or raise InputError naming every missing/extra/mismatched one."""
    if _exactly(specs, inputs):
        return inputs
    if not isinstance(inputs, Mapping):
        raise InputError(f"inputs must be a mapping of name -> array, got {type(inputs).__name__}")
    missing = [n for n in specs if n not in inputs]
    extra = [n for n in inputs if n not in specs]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing input(s) {missing}")
        if extra:
            parts.append(f"unknown input(s) {extra}")
        raise InputError("; ".join(parts) + f" (the program takes {list(specs)})")
    checked = {name: _check_value(f"input {name!r}", spec, inputs[name]) for name, spec in specs.items()}
    check_named_dims(specs, {n: np.shape(v) for n, v in checked.items() if isinstance(v, np.ndarray)})
    return checked


def _exactly(specs: Mapping[str, AnyShape], inputs: Any) -> bool:
    """The common case, checked fast (a small model's run is microseconds): a dict of numpy arrays
    with exactly the static shapes and dtypes of the specs (fixed dims agree with any dim names)."""
    if type(inputs) is not dict or len(inputs) != len(specs):
        return False
    for name, spec in specs.items():
        v = inputs.get(name)
        if (type(v) is not np.ndarray or type(spec) is not Shape or v.shape != spec._lens  # type: ignore[attr-defined]
                or v.dtype != spec.dtype.np):
            return False
    return True


def check_named_dims(specs: Mapping[str, AnyShape], lens: Mapping[str, Sequence[int]]) -> None:
    """Dims that one symbol names (ir/symbolic.py; ONNX dim_params) have one size in a run: the
    compiled program folded shape arithmetic on that."""
    seen: dict[str, tuple[str, int, int]] = {}
    for name, spec in specs.items():
        if not isinstance(spec, Shape) or name not in lens:
            continue
        for k, (d, n) in enumerate(zip(spec.dims, lens[name])):
            sym = d.sym.single_name if d.sym is not None else None
            if sym is None:
                continue
            first = seen.setdefault(sym, (name, k, int(n)))
            if first[2] != n:
                raise InputError(f"input {name!r}: dim {k} is {n}, but input {first[0]!r} dim {first[1]} is "
                                 f"{first[2]}: both are the model's dim {sym!r}, one size in a run")


def _check_value(what: str, spec: Any, value: Any) -> Any:
    """A sequence input is a list of arrays; an optional one is None or its value."""
    if isinstance(spec, OptionalShape):
        return None if value is None else _check_value(what, spec.elem, value)
    if isinstance(spec, SequenceShape):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{what}: expected a sequence (a list of arrays), got {type(value).__name__}")
        if not spec.length.contains(len(value)):
            raise InputError(f"{what}: expected a sequence of {spec.length} tensors, got {len(value)}")
        elem = spec.elem if spec.elem is not None else spec.dtype
        return [_check_tensor(f"{what}[{k}]", elem, v) for k, v in enumerate(value)]
    if value is None:
        raise InputError(f"{what}: expected a {spec.dtype} tensor, got None")
    return _check_tensor(what, spec, value)


def _check_tensor(what: str, spec: Shape | DType, value: Any) -> np.ndarray:
    """The value as an array of the spec's dtype and shape (a bare DType: any shape)."""
    dtype = spec if isinstance(spec, DType) else spec.dtype
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype == object and dtype != DType.string:
        raise InputError(f"{what}: cannot read {type(value).__name__} as a {dtype} tensor")
    try:
        got = DType.from_numpy(arr.dtype)
    except TypeError:
        raise InputError(f"{what}: unsupported dtype {arr.dtype}") from None
    if got != dtype:
        raise InputError(f"{what}: expected dtype {dtype}, got {got}")
    if isinstance(spec, Shape) and not spec.matches(arr.shape):
        raise InputError(f"{what}: expected shape {_dims(spec)}, got [{','.join(map(str, arr.shape))}]"
                         + _outside(spec, arr.shape))
    return arr


def _outside(spec: Shape, lens: tuple[int, ...]) -> str:
    """Which dynamic dim a shape of the right rank falls outside of, and its range."""
    if len(lens) != spec.ndim:
        return ""
    for k, (d, n) in enumerate(zip(spec.dims, lens)):
        if not d.is_fixed and not d.contains(n):
            hi = "unbounded" if d.max is None else d.max
            return f": dim {k} is {n}, outside its range [{d.min}..{hi}]"
    return ""


def _dims(spec: Shape) -> str:
    return "[" + ",".join(str(d) for d in spec.dims) + "]"
