"""migraphx.save / load: .fgx files whatever the format name, readable by fusegraph.load too."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
import fusegraph.migraphx as migraphx
from fusegraph.errors import ArgumentError, CompiledFileError, CompileError

from .models import dense, dense_reference


def _compiled() -> migraphx.program:
    p = migraphx.parse_onnx_buffer(dense().SerializeToString(), default_dim_value=2)
    p.compile(migraphx.get_target("ref"))
    return p


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_save_load_round_trip(tmp_path, fmt):
    path = tmp_path / "dense.mxr"
    migraphx.save(_compiled(), str(path), format=fmt)
    q = migraphx.load(str(path), format=fmt)
    assert q.is_compiled() and q.get_parameter_shapes()["x"].lens() == [2, 4]
    x = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
    np.testing.assert_allclose(np.array(q.run({"x": x})[0]), dense_reference(x), rtol=1e-6)
    assert fusegraph.load(path).run({"x": x})[0].shape == (2, 3)  # the file is an .fgx file


def test_format_and_state_errors(tmp_path):
    with pytest.raises(ArgumentError, match="'protobuf'"):
        migraphx.save(_compiled(), str(tmp_path / "a"), format="protobuf")
    with pytest.raises(ArgumentError, match="'yaml'"):
        migraphx.load(str(tmp_path / "a"), format="yaml")
    with pytest.raises(CompileError, match="not compiled"):
        migraphx.save(migraphx.parse_onnx_buffer(dense().SerializeToString()), str(tmp_path / "b"))
    (tmp_path / "c.mxr").write_bytes(b"\x82\xa7program\x00 not an fgx file")
    with pytest.raises(CompiledFileError):
        migraphx.load(str(tmp_path / "c.mxr"))
