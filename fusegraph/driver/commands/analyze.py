"""`fusegraph analyze MODEL`: what each pass of the generic pipeline (or of a target's, `--target`) does to
the program."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..common import add_model_options, load

HELP = "run the optimization pipeline and report instructions, FLOPs and bytes after each pass"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    p.add_argument("--target", metavar="T",
                   help="run this target's pipeline (ref, cpu, gpu: its epilogue fusions, layouts and memory "
                        "plan included) instead of the generic one")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the report as JSON")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table instead of a rich one")


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def _row(name: str, runs: str, seconds: str, s) -> list[str]:
    return [name, runs, seconds, str(s.instructions), str(s.kernels), str(s.fused_kernels), f"{s.flops / 1e9:.3f}",
            _mb(s.constant_bytes), _mb(s.activation_bytes), _mb(s.arena_bytes), _mb(s.max_live_bytes)]


COLUMNS = ["pass", "runs (changed)", "ms", "instructions", "kernels", "fused", "GFLOP", "const MiB", "activ. MiB",
           "arena MiB", "max-live MiB"]


def run(args: argparse.Namespace) -> int:
    from ...passes import generic_pipeline
    from ...passes.analyze import analyze
    from ...passes.prune_2_4 import pruned_products, summary
    from ..report import show, table

    loaded = load(args)
    if args.target is None:
        pipeline = generic_pipeline()
    else:
        from ...targets import CompileOptions, get_target

        pipeline = get_target(args.target).passes(CompileOptions())
    a = analyze(loaded.program, pipeline)
    rows = [_row("(parsed)", "", "", a.parsed)]
    rows += [_row(r.name, f"{r.runs} ({r.changed})", f"{r.seconds * 1e3:.1f}", r.stats) for r in a.rows]
    fewer = 1 - a.final.instructions / max(a.parsed.instructions, 1)
    fewer_k = 1 - a.final.kernels / max(a.parsed.kernels, 1)
    rows.append(_row("total", "", f"{a.seconds * 1e3:.1f}", a.final))
    caption = (f"{fewer:.1%} fewer instructions, {fewer_k:.1%} fewer kernels; FLOPs {a.final.flops / max(a.parsed.flops, 1):.1%} of parsed; "
               f"arena / max-live = {(a.final.arena_bytes or 0) / max(a.final.max_live_bytes, 1):.3f}")
    pruned = pruned_products(loaded.program)  # a file compiled with --prune-2-4 says what it pruned
    if pruned is not None:
        caption += f"; {summary(pruned)}"
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print(f"\n{caption}")
    else:
        show(table(f"analyze {args.model}" + (f" ({args.target} pipeline)" if args.target else ""), COLUMNS, rows, right=COLUMNS[1:], caption=caption))
    if args.json is not None:
        pruning = {"pruned_2_4": [r.as_dict() for r in pruned]} if pruned is not None else {}
        args.json.write_text(json.dumps({"model": args.model, "pipeline": args.target or "generic", **a.as_dict(),
                                         **pruning}, indent=2) + "\n")
    return 0
