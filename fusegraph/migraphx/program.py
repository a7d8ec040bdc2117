"""`migraphx.program`: a fusegraph Program with MIGraphX's methods.

compile() maps MIGraphX's options onto CompileOptions: `exhaustive_tune` is fusegraph's;
`offload_copy=True` is what fusegraph always does (host arrays in, host arrays out); with False,
the ref and cpu targets are unaffected (host memory is theirs, as on MIGraphX) and the gpu target
refuses it (device buffers go through the executable's `run_device`); `fast_math` is accepted and
changes nothing: fusegraph has no approximate math functions. The IR is always in topological
order, so sort() only verifies it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentError, CompileError, NotSupportedError, api_boundary
from ..ir.program import Program
from ..ir.run_limits import running
from .argument import _as_array, argument
from .module import module
from .shape import shape
from .target import target


class program:  # noqa: N801  (MIGraphX's name)
    """A program to compile and run; program() is an empty one to build (get_main_module())."""

    def __init__(self, fusegraph_program: Program | None = None, *, max_loop_iterations: int | None = None):
        self.fusegraph_program = fusegraph_program if fusegraph_program is not None else Program()
        self._max_loop_iterations = max_loop_iterations

    # -- shapes -----------------------------------------------------------------------------------
    def get_parameter_names(self) -> list[str]:
        return self.fusegraph_program.get_parameter_names()

    def get_parameter_shapes(self) -> dict[str, shape]:
        return {k: shape.wrap(s) for k, s in self.fusegraph_program.get_parameter_shapes().items()}

    def get_output_shapes(self) -> list[shape]:
        return [shape.wrap(s) for s in self.fusegraph_program.get_output_shapes()]

    # -- modules ----------------------------------------------------------------------------------
    def get_main_module(self) -> module:
        return module(self.fusegraph_program.main)

    def create_module(self, name: str) -> module:
        return module(self.fusegraph_program.create_module(name))

    # -- compile ----------------------------------------------------------------------------------
    def is_compiled(self) -> bool:
        return self.fusegraph_program.is_compiled

    def compile(self, t: target, offload_copy: bool = True, fast_math: bool = True,
                exhaustive_tune: bool = False) -> None:
        from ..targets import CompileOptions

        if not isinstance(t, target):
            raise ArgumentError(f"program.compile: expected a migraphx.target (get_target(name)), got {t!r}")
        if not offload_copy and t.name() == "gpu":
            raise NotSupportedError("program.compile(offload_copy=False) on the gpu target: fusegraph copies host "
                                    "inputs in and outputs out; for device buffers compile with "
                                    "fusegraph.CompileOptions(device_resident=True) and call the executable's "
                                    "run_device(torch tensors)")
        if self.is_compiled():
            raise CompileError("program.compile: the program is already compiled (parse or load it again)")
        extra = {} if self._max_loop_iterations is None else {"max_loop_iterations": self._max_loop_iterations}
        options = CompileOptions(exhaustive_tune=bool(exhaustive_tune), **extra)
        self.fusegraph_program.compile(t.fusegraph_target, options)

    # -- run --------------------------------------------------------------------------------------
    def run(self, params: Mapping[str, Any]) -> list[argument]:
        """Run on `params` (name -> argument or any buffer); the outputs, in order, as arguments."""
        outs = self.fusegraph_program.run(_feeds(params))
        return [argument(o) for o in outs]

    @api_boundary
    def run_async(self, params: Mapping[str, Any], stream: int = 0, stream_name: str = "ihipStream_t") -> list[argument]:
        """`run`, its device work ordered on `stream` (a HIP/CUDA stream handle, as an int) on the gpu
        target. It returns once the outputs are on the host, so it is synchronous for the caller. Where
        there is no stream (stream 0, the ref and cpu targets) it is `run`. `stream_name` (MIGraphX
        checks the handle's type by it) is not needed: torch takes the handle as it is."""
        if not isinstance(stream, int):
            raise ArgumentError(f"program.run_async: stream must be a stream handle (an int), got {stream!r}")
        exe = self.fusegraph_program.executable
        if stream == 0 or self.fusegraph_program.target_name != "gpu" or not hasattr(exe, "run_device"):
            return self.run(params)
        import torch

        ext = torch.cuda.ExternalStream(stream)
        with running(None, exe.options.max_loop_iterations):  # the limits Executable.run keeps
            outs = exe.run_device(_feeds(params), stream=ext, copy_outputs=True)
        ext.synchronize()
        dtypes = [s.dtype for s in self.fusegraph_program.get_output_shapes()]
        return [argument(_to_host(o, dt)) for o, dt in zip(outs, dtypes)]

    # -- text and comparison ----------------------------------------------------------------------
    def sort(self) -> None:
        self.fusegraph_program.verify()

    def print(self) -> None:  # noqa: A003  (MIGraphX's name)
        print(self)

    def __str__(self) -> str:
        return str(self.fusegraph_program)

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        # MIGraphX compares printed programs; fusegraph's text shows large literals by their hash
        return isinstance(other, program) and str(self) == str(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def clone(self) -> program:
        p = self.fusegraph_program
        if p.is_compiled:  # an executable holds device memory and compiled code: copy through its file
            from .. import load_buffer, save_buffer

            return program(load_buffer(save_buffer(p)), max_loop_iterations=self._max_loop_iterations)
        return program(copy.deepcopy(p), max_loop_iterations=self._max_loop_iterations)


def _feeds(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if not isinstance(params, Mapping):
        raise ArgumentError(f"program.run: params must be a dict of name -> argument, got {type(params).__name__}")
    return {k: _as_array(v) for k, v in params.items()}


def _to_host(t: Any, dt: Any) -> np.ndarray:
    """A device tensor as a numpy array of fusegraph dtype `dt` (bit-copied: numpy lacks bf16/fp8)."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    host = t.detach().contiguous().cpu()
    if dt.np.type.__module__ == "numpy":  # bool, ints, float16/32/64: torch has them too
        return host.numpy()
    return host.view(ints[dt.itemsize]).numpy().view(dt.np)
