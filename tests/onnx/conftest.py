"""Options and reporting for the ONNX backend suite: the target to run it on, a summary line per
kind, and a JSON report ($FUSEGRAPH_REPORT_DIR, default .cache/reports/)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

_results: dict[str, dict[str, str]] = {}
_selected: list[str] = []


def pytest_addoption(parser):
    parser.addoption("--backend-target", action="append", default=None,
                     help="run the ONNX backend suite on this target only (repeatable; default: ref and cpu)")


def pytest_configure(config):
    _selected[:] = config.getoption("--backend-target") or ["ref", "cpu"]


@pytest.fixture(scope="session")
def backend_targets():
    return list(_selected)


def pytest_runtest_logreport(report):
    if "test_onnx_backend[" not in report.nodeid:
        return
    case_id = report.nodeid.split("test_onnx_backend[", 1)[1][:-1]  # target/kind/name
    if case_id.split("/", 1)[0] not in _selected:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome == "skipped"):
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
        elif report.outcome == "skipped":
            if "not selected" in str(report.longrepr):
                return
            outcome = "excluded"
        else:
            outcome = report.outcome
        _results[case_id] = {"outcome": outcome, "message": str(report.longrepr)[-300:] if report.failed else ""}
    elif report.when == "setup" and report.failed:
        _results[case_id] = {"outcome": "error", "message": str(report.longrepr)[-300:]}


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    by_kind: dict[str, Counter] = {}
    for case_id, r in _results.items():
        target, kind, _ = case_id.split("/", 2)
        by_kind.setdefault(f"{target}:{kind}", Counter())[r["outcome"]] += 1
    parts = []
    for kind, c in by_kind.items():
        parts.append(f"{kind} {c['passed']} passed / {c['failed'] + c['error']} failed / "
                     f"{c['excluded'] + c['xfailed']} excluded")
    terminalreporter.write_line("ONNX backend suite: " + "; ".join(parts))
    out = Path(os.environ.get("FUSEGRAPH_REPORT_DIR", ".cache/reports"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "onnx_backend_suite.json"
    path.write_text(json.dumps({"summary": {k: dict(c) for k, c in by_kind.items()}, "cases": _results}, indent=1))
    terminalreporter.write_line(f"ONNX backend suite report: {path}")
