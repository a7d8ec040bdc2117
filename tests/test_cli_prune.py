"""2:4 pruning from the command line: verify --prune-2-4 (its report and JSON), compile --prune-2-4
(the zeros saved and loaded), and the errors and warnings."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import fusegraph
from fusegraph.passes.prune_2_4 import pruned_products
from fusegraph.quantize.calibration_data import write_folder
from tests.passes.test_prune_2_4 import W, model
from tests.test_cli import fusegraph_cli


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    path = tmp_path_factory.mktemp("prune") / "net.onnx"
    onnx.save(model(), path)
    return path


def test_verify_reports_the_products_and_the_accuracy(net, tmp_path):
    out = tmp_path / "v.json"
    r = fusegraph_cli("verify", str(net), "--target", "ref", "--prune-2-4", "--prune-min-size", "0",
                      "--skip-names", "mm3", "--json", str(out))
    assert r.returncode == 1, r.stderr  # random weights lose ~0.4 of their norm: above the default 0.1
    assert "2:4-pruned vs dense" in r.stdout and "MISMATCH" in r.stdout and "K = 6 is no multiple of 4" in r.stdout
    report = json.loads(out.read_text())
    status = {p["name"]: p["status"] for p in report["products"]}
    assert status["mm1"] == "pruned" and status["mm4"] == "found" and status["mm3"] == "skipped: skip_names"
    assert report["samples"] == 4 and report["held_out"] == "4 inputs made from seed 0" and not report["ok"]
    y, yi = report["outputs"]
    assert y["name"] == "y" and 0.05 < y["rel_l2"] < 2 and y["task"] == "classify" and 0 <= y["top1_agreement"] <= 1
    assert yi["rel_l2"] == 0  # the integer product is not pruned
    r = fusegraph_cli("verify", str(net), "--target", "ref", "--prune-2-4", "--prune-min-size", "0", "--quant-tol", "10")
    assert r.returncode == 0, r.stderr


def test_verify_on_a_held_out_folder(net, tmp_path):
    rng = np.random.default_rng(1)
    held = write_folder([{"x": rng.standard_normal((2, 16)).astype(np.float32),
                          "xi": rng.integers(0, 3, (2, 8)).astype(np.int32)} for _ in range(3)], tmp_path / "held")
    out = tmp_path / "v.json"
    r = fusegraph_cli("verify", str(net), "--target", "ref", "--prune-2-4", "--prune-min-size", "0", "--held-out",
                      str(held), "--held-out-samples", "2", "--quant-tol", "10", "--json", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert report["samples"] == 2 and report["held_out"] == str(held) and report["ok"]


def test_compile_saves_the_pruned_weights(net, tmp_path):
    fgx = tmp_path / "net.fgx"
    r = fusegraph_cli("compile", str(net), "--target", "cpu", "--prune-2-4", "--prune-min-size", "0", "-o", str(fgx))
    assert r.returncode == 0, r.stderr
    assert "4 product weight(s) pruned, 1 found 2:4" in r.stderr
    loaded = fusegraph.load(fgx)
    assert {p.name for p in pruned_products(loaded) if p.status == "pruned"} == {"mm1", "gemm2", "mm3", "mm5"}
    x, xi = np.ones((2, 16), np.float32), np.zeros((2, 8), np.int32)
    dense = fusegraph.parse_onnx(model()).compile(fusegraph.get_target("ref"))
    pruned = fusegraph.prune_2_4(fusegraph.parse_onnx(model()), min_size=0).compile(fusegraph.get_target("ref"))
    got = loaded.run({"x": x, "xi": xi})[0]
    np.testing.assert_allclose(got, pruned.run({"x": x, "xi": xi})[0], rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, dense.run({"x": x, "xi": xi})[0], rtol=1e-2)
    lits = [i.literal for i in loaded.main.instructions if i.is_literal and i.literal.shape == W["W1"].shape]
    assert lits and all(fusegraph.is_2_4(w) for w in lits)
    r = fusegraph_cli("analyze", str(fgx), "--markdown")
    assert r.returncode == 0 and "2:4: 4 product weight(s) pruned" in r.stdout, r.stderr


def test_no_prunable_product_is_a_warning_and_bad_options_are_errors(net, tmp_path):
    r = fusegraph_cli("compile", str(net), "--target", "ref", "--prune-2-4", "-o", str(tmp_path / "a.fgx"))
    assert r.returncode == 0, r.stderr  # every weight is under the default min_size
    assert "warning: --prune-2-4: no product weight" in r.stderr and "min_size 1024" in r.stderr
    r = fusegraph_cli("compile", str(net), "--prune-min-size", "0", "-o", str(tmp_path / "b.fgx"))
    assert r.returncode == 2 and "add --prune-2-4" in r.stderr
    r = fusegraph_cli("verify", str(net), "--prune-2-4", "--int8", "--calibration", str(tmp_path))
    assert r.returncode == 2 and "one change" in r.stderr
    r = fusegraph_cli("verify", str(net), "--prune-2-4", "--skip-names", "nope")
    assert r.returncode == 2 and "'nope'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
