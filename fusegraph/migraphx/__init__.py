"""MIGraphX's Python API over fusegraph: `import fusegraph.migraphx as migraphx` runs MIGraphX
scripts unchanged.

    import fusegraph.migraphx as migraphx
    p = migraphx.parse_onnx("resnet50.onnx", map_input_dims={"input": [1, 3, 224, 224]})
    p.compile(migraphx.get_target("gpu"))
    out = p.run({"input": migraphx.argument(x)})[0]
    probs = np.array(out)

docs/migraphx.md lists every covered name and what differs; names that do not map raise
fusegraph.errors.NotSupportedError naming the nearest fusegraph equivalent (unsupported.py).
"""

from __future__ import annotations

from .argument import argument, create_argument, fill_argument, generate_argument
from .files import load, save
from .module import instruction_ref, module
from .ops import op
from .parse import get_onnx_operators, parse_onnx, parse_onnx_buffer
from .program import program
from .quantize import quantize_bf16, quantize_fp8, quantize_fp16, quantize_int8
from .shape import shape
from .target import get_target, target
from .unsupported import NOT_SUPPORTED, not_supported

__version__ = "fusegraph-compat"

__all__ = [
    "argument", "create_argument", "fill_argument", "generate_argument", "get_onnx_operators", "get_target",
    "instruction_ref", "load", "module", "op", "parse_onnx", "parse_onnx_buffer", "program", "quantize_bf16",
    "quantize_fp8", "quantize_fp16", "quantize_int8", "save", "shape", "target",
]


def __getattr__(name: str):
    if name in NOT_SUPPORTED:
        raise not_supported(name)
    raise AttributeError(f"module 'fusegraph.migraphx' has no attribute {name!r}")
