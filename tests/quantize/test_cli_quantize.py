"""The quantizer from the command line: compile --int8, verify --int8, quantize-report."""

from __future__ import annotations

import json

import numpy as np
import onnx

from fusegraph.quantize.calibration_data import write_folder
from tests.quantize.test_int8 import _conv_net, _data
from tests.test_cli import fusegraph_cli


def test_compile_verify_and_report_end_to_end(tmp_path):
    model = tmp_path / "net.onnx"
    onnx.save(_conv_net(), model)
    cal, held = write_folder(_data(4, 0), tmp_path / "cal"), write_folder(_data(3, 1), tmp_path / "held")
    fgx = tmp_path / "net.fgx"
    r = fusegraph_cli("compile", str(model), "--target", "ref", "--int8", "--calibration", str(cal),
                      "--calibration-method", "percentile", "--skip-names", "conv2", "-o", str(fgx))
    assert r.returncode == 0, r.stderr
    r = fusegraph_cli("run", str(fgx))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "v.json"
    r = fusegraph_cli("verify", str(model), "--target", "ref", "--int8", "--calibration", str(cal),
                      "--held-out", str(held), "--quantize-heads", "--json", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    (y,) = report["outputs"]
    assert y["task"] == "classify" and 0 < y["rel_l2"] < 0.1 and 0 <= y["top1_agreement"] <= 1
    assert report["samples"] == 3 and "3 ops" in report["scheme"]
    r = fusegraph_cli("verify", str(model), "--target", "ref", "--fp8", "--calibration", str(cal), "--quant-tol", "0")
    assert r.returncode == 1 and "fp8" in r.stdout
    rep = tmp_path / "s.json"
    r = fusegraph_cli("quantize-report", str(model), "--calibration", str(cal), "--json", str(rep))
    assert r.returncode == 0, r.stderr
    layers = [row["name"] for row in json.loads(rep.read_text())["layers"]]
    assert layers[0] == "(all)" and sorted(layers[1:]) == ["conv1", "conv2", "fc"]


def test_cli_errors_are_one_line(tmp_path):
    model = tmp_path / "net.onnx"
    onnx.save(_conv_net(), model)
    r = fusegraph_cli("compile", str(model), "--int8", "-o", str(tmp_path / "a.fgx"))
    assert r.returncode == 2 and "needs --calibration" in r.stderr
    (tmp_path / "empty").mkdir()
    r = fusegraph_cli("compile", str(model), "--int8", "--calibration", str(tmp_path / "empty"), "-o", str(tmp_path / "a.fgx"))
    assert r.returncode == 2 and "holds no .npy" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 16, 16), np.float32))
    r = fusegraph_cli("compile", str(model), "--int8", "--fp16", "--calibration", str(tmp_path), "-o", str(tmp_path / "a.fgx"))
    assert r.returncode == 2 and "exclude" in r.stderr
