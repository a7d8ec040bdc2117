"""An `onnx.backend.base.Backend` over fusegraph, so the ONNX conformance suite and other tools can drive it.

Device "CPU" runs the `cpu` target when it is available and `ref` otherwise; "CUDA" runs `gpu`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .errors import TargetError
from .ir.shape import Shape
from .onnx import parse_onnx
from .targets import get_target

_DEVICE_TARGETS = {"CPU": ("cpu", "ref"), "CUDA": ("gpu",)}


def target_for_device(device: str) -> str:
    dev = device.split(":")[0].upper()
    for name in _DEVICE_TARGETS.get(dev, ()):
        try:
            get_target(name)
            return name
        except TargetError:
            continue
    raise TargetError(f"no fusegraph target for device {device!r}")


class FusegraphRep(BackendRep):
    """A prepared model. Models with symbolic input dims are compiled per concrete input shapes."""

    def __init__(self, model: onnx.ModelProto, target: str):
        self.model = model
        self.target = target
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self._programs: dict[tuple, Any] = {}
        if not _has_symbolic_dims(model, inits):
            self._programs[()] = self._compile({})

    def _compile(self, input_dims: dict[str, list[int]]):
        program = parse_onnx(self.model, map_input_dims=input_dims)
        return program.compile(get_target(self.target))

    def _program_for(self, feeds: dict[str, Any]):
        if () in self._programs:
            return self._programs[()]
        dims = {n: list(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray) or np.isscalar(v)}
        key = tuple(sorted((n, tuple(d)) for n, d in dims.items()))
        if key not in self._programs:
            self._programs[key] = self._compile(dims)
        return self._programs[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) and len(self.input_names) == 1:
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        program = self._program_for(feeds)
        specs = program.get_parameter_shapes()
        for name, value in list(feeds.items()):
            spec = specs.get(name)
            if isinstance(spec, Shape) and not isinstance(value, (np.ndarray, list)) and value is not None:
                feeds[name] = np.asarray(value, dtype=spec.dtype.np)  # numpy scalars -> 0-d arrays
        return tuple(program.run(feeds))


class FusegraphBackend(Backend):
    target: str | None = None  # force one target (tests of a specific target set this)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> FusegraphRep:
        return FusegraphRep(model, cls.target or target_for_device(device))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            target_for_device(device)
            return True
        except TargetError:
            return False


def _has_symbolic_dims(model: onnx.ModelProto, inits: set[str]) -> bool:
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            return True
    return False


prepare = FusegraphBackend.prepare
run_model = FusegraphBackend.run_model
supports_device = FusegraphBackend.supports_device

__all__ = ["FusegraphBackend", "prepare", "run_model", "supports_device"]
