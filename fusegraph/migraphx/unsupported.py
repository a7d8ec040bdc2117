"""MIGraphX names fusegraph does not provide, each with the nearest fusegraph way to do the same.

`import fusegraph.migraphx as migraphx; migraphx.to_gpu(...)` raises NotSupportedError saying so,
rather than an AttributeError that reads like a typo.
"""

from __future__ import annotations

from ..errors import NotSupportedError

NOT_SUPPORTED = {
    "parse_tf": "fusegraph reads ONNX only: convert the TensorFlow model with tf2onnx, then parse_onnx",
    "parse_mlir": "fusegraph reads ONNX only: parse_onnx",
    "allocate_gpu": "compile(get_target('gpu')) with offload_copy=True copies host arguments in and out; "
                    "for device buffers use the gpu executable's run_device(torch tensors)",
    "to_gpu": "pass host arguments: the gpu target copies them in (offload_copy=True)",
    "from_gpu": "run() returns host arguments (offload_copy=True)",
    "gpu_sync": "run() returns once its outputs are on the host",
    "argument_from_pointer": "argument(numpy_array), or numpy.ctypeslib.as_array over the pointer yourself",
    "autocast_fp8": "quantize_fp8(prog, t, calibration) keeps float32 inputs and outputs already",
    "apply_onnx_optimizations": "fusegraph's passes run in program.compile()",
}


def not_supported(name: str) -> NotSupportedError:
    return NotSupportedError(f"migraphx.{name} is not supported by fusegraph.migraphx; nearest: {NOT_SUPPORTED[name]}")
