"""What `verify --int8`, `--fp8` and `--prune-2-4` share: a changed program (quantized, pruned) and
the float program it came from, run on the same held-out inputs and compared in the terms of the
model's task (quantize/accuracy.py), shown as one table and written with --json.

An output passes when its relative L2 error is at most --quant-tol; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

DEFAULT_QUANT_TOL = 0.1


def measure(args: argparse.Namespace, floating: Any, changed: Any, feeds: list[dict], title: str,
            caption: str) -> list:
    """Both loaded programs on `feeds`, compared per output, shown as a table; the comparisons."""
    from ..quantize.accuracy import compare
    from .report import fmt, show, status, table

    with status(f"running {len(feeds)} held-out samples on {floating.target}"):
        ref = [floating.program.run(f) for f in feeds]
        got = [changed.program.run(f) for f in feeds]
    results = compare(floating.program.output_names, got, ref, args.task)
    keys = sorted({k for r in results for k in r.metrics})
    rows = [(r.name, r.task, "ok" if r.rel_l2 <= args.quant_tol else "MISMATCH", fmt(r.rel_l2, 3),
             *[fmt(r.metrics.get(k), 4) if k in r.metrics else "" for k in keys]) for r in results]
    show(table(f"{args.model}: {title} on {changed.target}, {len(feeds)} held-out samples",
               ["output", "task", "result", "rel L2", *keys], rows, right=("rel L2", *keys),
               caption=f"{caption}; ok when rel L2 <= {args.quant_tol:g}"))
    return results


def finish(args: argparse.Namespace, results: list, fields: dict[str, Any]) -> int:
    """Write --json (`fields`, then the verdict and the outputs); the exit status."""
    from .report import note

    failed = [r.name for r in results if not r.rel_l2 <= args.quant_tol]
    if args.json is not None:
        args.json.write_text(json.dumps({
            "model": args.model, **fields, "quant_tol": args.quant_tol, "ok": not failed,
            "outputs": [r.as_dict() for r in results],
        }, indent=2) + "\n")
    if failed:
        note(f"verify failed: {len(failed)} of {len(results)} output(s) have rel L2 above {args.quant_tol:g}")
        return 1
    return 0
