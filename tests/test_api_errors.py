"""Every exception that leaves the public API is a FusegraphError; a bug is an InternalError with
the original as its cause, and the CLI exits 3 on it (2 on user errors, 130 when interrupted)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.driver import cli
from fusegraph.errors import (
    ArgumentError,
    CompiledFileError,
    FileAccessError,
    FusegraphError,
    InternalError,
    ParseError,
    api_boundary,
)
from fusegraph.runtime.fgx_format import Container
from fusegraph.targets import CompileOptions
from tests.helpers.fgx import onnx_program, reseal
from tests.util import make_model

X = {"x": np.ones((2, 3), np.float32)}


def test_an_unexpected_exception_becomes_an_internal_error_with_its_cause():
    @api_boundary
    def broken():
        return {}["missing"]

    with pytest.raises(InternalError, match=r"broken: KeyError: 'missing'") as e:
        broken()
    assert isinstance(e.value.__cause__, KeyError)


def test_typed_errors_and_interrupts_pass_unchanged():
    @api_boundary
    def typed():
        raise ParseError("bad node")

    @api_boundary
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(ParseError, match="^bad node$"):
        typed()
    with pytest.raises(KeyboardInterrupt):
        interrupted()


def test_a_bug_inside_run_leaves_as_an_internal_error(monkeypatch):
    p = fusegraph.parse_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])], X, ["y"])).compile("ref")

    def boom(inputs, **options):
        raise ZeroDivisionError("deep inside")

    monkeypatch.setattr(p.executable, "run", boom)
    with pytest.raises(InternalError, match="Program.run: ZeroDivisionError: deep inside"):
        p.run(X)


def test_os_errors_are_file_access_errors(tmp_path):
    p = onnx_program(hidden=4)
    with pytest.raises(FusegraphError):
        fusegraph.save(p, tmp_path / "no" / "such" / "dir" / "m.fgx")
    with pytest.raises(FusegraphError):
        fusegraph.load(tmp_path)
    assert issubclass(FileAccessError, FusegraphError)


def test_bad_arguments_are_argument_errors():
    with pytest.raises(ArgumentError, match="integrity must be one of"):
        fusegraph.load_buffer(fusegraph.save_buffer(onnx_program(hidden=4)), integrity="sometimes")
    with pytest.raises(ArgumentError, match=r"compile option threads='x': expected None or a positive int"):
        CompileOptions(threads="x")
    assert CompileOptions(disabled_passes=["a"]).disabled_passes == ("a",)


@pytest.mark.parametrize("options", [{"threads": "x"}, {"threads": 0}, {"optimize": 1}])
def test_a_manifest_with_an_option_of_the_wrong_type_is_refused(options):
    data = fusegraph.save_buffer(onnx_program(hidden=4))
    manifest = json.loads(bytes(Container.from_buffer(data).manifest_bytes))
    bad = reseal(data, manifest={"options": {**manifest["options"], **options}})
    with pytest.raises(CompiledFileError, match="compile option"):
        fusegraph.load_buffer(bad)


def test_contrib_attention_without_its_weights():
    x = {"x": np.ones((1, 2, 3), np.float32)}
    node = helper.make_node("Attention", ["x"], ["y"], domain="com.microsoft", num_heads=1)
    with pytest.raises(ParseError, match=r"input 1 \(weights\) is required"):
        fusegraph.parse_onnx(make_model([node], x, ["y"], extra_opsets={"com.microsoft": 1}))


def test_softmax_with_a_float_axis_is_a_parse_error_not_a_cpu_crash():
    with pytest.raises(ParseError, match="attribute 'axis' must be INT"):
        fusegraph.parse_onnx(make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1.5)], X, ["y"]))


def test_cli_exit_codes(tmp_path, monkeypatch, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(make_model([helper.make_node("Relu", ["x"], ["y"])], X, ["y"]).SerializeToString())
    assert cli.main(["read", str(model)]) == 0
    capsys.readouterr()

    def bug(*args, **kwargs):
        raise InternalError("parse_onnx: IndexError: oops") from IndexError("oops")

    from fusegraph.driver import commands

    monkeypatch.setattr(commands.COMMANDS["read"], "run", lambda args: bug())
    assert cli.main(["read", str(model)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("fusegraph: internal error: IndexError: oops") and err.count("\n") == 1

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands.COMMANDS["read"], "run", interrupted)
    assert cli.main(["read", str(model)]) == 130
