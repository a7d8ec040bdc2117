"""The stages of a Pipeline: what each is given and what it hands on.

A stage is a compiled Program or a host callable (or either wrapped in `Stage` to name it or, for a
callable, to be given the request too). Each stage gets what the stage before gave (the first one,
the request):

* a Program takes a dict (input name -> value), a list or tuple (one value per input, in the
  program's input order) or one value (a program of one input), and gives its outputs as a list,
  as `Program.run` does. On the gpu target it runs with `run_async` on its own CUDA stream: it
  hands on a DeviceFuture, and a next gpu stage queues its run after that future's event and reads
  its device outputs, so intermediates stay on the device and the host waits only where a host
  step (or the end) needs the values.
* a callable `fn(value)` (with `Stage(fn, request=True)`: `fn(value, request)`) gives whatever the
  next stage takes; it runs in Python, with the values on the host or the device as they came.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ArgumentError, InputError
from ..ir.program import Program


@dataclasses.dataclass
class Stage:
    fn: Program | Callable[..., Any]
    name: str = ""
    request: bool = False  # a callable is given the pipeline's request too: fn(value, request)

    def __post_init__(self) -> None:
        if isinstance(self.fn, Stage):
            raise ArgumentError("Stage(Stage(...)): wrap a program or a callable once")
        if isinstance(self.fn, Program):
            if not self.fn.is_compiled:
                raise ArgumentError(f"pipeline stage {self.name or '?'}: the program is not compiled")
            if self.request:
                raise ArgumentError(f"pipeline stage {self.name or '?'}: request=True is for callables")
        elif not callable(self.fn):
            raise ArgumentError(f"a pipeline stage is a compiled Program or a callable, not {type(self.fn).__name__}")
        self.name = self.name or _default_name(self.fn)

    @property
    def on_device(self) -> bool:
        return isinstance(self.fn, Program) and self.fn.target_name == "gpu"

    def __call__(self, carried: Carried, request: Any) -> Carried:
        fn = self.fn
        if not isinstance(fn, Program):
            value = carried.value()
            return Carried(fn(value, request) if self.request else fn(value))
        if self.on_device:
            # queued after the previous gpu stage's event, reading its device outputs (a run on
            # Triton's interpreter is done when it returns: its handle is a plain Future)
            pending = carried.pending
            chained = pending is not None and hasattr(pending, "device_outputs")
            value = pending.device_outputs if chained else carried.value()
            return Carried(pending=fn.run_async(self.inputs(value), after=[pending] if chained else []))
        return Carried(fn.run(self.inputs(carried.value())))

    def inputs(self, value: Any) -> Mapping[str, Any]:
        """`value` as the program's inputs by name."""
        names = self.fn.get_parameter_names()  # type: ignore[union-attr]
        if isinstance(value, Mapping):
            return value
        if isinstance(value, Sequence) and not isinstance(value, str):
            if len(value) != len(names):
                raise InputError(f"pipeline stage {self.name}: {len(value)} values for the program's "
                                 f"{len(names)} inputs {names}")
            return dict(zip(names, value))
        if len(names) != 1:
            raise InputError(f"pipeline stage {self.name}: one value for the program's {len(names)} inputs {names}")
        return {names[0]: value}


@dataclasses.dataclass
class Carried:
    """What passes between two stages: a value, or a gpu run still on its stream."""

    given: Any = None
    pending: Any = None  # a DeviceFuture

    def value(self) -> Any:
        """The value on the host side of Python: a pending gpu run's outputs once it is done."""
        return self.pending.result() if self.pending is not None else self.given


def as_stage(s: Any) -> Stage:
    return s if isinstance(s, Stage) else Stage(s)


def _default_name(fn: Any) -> str:
    if isinstance(fn, Program):
        return f"program({', '.join(fn.get_parameter_names())})"
    return getattr(fn, "__name__", type(fn).__name__)
