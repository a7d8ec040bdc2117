"""`fusegraph trace MODEL -o trace.json`: a Chrome/Perfetto trace of compiling the model (parse,
every pass, lowering) and of a few runs with every kernel step (`perf --trace` with fewer runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common import (
    add_input_options,
    add_model_options,
    add_target_option,
    compile_options,
    default_target,
    positive_int,
)

HELP = "write a Chrome/Perfetto trace of the compile phases and of runs with every kernel step"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    add_input_options(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.json", help="where the trace goes")
    p.add_argument("-n", "--runs", type=positive_int, default=3, metavar="N", help="runs traced (default 3)")


def run(args: argparse.Namespace) -> int:
    from ...passes.manager import PassManager
    from ...profile import write_chrome_trace
    from ..common import load
    from ..report import show, status
    from .perf_profile import compile_phases

    target = args.target or default_target()
    manager = PassManager()
    loaded = load(args, target=target, options=compile_options(args), manager=manager)
    feeds = loaded.inputs(args.fill, args.seed)
    with status(f"tracing {args.runs} run(s)"):
        prof = loaded.program.executable.profile(feeds, runs=args.runs, warmup=1)
    prof.meta["phases"] = compile_phases(loaded, manager)
    write_chrome_trace(prof, args.output, args.model)
    steps = len(prof.steps)
    show(f"{args.output}: {len(prof.meta['phases'])} compile phases, {args.runs} run(s) of {steps} steps on "
         f"{loaded.target} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0
