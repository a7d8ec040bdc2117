"""verify --per-layer and --bisect name a planted wrong rewrite and a planted wrong kernel."""

from __future__ import annotations

import onnx
import pytest

from fusegraph.driver import cli
from tests.util import target_or_skip

from .models import small_cnn
from .planted import BROKEN, wrong_kernel, wrong_rewrite  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _cpu_target():
    """Every test here checks the cpu target: skip where oneDNN cannot load (the H200 machine)."""
    target_or_skip("cpu")


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "small.onnx"
    onnx.save(small_cnn(), path)
    return str(path)


def _verify(capsys, *args):
    rc = cli.main(["verify", *args, "--target", "cpu"])
    return rc, capsys.readouterr().out


def test_clean_model_passes_both_modes(model, capsys):
    rc, out = _verify(capsys, model, "--per-layer")
    assert rc == 0 and "every layer matches" in out
    rc, out = _verify(capsys, model, "--bisect")
    assert rc == 0 and "nothing to bisect" in out


def test_per_layer_names_the_rewritten_node(model, capsys, wrong_rewrite):  # noqa: F811
    rc, out = _verify(capsys, model, "--per-layer")
    assert rc == 1
    # the first add of the program is the Conv's bias: the node to name is the one the pass broke
    assert BROKEN == ["conv"]
    assert "first diverging node: conv (Conv)" in out


def test_bisect_names_the_wrong_pass_and_the_step(model, capsys, wrong_rewrite):  # noqa: F811
    rc, out = _verify(capsys, model, "--bisect")
    assert rc == 1
    assert "culprit pass(es): break_one_add" in out
    lines = out.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("first instruction departing"))
    # the fused step computing the broken node departs from the model; its kernel is right for what it computes
    assert f"{BROKEN[0]} (" in lines[k + 2]
    assert any(line.startswith("first wrong kernel") and line.endswith("none") for line in lines)


def test_per_layer_names_the_node_of_a_wrong_kernel(model, capsys, wrong_kernel):  # noqa: F811
    rc, out = _verify(capsys, model, "--per-layer")
    assert rc == 1
    assert "first diverging node: pool (GlobalAveragePool)" in out


def test_bisect_names_a_wrong_kernel(model, capsys, wrong_kernel):  # noqa: F811
    rc, out = _verify(capsys, model, "--bisect")
    assert rc == 1
    lines = out.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("first wrong kernel"))
    assert "pooling" in lines[k + 1] and "pool (GlobalAveragePool)" in lines[k + 2]
    k = next(i for i, line in enumerate(lines) if line.startswith("first instruction departing"))
    assert "pool (GlobalAveragePool); tensor p" in lines[k + 2]  # seen through the view the plan made once
    assert "no single pass" in out  # no pass is at fault: every trial still fails
