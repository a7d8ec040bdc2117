"""The ONNX backend test suite through fusegraph.backend — every kind, every case, on the ref and
cpu targets, one explicit exclusion list (tests/onnx/exclusions.txt) with a reason per line. A summary line per kind is
printed at the end of the run and a JSON report is written (see tests/onnx/conftest.py)."""

from __future__ import annotations

import warnings

import pytest

from .suite import KINDS, cases, exclusion_for, load_exclusions, run_case

EXCLUSIONS = load_exclusions()


TARGETS = ("ref", "cpu", "gpu")  # gpu runs only when selected with --backend-target gpu


def _params():
    for target, kind in ((t, k) for t in TARGETS for k in KINDS):
        for case in cases(kind):
            ex = exclusion_for(case, EXCLUSIONS, target)
            marks = [pytest.mark.onnx_suite]
            if kind == "real":
                marks.append(pytest.mark.slow)
            if ex is not None:
                marks.append(pytest.mark.xfail(reason=ex.reason, strict=True) if ex.xfail
                             else pytest.mark.skip(reason=f"excluded: {ex.reason}"))
            yield pytest.param(target, case, id=f"{target}/{kind}/{case.name}", marks=marks)


@pytest.mark.parametrize("target,case", list(_params()))
def test_onnx_backend(target, case, backend_targets):
    if target not in backend_targets:
        pytest.skip(f"target {target} not selected (--backend-target)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_case(case, target)
