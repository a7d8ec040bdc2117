"""Run ONNX backend node test cases through fusegraph.backend, in memory.

    python -m tests.onnx_suite -k conv        # cases whose name matches the regex, one line each
    python -m tests.onnx_suite --summary      # counts only
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
import traceback
import warnings

import numpy as np


@functools.cache
def node_cases():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(load_model_tests(kind="node"))


def _normalize(x):
    import onnx
    from onnx import numpy_helper

    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return x


def compare(ref, out, rtol, atol) -> None:
    """The ONNX runner's rule: same count, dtype and shape, then allclose (exact for non-floats)."""
    if isinstance(ref, list):
        assert isinstance(out, list), f"expected a sequence, got {type(out).__name__}"
        assert len(ref) == len(out), f"sequence length {len(out)}, expected {len(ref)}"
        for r, o in zip(ref, out):
            compare(r, o, rtol, atol)
        return
    if ref is None:
        assert out is None, f"expected None, got {type(out).__name__}"
        return
    ref = np.asarray(ref)
    out = np.asarray(out)
    assert ref.dtype == out.dtype, f"dtype {out.dtype}, expected {ref.dtype}"
    assert ref.shape == out.shape, f"shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        assert ref.tolist() == out.tolist(), "string values differ"
    elif ref.dtype.kind in "fc" or ref.dtype.itemsize < 2 and ref.dtype.kind == "V":
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)
    else:
        try:
            np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)
        except (TypeError, ValueError):
            np.testing.assert_array_equal(out, ref)


def run_case(case, target: str | None = None) -> None:
    from fusegraph.backend import FusegraphBackend

    backend = type("B", (FusegraphBackend,), {"target": target}) if target else FusegraphBackend
    rep = backend.prepare(case.model, "CPU")
    for inputs, refs in case.data_sets:
        outs = rep.run([_normalize(i) for i in inputs])
        refs = [_normalize(r) for r in refs]
        assert len(outs) == len(refs), f"{len(outs)} outputs, expected {len(refs)}"
        for k, (r, o) in enumerate(zip(refs, outs)):
            try:
                compare(r, o, case.rtol, case.atol)
            except AssertionError as e:
                raise AssertionError(f"output {k}: {e}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="regex on case names")
    ap.add_argument("--target", default=None)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--tb", action="store_true", help="print tracebacks")
    a = ap.parse_args(argv)
    pat = re.compile(a.k)
    passed = failed = 0
    t0 = time.time()
    for case in node_cases():
        if not pat.search(case.name):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case, a.target)
            passed += 1
            if not a.summary:
                print(f"PASS {case.name}")
        except Exception as e:  # report every failure and go on
            failed += 1
            if not a.summary:
                msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                print(f"FAIL {case.name}: {type(e).__name__}: {msg}")
                if a.tb:
                    traceback.print_exc()
    print(f"{passed} passed, {failed} failed in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
