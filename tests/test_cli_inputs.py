"""What a new user meets first with an ONNX file of their own: symbolic dims that took the default 1
are named (and named again when they break a shape), and generated integer inputs stay inside the
tables they index, so `fusegraph run model.onnx` works with no --input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph import DType, Shape
from fusegraph.driver import cli
from fusegraph.driver.bounds import index_bounds
from fusegraph.driver.inputs import build_inputs

TABLE = np.arange(10, dtype=np.float32).reshape(5, 2)


def save(path: Path, nodes, inputs, inits) -> Path:
    graph = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture(scope="module")
def lookup(tmp_path_factory) -> Path:
    """y = table[unsqueeze(cast(idx))] + x, table of 5 rows: idx must stay below 5."""
    nodes = [helper.make_node("Cast", ["idx"], ["i32"], to=TensorProto.INT32),
             helper.make_node("Unsqueeze", ["i32", "ax"], ["u"]),
             helper.make_node("Gather", ["table", "u"], ["g"], axis=0),
             helper.make_node("Add", ["g", "x"], ["y"])]
    inputs = [helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, "width"])]
    return save(tmp_path_factory.mktemp("m") / "lookup.onnx", nodes, inputs,
                {"table": TABLE, "ax": np.array([1], np.int64)})


@pytest.mark.parametrize("command", ["run", "verify", "compile", "perf"])
def test_each_defaulted_dim_is_named_once_per_input(lookup, command, tmp_path, capsys):
    extra = {"compile": ["-o", str(tmp_path / "m.fgx")], "perf": ["-n", "1", "--warmup", "0"]}.get(command, [])
    assert cli.main([command, str(lookup), "--target", "ref", *extra]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: idx: dim 'n' set to 1; pass --input-dim idx=<n>",
                        "warning: x: dims 'n', 'width' set to 1; pass --input-dim x=<n>,1,<width>"]


def test_no_warning_for_dims_the_user_chose(lookup, capsys):
    assert cli.main(["run", str(lookup), "--target", "ref", "--input-dim", "idx=3",
                     "--input-dim", "x=3,1,2"]) == 0
    assert cli.main(["run", str(lookup), "--target", "ref", "--default-dim", "2"]) == 0
    assert cli.main(["run", str(lookup), "--target", "ref", "--batch", "2", "--input-dim", "x=2,1,2"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_shape_error_from_a_defaulted_dim_says_so(tmp_path, capsys):
    shape = np.array([-1, 3, 8, 8], np.int64)
    model = save(tmp_path / "reshape.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                 {"s": shape})
    assert cli.main(["run", str(model), "--target", "ref"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fusegraph: error: node 'y' (Reshape)")
    assert "dims 'batch', 'height', 'width' set to 1; pass --input-dim x=<batch>,3,<height>,<width>" in err
    assert cli.main(["run", str(model), "--target", "ref", "--input-dim", "x=2,3,8,8"]) == 0


def test_integer_inputs_stay_below_the_table_they_index(lookup):
    program = fusegraph.parse_onnx(lookup, map_input_dims={"idx": [400], "x": [400, 1, 2]})
    assert index_bounds(program) == {"idx": 5}  # through Cast and Unsqueeze; x is no index
    specs = program.get_parameter_shapes()
    feeds = build_inputs(specs, files={}, samples=None, fill="random", seed=0, bounds=index_bounds(program))
    assert feeds["idx"].dtype == np.int64 and feeds["idx"].min() == 0 and feeds["idx"].max() == 4
    program.compile(fusegraph.get_target("ref"))
    (y,) = program.run(feeds)
    np.testing.assert_array_equal(y, TABLE[feeds["idx"]][:, None] + feeds["x"])


def test_run_takes_a_long_lookup_input_without_error(lookup, capsys):
    # 0..9 indices (the old fill) would fail Gather on a 5-row table
    assert cli.main(["run", str(lookup), "--input-dim", "idx=300", "--input-dim", "x=300,1,2"]) == 0


def test_attention_masks_are_ones_then_padding():
    specs = {"attention_mask": Shape.of(DType.int64, [6, 9]), "ids": Shape.of(DType.int32, [6, 9]),
             "tiny": Shape.of(DType.int4, [50])}
    feeds = build_inputs(specs, files={}, samples=None, fill="random", seed=3)
    mask = feeds["attention_mask"]
    assert set(np.unique(mask)) <= {0, 1} and (mask[:, 0] == 1).all() and (np.diff(mask, axis=1) <= 0).all()
    assert 0 < mask.sum() < mask.size  # some padding, as a batch of sentences has
    assert feeds["ids"].max() == 9 and feeds["tiny"].astype(np.int64).max() <= 7  # within int4


@pytest.fixture(scope="module")
def small_bert(tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests.helpers.minilm import INPUT_NAMES, export_bert

    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=37, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    example = {n: np.ones((1, 8), np.int64) for n in INPUT_NAMES}
    return export_bert(transformers.BertModel(cfg).eval(), tmp_path_factory.mktemp("bert") / "bert.onnx", example)


def test_run_and_verify_a_bert_file_with_no_inputs_given(small_bert, capsys):
    assert cli.main(["run", str(small_bert)]) == 0
    assert cli.main(["verify", str(small_bert)]) == 0
    assert cli.main(["verify", str(small_bert), "--input-dim", "input_ids=2,40", "--input-dim",
                     "attention_mask=2,40", "--input-dim", "token_type_ids=2,40"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
    program = fusegraph.parse_onnx(small_bert, default_dim_value=16)
    assert index_bounds(program) == {"input_ids": 100, "token_type_ids": 2}
