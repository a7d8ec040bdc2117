"""Every exception fusegraph raises on purpose. Each names the culprit: the op, the node, the input."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

_F = TypeVar("_F", bound=Callable)


class FusegraphError(Exception):
    """Base of all fusegraph errors; the CLI prints these as one line and exits 2."""


class ModelLoadError(FusegraphError):
    """The model file or bytes could not be read as an ONNX model (missing, malformed, truncated)."""


class UnsupportedOpError(FusegraphError):
    """The model uses an operator (or an opset of one) that fusegraph cannot convert, or one that needs
    an optional dependency this machine lacks (`reason` says which)."""

    def __init__(self, op_type: str, domain: str = "", opset: int | None = None, node: str = "",
                 reason: str = ""):
        self.op_type, self.domain, self.opset, self.node, self.reason = op_type, domain, opset, node, reason
        where = f" (node {node!r})" if node else ""
        dom = f"{domain}." if domain and domain != "ai.onnx" else ""
        ver = f" at opset {opset}" if opset is not None else ""
        why = f": {reason}" if reason else ""
        super().__init__(f"unsupported operator {dom}{op_type}{ver}{where}{why}")


class ParseError(FusegraphError):
    """A node is valid ONNX in form but its attributes or inputs cannot be honoured."""


class ValueDependentError(ParseError):
    """A shape, a rank or a branch depends on values known only at run time, which a ranked IR cannot
    hold (Squeeze without axes of a dynamic dim, an If whose branches give different ranks, a shape
    operand computed from an input). Fixing the inputs those values come from while parsing
    (`parse_onnx(..., map_input_values=...)`, as TensorRT fixes shape tensors) resolves it; the onnx
    backend does that by itself."""


class ShapeError(FusegraphError):
    """Shape or type inference failed for an op: names the op/node and the shapes involved."""


class IRError(FusegraphError):
    """The IR is malformed (failed verify(), or its text form could not be parsed)."""


class InputError(FusegraphError):
    """A run was given a missing, unknown, wrong-shape or wrong-dtype input."""


class CalibrationError(InputError):
    """Calibration data for a quantizer is unusable: an empty or malformed folder, a file that is not
    a .npy/.npz array, an input name the model lacks, a missing input, or a wrong shape or dtype."""


class ResourceError(FusegraphError):
    """A size beyond what fusegraph or this machine can hold: a dim or element count past the kernels'
    index types, a tensor or a compile's peak memory past `CompileOptions.max_memory`. Names the size
    and the culprit (the instruction, the ONNX node)."""


class ExecutionError(FusegraphError):
    """A run failed on the values it was given or could not complete as asked: an index out of range,
    an op's reference failing on actual data, a Loop past `max_loop_iterations`, control flow nested
    too deep. Names the op or instruction and the input."""


class DeadlineExceeded(ExecutionError):
    """A run passed its `deadline` (seconds); checked between steps, so it stops within one step."""


class CompileError(FusegraphError):
    """A program could not be compiled for a target (e.g. an op with no lowering)."""


class TargetError(FusegraphError):
    """An unknown target, or a target whose dependencies are missing on this machine."""


class CompiledFileError(FusegraphError):
    """A compiled-program file (.fgx) is damaged, truncated, foreign, of a newer format version, or fails
    its signature check; the message says which part and why."""


class CustomOpError(FusegraphError):
    """A custom op (fusegraph.custom_op) that a compiled file needs is not registered in this process,
    or is registered at another version: names the op, its domain and the version the file wants."""


class ArgumentError(FusegraphError, ValueError):
    """A public function was called with an argument it does not accept (an unknown mode, a bad type)."""


class NotSupportedError(FusegraphError):
    """A name of another engine's API (fusegraph.migraphx mirrors MIGraphX's) that fusegraph does not
    provide; the message names it and the nearest fusegraph equivalent."""


class FileAccessError(FusegraphError):
    """A file could not be read or written (missing, a directory, no permission, disk full)."""


class InternalError(FusegraphError):
    """A bug in fusegraph: an exception no check anticipated. The original is its `__cause__`; the CLI
    exits 3 on it."""


class UnknownModelError(FusegraphError, KeyError):
    """A name that is neither a file nor a built-in model."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


def api_boundary(fn: _F) -> _F:
    """Make `fn` a public entry point: every exception that leaves it is a FusegraphError.

    Typed errors pass unchanged; an OSError becomes a FileAccessError; anything else is a bug in
    fusegraph and becomes an InternalError naming the entry point, with the original as `__cause__`.
    KeyboardInterrupt and SystemExit are not Exceptions and pass through."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FusegraphError:
            raise
        except OSError as e:
            where = f": {e.filename}" if e.filename is not None else ""
            raise FileAccessError(f"{e.strerror or e}{where}") from e
        except Exception as e:
            raise InternalError(f"{fn.__qualname__}: {type(e).__name__}: {e}") from e

    return entry  # type: ignore[return-value]
