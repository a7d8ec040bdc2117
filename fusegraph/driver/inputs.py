"""Building a model's inputs for the CLI: `--input name=file.npy`, `--input-dim`, `--batch`, `--fill`.

Input shapes are decided before parsing (they become `parse_onnx(map_input_dims=...)`), from, in
order: `--input-dim`, the shape of a `--input` file, a built-in model's sample inputs, and finally
the declared ONNX dims with symbolic ones set by `--batch` (first dim) or `--default-dim` (1): the
dims set so are `defaulted`, and the commands name them.

Generated integer inputs stay below the length of the tables they index (bounds.py); an integer
input named like an attention mask gets ones followed by padding zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import ml_dtypes
import numpy as np
import onnx

from ..errors import InputError
from ..ir.dtypes import DType
from ..ir.shape import AnyShape, Shape

FILLS = ("random", "0", "1")
# Integer inputs of unknown meaning are usually indices (token ids, positions, classes): small
# non-negative values keep them in range of any table they index.
INT_FILL_HIGH = 10


# -- command-line specs --------------------------------------------------------------------------
def _split_spec(spec: str, option: str, example: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name or not value:
        raise InputError(f"bad {option} {spec!r}: expected {example}")
    return name, value


def parse_dim_specs(specs: Sequence[str]) -> dict[str, list[int]]:
    """`["x=1,3,224,224"]` -> `{"x": [1, 3, 224, 224]}`."""
    dims: dict[str, list[int]] = {}
    for spec in specs:
        name, value = _split_spec(spec, "--input-dim", "NAME=D0,D1,... (e.g. input=1,3,224,224)")
        try:
            lens = [int(v) for v in value.split(",")]
        except ValueError:
            raise InputError(f"bad --input-dim {spec!r}: dims must be integers separated by commas") from None
        if any(n < 0 for n in lens):
            raise InputError(f"bad --input-dim {spec!r}: dims cannot be negative")
        dims[name] = lens
    return dims


def load_input_files(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """`["x=a.npy"]` -> `{"x": array}`; never unpickles (a .npy of objects is refused)."""
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name, value = _split_spec(spec, "--input", "NAME=FILE.npy")
        arrays[name] = load_npy(Path(value), name)
    return arrays


def load_npy(path: Path, name: str) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"input {name!r}: no such file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":  # np.load would try to unpickle anything else, and say so
            raise InputError(f"input {name!r}: {path} is not a .npy file (save arrays with numpy.save)")
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"input {name!r}: cannot read {path} as a .npy array: {e}") from None
    return arr


# -- shapes ----------------------------------------------------------------------------------------
def declared_dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    """An input's dims as the model declares them: ints, or the symbol ('?' when unnamed)."""
    dims: list[int | str] = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            dims.append(d.dim_param or "?")
    return dims


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds: graph inputs that are not initializers."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


class ResolvedDims(NamedTuple):
    dims: dict[str, list[int]]        # the map_input_dims for parse_onnx
    defaulted: dict[str, list[tuple[int, str]]]  # input -> (axis, symbol) of dims set to `default`
    default: int                      # the value they were set to


def resolve_input_dims(model: onnx.ModelProto, *, input_dims: Mapping[str, Sequence[int]],
                       files: Mapping[str, np.ndarray], samples: Mapping[str, np.ndarray] | None,
                       batch: int | None, default_dim: int | None) -> ResolvedDims:
    """The `map_input_dims` for parse_onnx (see the module docstring for the order of precedence)."""
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    unknown = sorted((set(input_dims) | set(files)) - set(inputs))
    if unknown:
        raise InputError(f"the model has no input(s) {unknown}; its inputs are {list(inputs)}")
    fill = 1 if default_dim is None else default_dim
    out: dict[str, list[int]] = {}
    defaulted: dict[str, list[tuple[int, str]]] = {}
    for name, vi in inputs.items():
        declared = declared_dims(vi)
        if name in input_dims:
            out[name] = list(input_dims[name])
        elif name in files:
            out[name] = _file_dims(name, declared, files[name].shape)
        elif samples and name in samples and default_dim is None:
            out[name] = list(samples[name].shape)
        elif any(isinstance(d, str) for d in declared):
            by_batch = [k == 0 and bool(batch) for k in range(len(declared))]
            out[name] = [d if isinstance(d, int) else (batch if b else fill) for d, b in zip(declared, by_batch)]
            axes = [(k, d) for k, (d, b) in enumerate(zip(declared, by_batch)) if isinstance(d, str) and not b]
            if axes:
                defaulted[name] = axes
    return ResolvedDims(out, defaulted, fill)


