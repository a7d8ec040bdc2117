"""The fuzz suite: seeded hostile models, inputs and compiled files, each case in a worker process
under memory and time limits (tests/fuzz/harness.py), a few minutes in all on two cores.

It fails on any crash, hang, untyped error, accepted-invalid case (one ONNX Runtime refuses that
fusegraph ran) or wrong result, except outcomes listed in KNOWN below with their reason. Reproduce
one case with `python -m tests.fuzz.harness --one FAMILY SEED`; more cases with FUSEGRAPH_FUZZ_SCALE=4.
"""

from __future__ import annotations

import collections
import os
import re

from tests.fuzz.harness import BAD, GOOD, run_cases

# cases per family (seeds 0..n-1), chosen so the whole suite takes about two minutes on two cores
CASES = {
    "node-ok": 100, "node-attr": 250, "node-unknown-attr": 100, "node-inputs": 200, "node-dtype": 150,
    "node-init-dims": 150, "model-proto": 200, "model-bytes": 150, "run-inputs": 150, "fgx-raw": 100,
    "fgx-resealed": 250, "fgx-ok": 20, "model-hostile": 16, "fgx-artifacts": 40,
}
# seconds a case may take: the hostile families build and refuse large or endless programs
TIMEOUTS = {"model-hostile": 8, "fgx-artifacts": 10}

# Known outcomes that a branch not yet merged fixes, keyed by case family: (outcome, detail regex,
# reason). Each is counted as known(...), never as passing; delete an entry once its fix has merged.
KNOWN: dict[str, list[tuple[str, str, str]]] = {}


def known_reason(family: str, outcome: str, detail: str) -> str | None:
    for out, pattern, reason in KNOWN.get(family, []):
        if out == outcome and re.search(pattern, detail):
            return reason
    return None


def test_fuzz_outcomes(capsys):
    scale = float(os.environ.get("FUSEGRAPH_FUZZ_SCALE", "1"))
    cases = [(f, s) for f, n in CASES.items() for s in range(max(1, int(n * scale)))]
    results = run_cases(cases, workers=2, timeout=30, timeouts=TIMEOUTS)
    counts: collections.Counter = collections.Counter()
    failures = []
    for r in results:
        reason = known_reason(r.family, r.outcome, r.detail) if r.outcome in BAD else None
        label = f"known({reason.split(':')[0]})" if reason else r.outcome
        counts[(r.family, label)] += 1
        counts[("ALL", label)] += 1
        if r.outcome in BAD and not reason:
            failures.append(f"{r.family} {r.seed}: {r.outcome}: {r.detail}")
    with capsys.disabled():
        print(f"\nfuzz outcomes over {len(results)} cases:")
        for family in [*CASES, "ALL"]:
            row = {label: n for (f, label), n in sorted(counts.items()) if f == family}
            print(f"  {family:18s} " + "  ".join(f"{label}={n}" for label, n in row.items()))
    assert len(results) == len(cases)
    assert all(r.outcome in GOOD + BAD for r in results)
    assert not failures, f"{len(failures)} fuzz failures:\n" + "\n".join(failures[:40])
