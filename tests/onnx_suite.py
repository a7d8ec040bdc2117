"""Run ONNX backend suite cases through fusegraph.backend from the command line, one line each.

    python -m tests.onnx_suite -k conv            # node cases whose name matches the regex
    python -m tests.onnx_suite --kind all --summary
    python -m tests.onnx_suite -k cumsum --target gpu   # the gpu target (Triton's interpreter without CUDA)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
import warnings

from tests.onnx.suite import KINDS, cases, run_case


def resolve_target(name: str | None):
    """The target to run: a name, except 'gpu' on a machine without CUDA, which becomes the same
    target on the CPU through Triton's interpreter (slow: use -k filters)."""
    if name != "gpu":
        return name
    import torch

    if torch.cuda.is_available():
        return name
    from fusegraph.targets.gpu.interpreter import interpreted_target

    return interpreted_target()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="regex on case names")
    ap.add_argument("--kind", default="node", help=f"one of {KINDS} or 'all'")
    ap.add_argument("--target", default=None)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--tb", action="store_true", help="print tracebacks")
    a = ap.parse_args(argv)
    pat = re.compile(a.k)
    target = resolve_target(a.target)
    passed = failed = 0
    t0 = time.time()
    for kind in KINDS if a.kind == "all" else (a.kind,):
        for case in cases(kind):
            if not pat.search(case.name):
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run_case(case, target)
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
