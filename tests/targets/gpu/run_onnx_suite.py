"""Run the ONNX backend suite's node and simple cases on the gpu target, in parallel processes, and
write a JSON report (the summary per kind and every case's outcome). Without CUDA the same target
runs on the CPU through Triton's interpreter (slow: pick cases with -k or --cases).

    python tests/targets/gpu/run_onnx_suite.py [--jobs 16] [--out DIR] [-k REGEX] [--cases FILE]

(--cases: a file of KIND/NAME lines, e.g. the `failed_cases` of an earlier report, one per line.)

(tests/onnx/test_backend_suite.py parametrizes its targets as ref and cpu; this runs the same cases,
with the same exclusions and comparison rules, through tests.onnx.suite.run_case(case, "gpu").)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import traceback
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.onnx.suite import cases, exclusion_for, load_exclusions  # noqa: E402

KINDS = ("node", "simple")


def run_one(job: tuple[str, int]) -> tuple[str, str, str, str]:
    from tests.onnx.suite import run_case
    from tests.onnx_suite import resolve_target

    kind, index = job
    case = cases(kind)[index]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_case(case, resolve_target("gpu"))
        return kind, case.name, "passed", ""
    except Exception as e:  # every failure is recorded with its reason
        return kind, case.name, "failed", f"{type(e).__name__}: {e}"[-300:] + _where(e)


def _where(e: BaseException) -> str:
    """' (at file:line in function)' for the innermost fusegraph frame of `e`'s traceback."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/fusegraph/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename.rsplit('/fusegraph/', 1)[1]}:{f.lineno} in {f.name})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--out", default=".cache/reports")
    ap.add_argument("-k", default="", help="regex on case names")
    ap.add_argument("--cases", default=None, help="file of KIND/NAME lines to run (others are not run)")
    ap.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                    help="stop after this long, report the cases not run as such")
    args = ap.parse_args()
    pattern = re.compile(args.k)
    wanted = set(Path(args.cases).read_text().split()) if args.cases else None
    exclusions = load_exclusions()
    results: dict[str, dict[str, str]] = {}
    jobs = []
    for kind in KINDS:
        for index, case in enumerate(cases(kind)):
            if not pattern.search(case.name) or (wanted is not None and f"{kind}/{case.name}" not in wanted):
                continue
            ex = exclusion_for(case, exclusions, "gpu")
            if ex is not None and not ex.xfail:
                results[f"{kind}/{case.name}"] = {"outcome": "excluded", "message": ex.reason}
            else:
                jobs.append((kind, index))
    pool = ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn"))
    try:
        for future in as_completed([pool.submit(run_one, j) for j in jobs], timeout=args.deadline):
            kind, name, outcome, message = future.result()
            results[f"{kind}/{name}"] = {"outcome": outcome, "message": message}
        pool.shutdown()
    except TimeoutError:  # report what ran; the workers still busy are stopped
        pool.shutdown(wait=False, cancel_futures=True)
        for child in mp.active_children():
            child.terminate()
        for kind, index in jobs:
            results.setdefault(f"{kind}/{cases(kind)[index].name}", {"outcome": "not run", "message": "deadline"})
    by_kind: dict[str, Counter] = {}
    for key, r in results.items():
        by_kind.setdefault(key.split("/")[0], Counter())[r["outcome"]] += 1
    print("ONNX backend suite: " + "; ".join(
        f"gpu:{k} {c['passed']} passed / {c['failed']} failed / {c['excluded']} excluded"
        + (f" / {c['not run']} not run" if c["not run"] else "") for k, c in by_kind.items()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "onnx_backend_suite_gpu.json").write_text(json.dumps(
        {"summary": {k: dict(c) for k, c in by_kind.items()}, "cases": results}, indent=1))


if __name__ == "__main__":
    main()
