"""`fusegraph compile MODEL -o FILE.fgx`, and every model-taking command given the .fgx file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusegraph
from fusegraph.driver import cli
from fusegraph.runtime.fgx_format import Container
from tests.helpers.fgx import onnx_model


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model(), str(path))
    return path


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compile_then_every_command_takes_the_file(model, tmp_path, capsys):
    fgx = tmp_path / "m.fgx"
    code, _, err = _cli(capsys, "compile", model, "-o", fgx, "--target", "ref", "--input-dim", "x=3,32")
    assert code == 0 and "wrote" in err and "unsigned" in err
    assert Container.open(fgx).manifest["inputs"][0]["shape"] == "float32[3,32]"
    for command in ("read", "params", "run", "verify"):
        code, out, err = _cli(capsys, command, fgx)
        assert code == 0, (command, err)
    code, out, _ = _cli(capsys, "run", fgx, "--fill", "1")
    assert code == 0 and "float32" in out
    # the file's outputs are those of the program it was compiled from
    p = fusegraph.parse_onnx(str(model), map_input_dims={"x": [3, 32]}).compile(fusegraph.get_target("ref"))
    x = {"x": np.ones((3, 32), np.float32)}
    for a, b in zip(fusegraph.load(fgx).run(x), p.run(x)):
        assert a.tobytes() == b.tobytes()


def test_fp16_files_record_their_precision(model, tmp_path, capsys):
    fgx, fgx32 = tmp_path / "h.fgx", tmp_path / "f.fgx"
    assert _cli(capsys, "compile", model, "-o", fgx, "--fp16", "--target", "cpu")[0] == 0
    assert Container.open(fgx).manifest["options"]["fp16"] is True
    assert fusegraph.load(fgx).get_output_shapes()[0].dtype.value == "float32"  # float32 in and out
    code, out, err = _cli(capsys, "verify", fgx, "--fp16")  # its kernels against its own program on ref
    assert code == 0 and "the file's program" in " ".join(out.split()), err  # (the table title may wrap)
    assert _cli(capsys, "compile", model, "-o", fgx32, "--target", "cpu")[0] == 0
    code, _, err = _cli(capsys, "run", fgx32, "--fp16")
    assert code == 2 and "compiled in float32" in err


def test_keep_fp32_is_a_compile_option_of_the_file(model, tmp_path, capsys):
    fgx = tmp_path / "k.fgx"
    assert _cli(capsys, "compile", model, "-o", fgx, "--fp16", "--keep-fp32", "mul,add", "--target", "ref")[0] == 0
    assert Container.open(fgx).manifest["options"]["keep_fp32"] == ["add", "mul"]
    assert _cli(capsys, "run", fgx, "--fp16", "--keep-fp32", "add,mul")[0] == 0  # as compiled: fine
    code, _, err = _cli(capsys, "run", fgx, "--fp16", "--keep-fp32", "mul")
    assert code == 2 and "cannot change it" in err


def test_verify_a_cpu_file_against_its_program_on_ref(model, tmp_path, capsys):
    fgx = tmp_path / "c.fgx"
    assert _cli(capsys, "compile", model, "-o", fgx, "--target", "cpu")[0] == 0
    code, out, err = _cli(capsys, "verify", fgx)
    assert code == 0 and "cpu vs ref (the file's program)" in " ".join(out.split()), err


def test_compile_signs_and_the_environment_key_verifies(model, tmp_path, capsys, monkeypatch):
    fgx = tmp_path / "m.fgx"
    assert _cli(capsys, "compile", model, "-o", fgx, "--sign-key", "k")[0] == 0
    assert Container.open(fgx).signed
    monkeypatch.setenv("FUSEGRAPH_SIGN_KEY", "k")
    assert _cli(capsys, "run", fgx)[0] == 0
    monkeypatch.setenv("FUSEGRAPH_SIGN_KEY", "wrong")
    code, _, err = _cli(capsys, "run", fgx)
    assert code == 2 and "signature does not match" in err


@pytest.mark.parametrize("argv, words", [
    (["run", "{fgx}", "--batch", "2"], "input shapes fixed"),
    (["run", "{fgx}", "--target", "cpu"], "compiled for target 'ref'"),
    (["verify", "{fgx}", "--reference", "ort"], "ONNX Runtime needs the ONNX model"),
    (["run", "{bad}"], "damaged"),
])
def test_what_a_compiled_file_cannot_do_is_one_line(model, tmp_path, capsys, argv, words):
    fgx = tmp_path / "m.fgx"
    assert _cli(capsys, "compile", model, "-o", fgx, "--target", "ref")[0] == 0
    data = bytearray(fgx.read_bytes())
    data[Container.open(fgx).parts["ir"].offset] ^= 1
    (tmp_path / "bad.fgx").write_bytes(bytes(data))
    code, _, err = _cli(capsys, *[a.format(fgx=fgx, bad=tmp_path / "bad.fgx") for a in argv])
    assert code == 2 and words in err and err.count("\n") == 1, err
