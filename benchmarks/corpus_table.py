"""The differential corpus (tests/corpus/) on the given targets against ONNX Runtime: one row per model.

    python benchmarks/corpus_table.py [--targets ref,cpu] [--models NAME,...] [--families F,...]

Targets are fusegraph target names, or NAME-fp16 (computing in float16) / NAME-fp16-io (with float16
inputs and outputs too), as tests/corpus/compare.py's TARGETS. Per model and
target: the largest relative L2 and max-abs error over the outputs, and pass / FAIL / the error raised;
`ort spread` is ONNX Runtime without graph optimizations against ORT at its defaults (the yardstick
the fp16 / int8 tolerances are set against, tests/corpus/compare.py). Writes
benchmarks/results/corpus_table-<targets>-<host>.json and prints the table as markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from tests.corpus import ENTRIES  # noqa: E402
from tests.corpus.build import CorpusUnavailable  # noqa: E402
from tests.corpus.compare import check, ort_spread, reference  # noqa: E402


def _cell(result: dict) -> str:
    if "error" in result:
        return "ERROR " + result["error"]
    mark = "pass" if result["ok"] else "FAIL"
    return f"{mark} {result['rel_l2']:.1e} / {result['max_abs']:.1e}"


def _run(entry, targets: list[str]) -> dict:
    row = {"model": entry.name, "family": entry.family, "precision": entry.precision}
    t0 = time.perf_counter()
    try:
        ref = reference(entry)
    except CorpusUnavailable as e:
        return {**row, "skipped": str(e)}
    except Exception as e:  # noqa: BLE001 - a builder's failure is a row of the table, not the end of it
        return {**row, "build_error": f"{type(e).__name__}: {e}"[:300]}
    row["build_s"] = round(time.perf_counter() - t0, 2)
    spread = ort_spread(entry, ref)
    row["ort_spread_rel_l2"] = spread.rel_l2
    for target in targets:
        t0 = time.perf_counter()
        try:
            v = check(entry, ref, target)
            res = {"ok": v.ok, "rel_l2": v.rel_l2, "max_abs": v.max_abs, "detail": v.detail}
        except Exception as e:  # noqa: BLE001 - the error is what the table reports
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        res["seconds"] = round(time.perf_counter() - t0, 2)
        row[target] = res
    return row


def markdown(rows: list[dict], targets: list[str]) -> str:
    head = ["model", "family", "ort spread", *(f"{t} rel L2 / max abs" for t in targets)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "skipped" in r or "build_error" in r:
            cells = [r.get("skipped") or "BUILD ERROR " + r["build_error"]] * (len(head) - 2)
        else:
            cells = [f"{r['ort_spread_rel_l2']:.1e}", *(_cell(r[t]) for t in targets)]
        lines.append("| " + " | ".join([r["model"], r["family"], *(c.replace("|", "/") for c in cells)]) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="ref,cpu")
    ap.add_argument("--models", default=None, help="only these entries (comma-separated)")
    ap.add_argument("--families", default=None, help="only these families (comma-separated)")
    ap.add_argument("--part", default="", help="suffix of the results' name (runs over parts of the corpus at once)")
    a = ap.parse_args()
    targets = a.targets.split(",")
    names = set(a.models.split(",")) if a.models else None
    families = set(a.families.split(",")) if a.families else None
    rows = []
    for entry in ENTRIES.values():
        if (names is None or entry.name in names) and (families is None or entry.family in families):
            rows.append(_run(entry, targets))
            print(f"# {entry.name}: " + ", ".join(_cell(rows[-1][t]) for t in targets if t in rows[-1]),
                  file=sys.stderr, flush=True)
    print(markdown(rows, targets))
    failed = sum(1 for r in rows for t in targets if not r.get(t, {"ok": "skipped" in r}).get("ok"))
    print(f"\n{failed} failing (model, target) pairs of {len(rows) * len(targets)}")
    print("wrote", write_results("corpus_table-" + "-".join(targets) + (f"-{a.part}" if a.part else ""), {"targets": targets, "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
