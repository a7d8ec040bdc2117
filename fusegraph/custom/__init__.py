"""User-defined operators: `custom_op` defines one (its ONNX domain and name, typed attributes, a
shape rule, a numpy reference, optional kernels per target); it then parses from ONNX, runs on
every target, is profiled, saved in and loaded from .fgx files (by name, domain and version: never
its code) and verified against its reference. See docs/custom-ops.md."""

from .attrs import Attr, CustomOpAttributeError
from .definition import CustomOp, CustomOpDef, custom_op, custom_ops
from .kernels import CKernel, TorchKernel, TritonKernel
from .warnings import CustomOpFallbackWarning

__all__ = ["Attr", "CKernel", "CustomOp", "CustomOpAttributeError", "CustomOpDef", "CustomOpFallbackWarning",
           "TorchKernel", "TritonKernel", "custom_op", "custom_ops"]
