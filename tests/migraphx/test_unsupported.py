"""MIGraphX names fusegraph does not provide raise NotSupportedError naming the nearest equivalent;
every name MIGraphX's binding defines is either provided or listed as not supported."""

from __future__ import annotations

import pytest

import fusegraph.migraphx as migraphx
from fusegraph.errors import FusegraphError, NotSupportedError
from fusegraph.migraphx.unsupported import NOT_SUPPORTED

# the module-level names of MIGraphX's Python binding (src/py/migraphx_py.cpp)
MIGRAPHX_NAMES = [
    "shape", "argument", "target", "instruction_ref", "module", "program", "op", "argument_from_pointer",
    "parse_tf", "parse_onnx", "parse_onnx_buffer", "load", "save", "get_target", "create_argument",
    "generate_argument", "fill_argument", "quantize_fp16", "quantize_bf16", "quantize_int8", "quantize_fp8",
    "autocast_fp8", "get_onnx_operators", "allocate_gpu", "to_gpu", "from_gpu", "gpu_sync",
]


@pytest.mark.parametrize("name", MIGRAPHX_NAMES)
def test_every_migraphx_name_is_provided_or_refused(name):
    if name in NOT_SUPPORTED:
        with pytest.raises(NotSupportedError, match=f"migraphx.{name} is not supported.*nearest: "):
            getattr(migraphx, name)
    else:
        assert callable(getattr(migraphx, name))


def test_not_supported_is_a_fusegraph_error_and_typos_stay_attribute_errors():
    assert issubclass(NotSupportedError, FusegraphError)
    with pytest.raises(AttributeError):
        migraphx.parse_onxx  # noqa: B018


def test_argument_files_are_refused_with_numpy_named():
    with pytest.raises(NotSupportedError, match="numpy.save"):
        migraphx.argument.save(migraphx.argument([1.0]), "a.msgpack")
    with pytest.raises(NotSupportedError, match="numpy.load"):
        migraphx.argument.load("a.msgpack")
