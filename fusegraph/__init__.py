"""fusegraph: an inference compiler and runtime. ONNX in, a fast compiled program out.

    import fusegraph
    p = fusegraph.parse_onnx("model.onnx")
    p.compile(fusegraph.get_target("ref"))
    outputs = p.run({"input": x})
    fusegraph.save(p, "model.fgx")       # later, elsewhere: fusegraph.load("model.fgx").run(...)
"""

from . import ops as _ops  # noqa: F401  (registers every op)
from .custom import custom_op
from .errors import FusegraphError, api_boundary
from .ir import Dim, DType, Program, Shape
from .onnx import parse_onnx
from .pipeline import Pipeline, Stage, StageError
from .sparsity import is_2_4, make_sparse, prune_2_4
from .targets import CompileOptions, get_target

__version__ = "0.1.0"


# Compiled files (.fgx). Thin wrappers so that `import fusegraph` does not import the runtime's file code.
@api_boundary
def quantize_fp16(program, keep_fp32=None):
    """Convert `program` in place to float16 compute (reductions, softmax and layer norm accumulate in
    float32; inputs and outputs stay float32). See fusegraph/quantize/fp16.py."""
    from .quantize import fp16

    return fp16.quantize_fp16(program, fp16.DEFAULT_KEEP_FP32 if keep_fp32 is None else keep_fp32)


@api_boundary
def quantize_bf16(program, keep_fp32=None):
    """As `quantize_fp16`, with bfloat16."""
    from .quantize import fp16

    return fp16.quantize_bf16(program, fp16.DEFAULT_KEEP_FP32 if keep_fp32 is None else keep_fp32)


@api_boundary
def quantize_int8(program, calibration, method="minmax", **options):
    """Quantize `program` in place to int8 (Q/DQ around conv and dot) with ranges calibrated on
    `calibration` (input dicts, or a folder of .npy / .npz); options: per_channel, symmetric,
    quantize_ops, skip_ops, skip_names, percentile, num_bins, ... See fusegraph/quantize/int8.py."""
    from .quantize import int8

    _check_options(int8.quantize_int8, options)
    return int8.quantize_int8(program, calibration, method, **options)


@api_boundary
def quantize_fp8(program, calibration, method="minmax", **options):
    """As `quantize_int8`, to float8 e4m3fn scales and values. See fusegraph/quantize/int8.py."""
    from .quantize import int8

    _check_options(int8.quantize_fp8, options)
    return int8.quantize_fp8(program, calibration, method, **options)


def _check_options(fn, options) -> None:
    import inspect

    from .errors import ArgumentError

    unknown = sorted(set(options) - set(inspect.signature(fn).parameters))
    if unknown:
        raise ArgumentError(f"{fn.__name__}: no option {', '.join(map(repr, unknown))}")


@api_boundary
def save(program, path, *, sign_key=None) -> None:
    """Write a compiled program to an .fgx file (signed with `sign_key` or $FUSEGRAPH_SIGN_KEY if set)."""
    from .runtime.serialize import save

    save(program, path, sign_key=sign_key)


@api_boundary
def load(path, *, verify_key=None, integrity="lazy") -> Program:
    """Read a compiled program from an .fgx file, ready to run, without recompiling it."""
    from .runtime.serialize import load

    return load(path, verify_key=verify_key, integrity=integrity)


@api_boundary
def save_buffer(program, *, sign_key=None) -> bytes:
    from .runtime.serialize import save_buffer

    return save_buffer(program, sign_key=sign_key)


@api_boundary
def load_buffer(data, *, verify_key=None, integrity="lazy") -> Program:
    from .runtime.serialize import load_buffer

    return load_buffer(data, verify_key=verify_key, integrity=integrity)


__all__ = [
    "CompileOptions", "DType", "Dim", "FusegraphError", "Pipeline", "Program", "Shape", "Stage", "StageError",
    "custom_op", "get_target", "is_2_4", "load", "load_buffer", "make_sparse", "parse_onnx", "prune_2_4",
    "quantize_bf16", "quantize_fp16", "quantize_fp8", "quantize_int8", "save", "save_buffer",
]
