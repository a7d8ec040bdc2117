"""The CLI's --dyn-input-dim: parsing the ranges, and compile / run / verify / perf of a dynamic program."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusegraph.driver import cli
from fusegraph.driver.common import parse_dyn_dim_specs
from fusegraph.errors import InputError
from fusegraph.ir import Dim

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    """y = relu(x @ w), x of shape [batch, 4]."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
                              [numpy_helper.from_array(W, "w")])
    path = tmp_path_factory.mktemp("models") / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_parse_ranges_fixed_dims_and_optimals():
    assert parse_dyn_dim_specs(["x=[1..32],3,[224..640:320],[224..640]"]) == {
        "x": [Dim(1, 32), Dim(3, 3), Dim(224, 640, (320,)), Dim(224, 640)]}
    assert parse_dyn_dim_specs(["ids=[1..8:1,4],[8..384]"]) == {"ids": [Dim(1, 8, (1, 4)), Dim(8, 384)]}


@pytest.mark.parametrize("spec", ["x", "x=", "=1", "x=[1..]", "x=[4..2]", "x=[1..4:9]", "x=a,3", "x=-1"])
def test_bad_specs_are_input_errors(spec):
    with pytest.raises(InputError, match="--dyn-input-dim"):
        parse_dyn_dim_specs([spec])


def test_run_takes_the_max_shape_unless_input_dim_picks_one(matmul, tmp_path):
    out, y = tmp_path, tmp_path / "y.npy"
    assert cli.main(["run", str(matmul), "--dyn-input-dim", "x=[1..16],4", "--fill", "1", "--output", str(out)]) == 0
    np.testing.assert_allclose(np.load(y), np.maximum(np.ones((16, 4), np.float32) @ W, 0), rtol=1e-6)
    assert cli.main(["run", str(matmul), "--dyn-input-dim", "x=[1..16:5],4", "--fill", "1", "--output", str(out)]) == 0
    assert np.load(y).shape == (5, 3)
    assert cli.main(["run", str(matmul), "--dyn-input-dim", "x=[1..16],4", "--input-dim", "x=7,4",
                     "--fill", "1", "--output", str(out)]) == 0
    assert np.load(y).shape == (7, 3)


def test_a_compiled_dynamic_file_runs_any_shape_in_range(matmul, tmp_path, capsys):
    fgx = tmp_path / "mm.fgx"
    assert cli.main(["compile", str(matmul), "--dyn-input-dim", "x=[1..16],4", "-o", str(fgx)]) == 0
    for batch in (2, 16):
        assert cli.main(["verify", str(fgx), "--input-dim", f"x={batch},4"]) == 0
    assert cli.main(["run", str(fgx), "--input-dim", "x=17,4"]) != 0
    assert "dim 0 is 17, outside its range [1..16]" in capsys.readouterr().err


def test_verify_and_perf_of_a_dynamic_model(matmul):
    assert cli.main(["verify", str(matmul), "--dyn-input-dim", "x=[1..16],4", "--input-dim", "x=3,4"]) == 0
    assert cli.main(["perf", str(matmul), "--dyn-input-dim", "x=[1..16],4", "-n", "2"]) == 0


def test_an_unknown_dynamic_input_is_refused(matmul, capsys):
    assert cli.main(["run", str(matmul), "--dyn-input-dim", "nope=[1..4],4"]) != 0
    assert "nope" in capsys.readouterr().err
