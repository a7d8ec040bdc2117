"""Machine-readable results: `verify --json`, `run --save-inputs` replayed with `--input`,
`analyze --target` showing the target's own pipeline."""

from __future__ import annotations

import json

import numpy as np

from fusegraph.driver import cli, ort

from .test_cli import tiny  # noqa: F401  (fixture)


def test_verify_json_reports_each_output_and_the_verdict(tiny, tmp_path, monkeypatch, capsys):  # noqa: F811
    out = tmp_path / "v.json"
    assert cli.main(["verify", str(tiny), "--batch", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["reference"] == "onnxruntime"
    assert [o["name"] for o in report["outputs"]] == ["y", "z"] and all(o["ok"] for o in report["outputs"])
    honest = ort.OrtSession.run
    monkeypatch.setattr(ort.OrtSession, "run", lambda self, feeds: [o + 1e-2 for o in honest(self, feeds)])
    assert cli.main(["verify", str(tiny), "--reference", "ort", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["ok"] is False and all(o["max_abs"] >= 1e-2 * 0.99 for o in report["outputs"])
    capsys.readouterr()


def test_saved_inputs_replay_the_run(tiny, tmp_path, capsys):  # noqa: F811
    inputs, first, again = tmp_path / "in", tmp_path / "a", tmp_path / "b"
    assert cli.main(["run", str(tiny), "--batch", "3", "--seed", "7", "--save-inputs", str(inputs),
                     "--output", str(first)]) == 0
    assert sorted(p.name for p in inputs.iterdir()) == ["idx.npy", "x.npy"]
    assert np.load(inputs / "x.npy").shape == (3, 3)
    feeds = [f"--input={name}={inputs / name}.npy" for name in ("x", "idx")]
    assert cli.main(["run", str(tiny), "--seed", "99", *feeds, "--output", str(again)]) == 0
    for name in ("y", "z"):  # another seed, the same inputs: the same outputs
        np.testing.assert_array_equal(np.load(first / f"{name}.npy"), np.load(again / f"{name}.npy"))
    capsys.readouterr()


def test_analyze_target_runs_that_targets_pipeline(tmp_path, capsys):
    generic, cpu = tmp_path / "g.json", tmp_path / "c.json"
    assert cli.main(["analyze", "bert_small", "--json", str(generic)]) == 0
    assert cli.main(["analyze", "bert_small", "--target", "cpu", "--json", str(cpu)]) == 0
    passes = {name: [r["name"] for r in json.loads(p.read_text())["passes"]] for name, p in (("g", generic), ("c", cpu))}
    assert "fuse_dot_epilogue" in passes["c"] and "fuse_dot_epilogue" not in passes["g"]
    assert json.loads(cpu.read_text())["pipeline"] == "cpu"
    capsys.readouterr()
