"""migraphx.parse_onnx / parse_onnx_buffer options and migraphx.program's methods."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph.migraphx as migraphx
from fusegraph.errors import (
    ArgumentError,
    CompileError,
    InputError,
    ModelLoadError,
    NotSupportedError,
    TargetError,
    UnsupportedOpError,
)

from .models import dense, dense_reference

dd = migraphx.shape.dynamic_dimension


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "dense.onnx"
    onnx.save(dense(), path)
    return str(path)


def _x(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 4), dtype=np.float32)


def test_parse_compile_run(model_path):
    p = migraphx.parse_onnx(model_path, default_dim_value=3)
    assert p.get_parameter_names() == ["x"]
    assert p.get_parameter_shapes()["x"].lens() == [3, 4]
    assert [s.lens() for s in p.get_output_shapes()] == [[3, 3]]
    assert not p.is_compiled()
    p.compile(migraphx.get_target("ref"), offload_copy=True, fast_math=True, exhaustive_tune=False)
    assert p.is_compiled()
    (out,) = p.run({"x": migraphx.argument(_x(3))})
    assert isinstance(out, migraphx.argument)
    np.testing.assert_allclose(np.array(out), dense_reference(_x(3)), rtol=1e-6)
    (raw,) = p.run({"x": _x(3)})  # any buffer, as MIGraphX's run takes
    assert raw == out


def test_symbolic_dims_default_to_one_and_map_input_dims_fixes_them(model_path):
    assert migraphx.parse_onnx(model_path).get_parameter_shapes()["x"].lens() == [1, 4]
    p = migraphx.parse_onnx(model_path, map_input_dims={"x": [5, 4]})
    assert p.get_parameter_shapes()["x"].lens() == [5, 4]


@pytest.mark.parametrize("how", ["map_dyn_input_dims", "default_dyn_dim_value"])
def test_dynamic_batch(model_path, how):
    kwargs = ({"map_dyn_input_dims": {"x": [dd(1, 6, {2}), dd(4, 4)]}} if how == "map_dyn_input_dims"
              else {"default_dyn_dim_value": dd(1, 6, {2})})
    p = migraphx.parse_onnx(model_path, **kwargs)
    s = p.get_parameter_shapes()["x"]
    assert s.dynamic() and (s.dyn_dims()[0].min, s.dyn_dims()[0].max) == (1, 6) and s.dyn_dims()[1].is_fixed()
    p.compile(migraphx.get_target("ref"))
    for n in (1, 4, 6):
        np.testing.assert_allclose(np.array(p.run({"x": _x(n)})[0]), dense_reference(_x(n)), rtol=1e-6)
    with pytest.raises(InputError):
        p.run({"x": _x(7)})


def test_parse_onnx_buffer_and_external_data(tmp_path):
    folder = tmp_path / "ext"
    folder.mkdir()
    onnx.save(dense(), folder / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    data = (folder / "m.onnx").read_bytes()
    with pytest.raises(ModelLoadError):
        migraphx.parse_onnx_buffer(data)  # a buffer reads no file unless told where
    p = migraphx.parse_onnx_buffer(data, external_data_path=str(folder), map_input_dims={"x": [2, 4]})
    p.compile(migraphx.get_target("ref"))
    np.testing.assert_allclose(np.array(p.run({"x": _x(2)})[0]), dense_reference(_x(2)), rtol=1e-6)
    with pytest.raises(ArgumentError, match="'rb'"):
        migraphx.parse_onnx_buffer(data.decode("latin-1"))


def test_skip_unknown_operators_and_print_program_on_error(tmp_path, capsys):
    path = tmp_path / "custom.onnx"
    onnx.save(dense(helper.make_node("Frobnicate", ["y"], ["z"], name="frob", domain="custom")), path)
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        migraphx.parse_onnx(str(path), print_program_on_error=True)
    assert "Frobnicate" in capsys.readouterr().err
    p = migraphx.parse_onnx(str(path), skip_unknown_operators=True)
    assert "unknown" in str(p)


def test_max_loop_iterations_becomes_the_run_limit(model_path):
    p = migraphx.parse_onnx(model_path, max_loop_iterations=5)
    p.compile(migraphx.get_target("ref"))
    assert p.fusegraph_program.executable.options.max_loop_iterations == 5


def test_compile_options_and_errors(model_path):
    p = migraphx.parse_onnx(model_path)
    with pytest.raises(ArgumentError, match="get_target"):
        p.compile("ref")
    p.compile(migraphx.get_target("ref"), offload_copy=False)  # host memory is the ref target's
    with pytest.raises(CompileError, match="already compiled"):
        p.compile(migraphx.get_target("ref"))
    with pytest.raises(NotSupportedError, match="device_resident"):
        migraphx.parse_onnx(model_path).compile(migraphx.get_target("gpu"), offload_copy=False)


def test_run_async_without_a_stream_is_run(model_path):
    p = migraphx.parse_onnx(model_path)
    p.compile(migraphx.get_target("ref"))
    assert p.run_async({"x": _x(1)}, 0, "ihipStream_t") == p.run({"x": _x(1)})
    with pytest.raises(ArgumentError, match="stream handle"):
        p.run_async({"x": _x(1)}, "stream")


def test_text_equality_clone_sort_print(model_path, capsys):
    a, b = migraphx.parse_onnx(model_path), migraphx.parse_onnx(model_path)
    assert a == b and str(a) == str(b) and "dot" in str(a)
    assert a != migraphx.parse_onnx(model_path, default_dim_value=2)
    c = a.clone()
    assert c == a and c.fusegraph_program is not a.fusegraph_program
    a.sort()
    a.print()
    assert capsys.readouterr().out.strip() == str(a).strip()
    a.compile(migraphx.get_target("ref"))
    d = a.clone()
    assert d.is_compiled()
    assert d.run({"x": _x(1)}) == a.run({"x": _x(1)})


def test_programs_differing_in_one_weight_are_not_equal():
    m = dense()
    w = onnx.numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[-1, -1] += 1
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "W"))
    a, b = migraphx.parse_onnx_buffer(dense().SerializeToString()), migraphx.parse_onnx_buffer(m.SerializeToString())
    assert a != b and a == migraphx.parse_onnx_buffer(dense().SerializeToString())


def test_get_target_names():
    assert migraphx.get_target("ref").name() == "ref"
    with pytest.raises(TargetError, match="'gpu'"):
        migraphx.get_target("hip")
    with pytest.raises(NotSupportedError, match="FPGA"):
        migraphx.get_target("fpga")
    with pytest.raises(TargetError, match="unknown target"):
        migraphx.get_target("tpu")


def test_get_onnx_operators():
    ops = migraphx.get_onnx_operators()
    assert {"Conv", "MatMul", "Relu", "Loop", "NonMaxSuppression"} <= set(ops) and ops == sorted(ops)
    assert "Frobnicate" not in ops


@pytest.mark.gpu
def test_run_async_on_a_cuda_stream(model_path):
    import torch

    p = migraphx.parse_onnx(model_path, default_dim_value=4)
    p.compile(migraphx.get_target("gpu"))
    stream = torch.cuda.Stream()
    got = p.run_async({"x": _x(4)}, stream.cuda_stream, "cudaStream_t")
    np.testing.assert_allclose(np.array(got[0]), dense_reference(_x(4)), rtol=1e-5, atol=1e-6)
    assert got[0].get_shape().type_string() == "float_type"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "bool"])
def test_device_outputs_come_back_bit_exact(dtype):
    """run_async's device-to-host copy (on CPU torch tensors here): bf16 goes through its bits."""
    torch = pytest.importorskip("torch")
    from fusegraph.ir import DType
    from fusegraph.migraphx.program import _to_host

    dt = DType(dtype)
    values = (np.arange(-3, 3) * 1.5).astype(dt.np)
    t = torch.from_numpy(values.view(np.int16)).view(torch.bfloat16) if dtype == "bfloat16" else torch.from_numpy(values)
    back = _to_host(t, dt)
    assert back.dtype == dt.np and back.tobytes() == values.tobytes()
