"""`parse_onnx`, `parse_onnx_buffer` and `get_onnx_operators` with MIGraphX's options.

- `default_dim_value` > 0 fixes every symbolic input dim to it; 0 (MIGraphX's default) uses
  `default_dyn_dim_value` (default [1, 1]): a fixed one fixes them, a range makes them dynamic.
- `map_input_dims` / `map_dyn_input_dims` fix or range whole inputs (dynamic_dimension lists).
- `max_loop_iterations` / `limit_max_iterations`: MIGraphX unrolls a Loop to that many iterations
  and cuts it off there; fusegraph runs Loops as they go, so a given value becomes the run-time
  limit past which a Loop fails (ExecutionError) instead of being cut off. Left out, fusegraph's
  own limit applies.
- `external_data_path`: the folder external tensor data is read from (fusegraph's
  `external_data_dir`; by default the model's folder for a file, none for a buffer).
- `print_program_on_error`: on a parse error the ONNX graph is printed before the error is raised
  (fusegraph builds no partial program to print).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ArgumentError, FusegraphError, api_boundary
from .program import program
from .shape import as_dim, dynamic_dimension


def _symbolic_dims(proto: Any, default: dynamic_dimension, skip: set[str]) -> dict[str, list]:
    """For each graph input with symbolic dims (not in `skip`): its dims, symbolic ones ranged as `default`."""
    out: dict[str, list] = {}
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in skip or vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else default.to_dim() for d in dims]
    return out


def _parse(source: Any, default_dim_value: int, default_dyn_dim_value: Any, map_input_dims: Mapping,
           map_dyn_input_dims: Mapping, skip_unknown_operators: bool, print_program_on_error: bool,
           max_loop_iterations: int | None, limit_max_iterations: int | None,
           external_data_path: str | os.PathLike | None) -> program:
    from ..onnx import parse_onnx as fg_parse
    from ..onnx.loading import load_model

    if default_dim_value < 0:
        raise ArgumentError(f"parse_onnx: default_dim_value must be >= 0, got {default_dim_value}")
    ext = external_data_path or None
    proto = load_model(source, ext)
    dyn = {k: [as_dim(d) for d in v] for k, v in dict(map_dyn_input_dims or {}).items()}
    fixed = {k: [int(n) for n in v] for k, v in dict(map_input_dims or {}).items()}
    default = 1
    if default_dim_value > 0:
        default = default_dim_value
    else:
        dd = default_dyn_dim_value if default_dyn_dim_value is not None else dynamic_dimension(1, 1)
        dd = dd if isinstance(dd, dynamic_dimension) else dynamic_dimension.from_dim(as_dim(dd))
        if dd.is_fixed():
            default = dd.min
        else:
            dyn.update(_symbolic_dims(proto, dd, set(fixed) | set(dyn)))
    limits = [n for n in (max_loop_iterations, limit_max_iterations) if n is not None]
    try:
        p = fg_parse(proto, map_input_dims=fixed, map_dyn_input_dims=dyn, default_dim_value=default,
                     skip_unknown_operators=skip_unknown_operators, external_data_dir=ext)
    except FusegraphError:
        if print_program_on_error:
            import onnx

            print(onnx.printer.to_text(proto.graph), file=sys.stderr)
        raise
    return program(p, max_loop_iterations=max(limits) if limits else None)


@api_boundary
def parse_onnx(filename: str | os.PathLike, default_dim_value: int = 0, default_dyn_dim_value: Any = None,
               map_input_dims: Mapping[str, Sequence[int]] | None = None,
               map_dyn_input_dims: Mapping[str, Sequence[Any]] | None = None,
               skip_unknown_operators: bool = False, print_program_on_error: bool = False,
               max_loop_iterations: int | None = None, limit_max_iterations: int | None = None,
               external_data_path: str | os.PathLike = "") -> program:
    """Parse an ONNX file into a program (options: see the module docstring)."""
    if not isinstance(filename, (str, os.PathLike)):
        raise ArgumentError(f"parse_onnx: expected a file name, got {type(filename).__name__} "
                            "(parse_onnx_buffer reads bytes)")
    return _parse(filename, default_dim_value, default_dyn_dim_value, map_input_dims, map_dyn_input_dims,
                  skip_unknown_operators, print_program_on_error, max_loop_iterations, limit_max_iterations,
                  external_data_path)


@api_boundary
def parse_onnx_buffer(onnx_buffer: bytes, default_dim_value: int = 0, default_dyn_dim_value: Any = None,
                      map_input_dims: Mapping[str, Sequence[int]] | None = None,
                      map_dyn_input_dims: Mapping[str, Sequence[Any]] | None = None,
                      skip_unknown_operators: bool = False, print_program_on_error: bool = False,
                      external_data_path: str | os.PathLike = "", max_loop_iterations: int | None = None,
                      limit_max_iterations: int | None = None) -> program:
    """Parse an ONNX model held in bytes into a program (positional order as MIGraphX's binding:
    external_data_path follows print_program_on_error)."""
    if isinstance(onnx_buffer, str):  # pybind11 hands MIGraphX a std::string: bytes in Python 3
        raise ArgumentError("parse_onnx_buffer: expected the model's bytes, got a str (read the file in 'rb' mode)")
    if not isinstance(onnx_buffer, (bytes, bytearray, memoryview)):
        raise ArgumentError(f"parse_onnx_buffer: expected bytes, got {type(onnx_buffer).__name__}")
    return _parse(bytes(onnx_buffer), default_dim_value, default_dyn_dim_value, map_input_dims,
                  map_dyn_input_dims, skip_unknown_operators, print_program_on_error, max_loop_iterations,
                  limit_max_iterations, external_data_path)


def get_onnx_operators() -> list[str]:
    """The ONNX operator types (default domain) that parse_onnx converts."""
    from ..onnx.registry import supported_ops

    return sorted({e.op_type for e in supported_ops() if e.domain == ""})
