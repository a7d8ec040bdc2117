"""The ONNX backend test suite through fusegraph.backend — every kind, every case, one explicit
exclusion list (tests/onnx/exclusions.txt) with a reason per line. A summary line per kind is
printed at the end of the run and a JSON report is written (see tests/onnx/conftest.py)."""

from __future__ import annotations

import warnings

import pytest

from .suite import KINDS, cases, exclusion_for, load_exclusions, run_case

EXCLUSIONS = load_exclusions()


def _params():
    for kind in KINDS:
        for case in cases(kind):
            ex = exclusion_for(case, EXCLUSIONS)
            marks = [pytest.mark.onnx_suite]
            if kind == "real":
                marks.append(pytest.mark.slow)
            if ex is not None:
                marks.append(pytest.mark.xfail(reason=ex.reason, strict=True) if ex.xfail
                             else pytest.mark.skip(reason=f"excluded: {ex.reason}"))
            yield pytest.param(case, id=f"{kind}/{case.name}", marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_onnx_backend(case, backend_target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_case(case, backend_target)
