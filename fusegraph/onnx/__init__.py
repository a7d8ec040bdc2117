"""The ONNX frontend: `parse_onnx` turns a model into a Program; ONNX quirks end here."""

from .loading import load_model
from .parser import parse_onnx
from .registry import converter, supported_ops

__all__ = ["converter", "load_model", "parse_onnx", "supported_ops"]
