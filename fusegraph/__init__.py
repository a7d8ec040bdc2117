"""fusegraph: an inference compiler and runtime. ONNX in, a fast compiled program out.

    import fusegraph
    p = fusegraph.parse_onnx("model.onnx")
    p.compile(fusegraph.get_target("ref"))
    outputs = p.run({"input": x})
"""

from . import ops as _ops  # noqa: F401  (registers every op)
from .errors import FusegraphError
from .ir import DType, Dim, Program, Shape
from .onnx import parse_onnx
from .targets import CompileOptions, get_target

__version__ = "0.1.0"

__all__ = ["CompileOptions", "DType", "Dim", "FusegraphError", "Program", "Shape", "get_target", "parse_onnx"]
