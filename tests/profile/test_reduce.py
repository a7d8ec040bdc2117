"""fusegraph reduce shrinks a failing model to the node at fault, and the result fails verify."""

from __future__ import annotations

import onnx
import pytest

from fusegraph.driver import cli
from tests.util import target_or_skip

from .models import small_cnn
from .planted import compile_error, wrong_kernel, wrong_rewrite  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _cpu_target():
    """Every test here checks the cpu target: skip where oneDNN cannot load (the H200 machine)."""
    target_or_skip("cpu")


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "small.onnx"
    onnx.save(small_cnn(), path)
    return path


def _reduce(model, capsys):
    out = model.parent / "reduced.onnx"
    rc = cli.main(["reduce", str(model), "--target", "cpu", "-o", str(out)])
    capsys.readouterr()
    assert rc == 0
    reduced = onnx.load(out)
    onnx.checker.check_model(reduced, full_check=True)
    return out, [n.name for n in reduced.graph.node]


def _verify(path, target, capsys):
    rc = cli.main(["verify", str(path), "--target", target])
    capsys.readouterr()
    return rc


def test_reduces_a_wrong_kernel_to_its_node(model, capsys, wrong_kernel):  # noqa: F811
    out, nodes = _reduce(model, capsys)
    assert nodes == ["pool"]
    assert _verify(out, "cpu", capsys) == 1   # still fails as it stands
    assert _verify(out, "ref", capsys) == 0   # and the model itself is fine


def test_reduces_a_wrong_rewrite_to_its_node(model, capsys, wrong_rewrite):  # noqa: F811
    out, nodes = _reduce(model, capsys)
    assert nodes == ["conv"]  # the rewrite breaks the first add: the Conv's bias
    assert _verify(out, "cpu", capsys) == 1


def test_reduces_a_compile_failure(model, capsys, compile_error):  # noqa: F811
    out, nodes = _reduce(model, capsys)
    assert nodes == ["fc"]
    assert _verify(out, "cpu", capsys) == 2  # the compile error, as a user error


def test_a_model_that_passes_is_refused(model, capsys):
    rc = cli.main(["reduce", str(model), "--target", "cpu", "-o", str(model.parent / "r.onnx")])
    assert rc == 2
    assert "nothing to reduce" in capsys.readouterr().err