def defaulted_advice(resolved: ResolvedDims) -> list[str]:
    """One line per input whose symbolic dims took the default, saying how to choose them."""
    lines = []
    for name, axes in resolved.defaulted.items():
        symbols = dict(axes)
        spec = ",".join(f"<{symbols[k]}>" if k in symbols else str(d) for k, d in enumerate(resolved.dims[name]))
        quoted = ", ".join(f"'{s}'" for s in symbols.values())
        lines.append(f"{name}: dim{'s' if len(axes) > 1 else ''} {quoted} set to {resolved.default}; "
                     f"pass --input-dim {name}={spec}")
    return lines


def _file_dims(name: str, declared: list[int | str], lens: tuple[int, ...]) -> list[int]:
    fits = len(declared) == len(lens) and all(
        isinstance(d, str) or d == n for d, n in zip(declared, lens, strict=True))
    if not fits:
        want = "[" + ",".join(map(str, declared)) + "]"
        raise InputError(f"input {name!r}: the file's shape {list(lens)} does not fit the model's {want}")
    return list(lens)


# -- values ----------------------------------------------------------------------------------------
def concrete_lens(spec: Shape) -> tuple[int, ...]:
    """Lens to fill for a parameter; for a dynamic dim its first optimal value, else its maximum
    (the shape a dynamic program is sized for), else (unbounded) its minimum."""
    if not spec.is_dynamic:
        return spec.lens
    return tuple(d.optimals[0] if d.optimals else d.max if d.max is not None else max(d.min, 1) for d in spec.dims)


def fill_array(spec: AnyShape, name: str, fill: str, rng: np.random.Generator,
               high: int | None = None) -> np.ndarray:
    """A `fill` of the parameter; random integers lie in [0, high) (`high`: the length of the tables
    the input indexes, else INT_FILL_HIGH)."""
    if not isinstance(spec, Shape):
        raise InputError(f"input {name!r} is a {spec}, which cannot be filled; pass it with --input")
    dtype, lens = spec.dtype, concrete_lens(spec)
    if dtype in (DType.string, DType.complex64, DType.complex128):
        raise InputError(f"input {name!r}: cannot fill a {dtype} tensor; pass it with --input {name}=FILE.npy")
    if fill in ("0", "1"):
        return np.full(lens, int(fill)).astype(dtype.np)
    if fill != "random":
        raise InputError(f"bad --fill {fill!r}: choose one of {', '.join(FILLS)}")
    if dtype == DType.bool:
        return rng.random(lens) < 0.5
    if dtype.is_float:
        return rng.standard_normal(lens, dtype=np.float32).astype(dtype.np)
    if "mask" in name.lower() and high is None:
        return _attention_mask(lens, rng).astype(dtype.np)
    top = min(high or INT_FILL_HIGH, int(ml_dtypes.iinfo(dtype.np).max) + 1)
    return rng.integers(0, top, size=lens).astype(dtype.np)


def _attention_mask(lens: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Ones then padding zeros along the last axis (at least one 1 per row), as tokenizers give."""
    if not lens or lens[-1] == 0:
        return np.ones(lens, np.int64)
    kept = rng.integers(1, lens[-1] + 1, size=lens[:-1] + (1,))
    return (np.arange(lens[-1]) < kept).astype(np.int64)


def build_inputs(specs: Mapping[str, AnyShape], *, files: Mapping[str, np.ndarray],
                 samples: Mapping[str, np.ndarray] | None, fill: str, seed: int,
                 bounds: Mapping[str, int] | None = None,
                 lens: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """One array per program parameter: a file's, else a matching sample's, else a `fill` (integers
    below `bounds[name]`, the length of the tables they index, where known). A dynamic parameter
    takes the `lens` given for it, else `concrete_lens`."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, spec in specs.items():
        if isinstance(spec, Shape) and spec.is_dynamic:  # one shape of the range
            spec = Shape.of(spec.dtype, (lens or {}).get(name) or concrete_lens(spec))
        if name in files:
            feeds[name] = files[name]
        elif fill == "random" and samples and name in samples and _fits(spec, samples[name]):
            feeds[name] = samples[name]
        else:
            feeds[name] = fill_array(spec, name, fill, rng, (bounds or {}).get(name))
    return feeds


def _fits(spec: AnyShape, arr: np.ndarray) -> bool:
    return isinstance(spec, Shape) and spec.dtype.np == arr.dtype and spec.matches(arr.shape)
