"""Checking run inputs against a program's parameter shapes, with errors that name the input."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError
from ..ir.dtypes import DType
from ..ir.shape import AnyShape, Shape


def check_inputs(specs: Mapping[str, AnyShape], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Return the inputs as arrays, or raise InputError naming every missing/extra/mismatched one."""
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
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        value = inputs[name]
        if not isinstance(spec, Shape):  # sequences/optionals: passed through as they are
            out[name] = value
            continue
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype == object and spec.dtype != DType.string:
            raise InputError(f"input {name!r}: cannot read {type(value).__name__} as a {spec.dtype} tensor")
        try:
            got = DType.from_numpy(arr.dtype)
        except TypeError:
            raise InputError(f"input {name!r}: unsupported dtype {arr.dtype}") from None
        if got != spec.dtype:
            raise InputError(f"input {name!r}: expected dtype {spec.dtype}, got {got}")
        if not spec.matches(arr.shape):
            raise InputError(f"input {name!r}: expected shape {_dims(spec)}, got [{','.join(map(str, arr.shape))}]")
        out[name] = arr
    return out


def _dims(spec: Shape) -> str:
    return "[" + ",".join(str(d) for d in spec.dims) + "]"
