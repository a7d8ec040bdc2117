"""Reading an ONNX model from a path, bytes or a ModelProto, and its external data from where the
caller said, nowhere else.

A tensor's `external_data` names a file by a location the model's author chose. For a model given
by path, that file must lie in the model's folder; for bytes or a ModelProto, in the
`external_data_dir` the caller passed (without one, no file is read: a service that takes models
from others must not read its own working directory for them). An absolute location, one with a
`..` step, one through a symbolic link that leads out of the folder, or one that is not a regular
file (a FIFO would block the read forever) is refused with ModelLoadError naming the tensor.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path, PurePath

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from .. import files
from ..errors import FusegraphError, ModelLoadError
from .wire import split_weights

ModelSource = str | os.PathLike | bytes | bytearray | memoryview | onnx.ModelProto


def regular_file(path: str | os.PathLike, what: str = "model file") -> Path:
    """`path`, checked by stat to be a regular file; ModelLoadError naming it otherwise."""
    try:
        return files.regular_file(path, what)
    except FileNotFoundError:
        raise ModelLoadError(f"no such {what}: {path}") from None
    except OSError as e:
        raise ModelLoadError(f"cannot read {what} {path}: {e.strerror or e}") from None


@dataclasses.dataclass(frozen=True)
class RawWeights:
    """The main graph's initializers whose raw data `read_model` left out of the message: where each
    lies in the model's bytes, by its index in graph.initializer (wire.py)."""
    data: bytes = b""
    spans: Mapping[int, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def get(self, index: int) -> memoryview | None:
        span = self.spans.get(index)
        return None if span is None else memoryview(self.data)[span[0]:span[1]]


def load_model(model: ModelSource, external_data_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """Read an ONNX model from a path, bytes or a ModelProto, with clear errors for bad input. External
    data is read from the model's folder (a path) or `external_data_dir` (bytes, a ModelProto)."""
    return _load(model, external_data_dir, split=False)[0]


def read_model(model: ModelSource, external_data_dir: str | os.PathLike | None = None
               ) -> tuple[onnx.ModelProto, RawWeights]:
    """`load_model`'s model, but for a path or bytes the main graph's large initializers come without
    their raw data, which RawWeights locates in the bytes (the parse copies each once, not thrice)."""
    return _load(model, external_data_dir, split=True)


def _parse(data: bytes, split: bool) -> tuple[onnx.ModelProto, RawWeights]:
    cut = split_weights(data) if split else None
    if cut is None:
        return onnx.load_from_string(data), RawWeights()
    return onnx.load_from_string(cut[0]), RawWeights(data, cut[1])


def _load(model: ModelSource, external_data_dir: str | os.PathLike | None, split: bool
          ) -> tuple[onnx.ModelProto, RawWeights]:
    weights = RawWeights()
    try:
        if isinstance(model, onnx.ModelProto):
            proto, base = model, external_data_dir
        elif isinstance(model, (bytes, bytearray, memoryview)):
            (proto, weights), base = _parse(bytes(model), split), external_data_dir
        else:
            path = regular_file(model)
            with open(files.open_regular(path), "rb") as f:  # a FIFO swapped in since: refused, not waited on
                proto, weights = _parse(f.read(), split)
            base = path.parent if external_data_dir is None else external_data_dir
        proto = _with_external_data(proto, None if base is None else Path(base))
    except FusegraphError:
        raise
    except DecodeError as e:
        raise ModelLoadError(f"not a valid ONNX model (malformed or truncated protobuf): {e}") from None
    except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as e:
        raise ModelLoadError(f"cannot read ONNX model: {e}") from None
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise ModelLoadError("not a valid ONNX model: it has no graph (empty, truncated or not ONNX)")
    return proto, weights


def _external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    tensors = list(external_data_helper._get_all_tensors(proto))  # initializers and attributes, subgraphs too
    for sparse in proto.graph.sparse_initializer:
        tensors += [sparse.values, sparse.indices]
    return [t for t in tensors if external_data_helper.uses_external_data(t)]


def _with_external_data(proto: onnx.ModelProto, base: Path | None) -> onnx.ModelProto:
    """`proto` with every external tensor's bytes read in (a copy when there are any: the caller's
    ModelProto is left as given)."""
    if not _external_tensors(proto):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t in _external_tensors(copy):
        info = external_data_helper.ExternalDataInfo(t)
        if base is None:
            raise ModelLoadError(f"tensor {t.name!r} keeps its data in the external file {info.location!r}: "
                                 f"a model given as bytes or a ModelProto reads external data only from "
                                 f"parse_onnx(..., external_data_dir=...)")
        t.raw_data = _read_external(_inside(base, info.location, t.name), info.offset or 0, info.length, t.name)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
    return copy


def _inside(base: Path, location: str, tensor: str) -> Path:
    """The file `location` names in `base`; ModelLoadError unless it is a regular file inside it."""
    rel = PurePath(location)
    if not location or rel.is_absolute() or location.startswith(("/", "\\")) or ".." in rel.parts \
            or "\0" in location or (len(location) > 1 and location[1] == ":"):
        raise ModelLoadError(f"tensor {tensor!r}: external data location {location!r} is not a file name "
                             f"inside the model's folder (absolute, or with '..')")
    root = os.path.realpath(base)
    target = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, target]) != root:
        raise ModelLoadError(f"tensor {tensor!r}: external data {location!r} leads out of {base} "
                             f"(a symbolic link)")
    return regular_file(target, f"external data file of tensor {tensor!r}")


def _read_external(path: Path, offset: int, length: int | None, tensor: str) -> bytes:
    size = path.stat().st_size
    if offset > size or (length is not None and offset + length > size):
        raise ModelLoadError(f"tensor {tensor!r}: external data at offset {offset}, length {length} lies "
                             f"outside {path.name} ({size} bytes)")
    with open(files.open_regular(path, f"external data file of tensor {tensor!r}"), "rb") as f:
        f.seek(offset)
        return f.read(size - offset if length is None else length)
