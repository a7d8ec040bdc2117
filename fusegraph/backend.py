"""An `onnx.backend.base.Backend` over fusegraph, so the ONNX conformance suite and other tools can drive it.

Device "CPU" runs the `cpu` target when it is available and `ref` otherwise; "CUDA" runs `gpu`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .errors import TargetError, ValueDependentError
from .ir.shape import Shape
from .onnx import parse_onnx
from .onnx.converters.shape_values import MAX_ELEMENTS
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
    """A prepared model. Models with symbolic input dims are compiled per concrete input shapes; models
    whose shapes, ranks or branches depend on input values (ValueDependentError) per the values of
    their shape-like inputs (see `_shape_like`), as TensorRT fixes shape tensors."""

    def __init__(self, model: onnx.ModelProto, target: str):
        self.model = model
        self.target = target
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self._programs: dict[tuple, Any] = {}
        self._by_value = False  # compiled per the values of the shape-like inputs
        if not _has_symbolic_dims(model, inits):
            try:
                self._programs[()] = self._compile({}, {})
            except ValueDependentError:
                self._by_value = True

    def _compile(self, input_dims: dict[str, list[int]], input_values: dict[str, np.ndarray]):
        program = parse_onnx(self.model, map_input_dims=input_dims, map_input_values=input_values)
        return program.compile(get_target(self.target))

    def _program_for(self, feeds: dict[str, Any]):
        """The program for these feeds, and the names of the feeds it was compiled for (not inputs)."""
        if () in self._programs:
            return self._programs[()], ()
        dims = {n: list(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray) or np.isscalar(v)}
        values = {n: np.asarray(v) for n, v in feeds.items() if self._by_value and _shape_like(v)}
        key = (tuple(sorted((n, tuple(d)) for n, d in dims.items())),
               tuple(sorted((n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items())))
        if key not in self._programs:
            try:
                self._programs[key] = self._compile(dims, values)
            except ValueDependentError:
                if self._by_value:
                    raise
                self._by_value = True
                return self._program_for(feeds)
        return self._programs[key], tuple(values)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) and len(self.input_names) == 1:
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        program, fixed = self._program_for(feeds)
        for name in fixed:  # compiled in as constants
            del feeds[name]
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


def _shape_like(value: Any) -> bool:
    """Whether an input value may be a shape operand (TensorRT's shape tensors): a short integer or
    bool vector or scalar, as reshape targets, sizes, axes and conditions are."""
    a = np.asarray(value) if isinstance(value, np.ndarray) or np.isscalar(value) else None
    return a is not None and a.ndim <= 1 and a.size <= MAX_ELEMENTS and a.dtype.kind in "biu"


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
