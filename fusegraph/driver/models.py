"""Resolving the CLI's MODEL argument: a model file, or the name of a built-in model of the zoo."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import ModelLoadError, UnknownModelError
from ..onnx import load_model
from ..onnx.loading import regular_file

# Suffixes that are surely meant as files: such a MODEL that does not exist is a missing file,
# not an unknown model name.
MODEL_SUFFIXES = (".onnx", ".fgx", ".pb")
# program metadata naming the built-in model a compiled file was made from
ZOO_MODEL_KEY = "zoo_model"


@dataclasses.dataclass
class ModelSource:
    """Where a model came from, and what is known about its inputs."""

    label: str                     # as the user wrote it; used in messages and titles
    proto: onnx.ModelProto | None  # None for a compiled .fgx file: there is no ONNX model to parse
    path: Path | None = None       # the file, when MODEL was one (ORT reads external data beside it)
    builtin: str | None = None     # the zoo's name, when MODEL was one
    compiled: Any = None           # the compiled Program, when MODEL was an .fgx file

    def sample_inputs(self, batch: int, seed: int, **sizes: int) -> dict[str, np.ndarray] | None:
        """Realistic inputs (valid token ids, ...) for built-in models; None for files. `sizes` are
        the sampler's (seq=, image_size=)."""
        if self.builtin is None:
            return None
        from ..models import sample_inputs

        return sample_inputs(self.builtin, batch=batch, seed=seed, **sizes)


def _load_onnx(path: Path, label: str) -> ModelSource:
    return ModelSource(label, load_model(path), path=path)


def _load_compiled(path: Path, label: str) -> ModelSource:
    # the saved Program travels on the ModelSource; commands skip parse and compile for it
    from ..runtime.serialize import load

    program = load(path)
    zoo = program.metadata.get(ZOO_MODEL_KEY)  # compiled from a built-in model: its samples still fit
    return ModelSource(label, None, path=path, builtin=zoo if zoo and _is_builtin(zoo) else None, compiled=program)


# suffix -> loader; anything else is read as ONNX (exported models carry all sorts of names)
LOADERS: dict[str, Callable[[Path, str], ModelSource]] = {".fgx": _load_compiled}


def builtin_names() -> list[str]:
    """The zoo's model names, or [] while the zoo is not importable."""
    try:
        from ..models import list_models
    except ImportError:
        return []
    return list_models()


def _is_builtin(name: str) -> bool:
    try:
        from ..models import is_model_name
    except ImportError:
        return False
    return is_model_name(name)


def resolve_model(arg: str) -> ModelSource:
    """A file path wins over a built-in name of the same spelling."""
    path = Path(arg)
    if path.is_file():
        return LOADERS.get(path.suffix.lower(), _load_onnx)(path, arg)
    if path.is_dir():
        raise ModelLoadError(f"{arg} is a directory, not a model file")
    if path.exists():  # a FIFO, a socket, a device: said so by stat, never opened
        regular_file(path)
    if _is_builtin(arg):
        from ..models import get_model

        return ModelSource(arg, get_model(arg), builtin=arg)
    if path.suffix.lower() in MODEL_SUFFIXES or "/" in arg or "\\" in arg:
        raise ModelLoadError(f"no such model file: {arg}")
    names = builtin_names()
    known = f"; built-in models: {', '.join(names)}" if names else ""
    raise UnknownModelError(f"unknown model {arg!r}: not a file and not a built-in model{known}")
