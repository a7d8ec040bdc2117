"""`fusegraph perf MODEL --profile / --trace FILE.json`: per-step times of the compiled program.

Each kernel step is timed by the target's instrumented run loop (profile/; on gpu by CUDA events,
with the host's launch time apart), and named by its IR instruction and the ONNX nodes it computes.
The tables roll the median step times up by ONNX op type and by kernel; the trace holds the compile
phases (parse, every pass, lowering) and every step of every profiled run, for Perfetto or
chrome://tracing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

TOP = 15  # rows of the per-step table


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("per-step profile")
    g.add_argument("--profile", action="store_true",
                   help="time every kernel step; print the slowest steps and roll-ups by ONNX op type and by kernel")
    g.add_argument("--trace", type=Path, metavar="FILE.json",
                   help="write a Chrome/Perfetto trace (compile phases, then every step of the profiled runs)")
    g.add_argument("--profile-json", type=Path, metavar="FILE",
                   help="write the per-step profile and its roll-ups as JSON")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.profile or args.trace or args.profile_json)


def compile_phases(loaded: Any, manager: Any) -> list[tuple[str, int, int, str]]:
    """(name, start ns, end ns, lane) of parsing, each pass that ran, the lowering after them and the
    phases the target recorded inside it (Executable.compile_log: the gpu target's kernel compiles,
    each in the lane of its compile thread)."""
    from ...profile.phases import MAIN

    parse_end = loaded.start_ns + int(loaded.parse_s * 1e9)
    phases = [("parse", loaded.start_ns, parse_end, MAIN)]
    end = parse_end
    for r in manager.records if manager is not None else ():
        end = r.start_ns + int(r.seconds * 1e9)
        phases.append((f"pass {r.name}", r.start_ns, end, MAIN))
    phases.append(("lower", end, max(end, parse_end + int(loaded.compile_s * 1e9)), MAIN))
    log = loaded.program.executable.compile_log
    return phases + [(name, t0, t1, lane) for name, lane, t0, t1 in log]


def run(args: argparse.Namespace, loaded: Any, feeds: dict, manager: Any, target: str) -> None:
    from ...profile import write_chrome_trace
    from ...profile.summary import as_dict
    from ..report import show, status

    runs = args.iterations
    with status(f"profiling every step ({runs} runs)"):
        prof = loaded.program.executable.profile(feeds, runs=runs, warmup=min(args.warmup, 1))
    prof.meta["phases"] = compile_phases(loaded, manager)
    if args.profile:
        show(*profile_tables(prof, f"{args.model} on {target}"))
    if args.trace is not None:
        write_chrome_trace(prof, args.trace, args.model)
        show(f"trace: {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if args.profile_json is not None:
        args.profile_json.write_text(json.dumps({"model": args.model, **as_dict(prof)}, indent=2) + "\n")


def profile_tables(prof: Any, title: str) -> list[Any]:
    """The roll-ups by ONNX op type and by kernel, the slowest steps (and on gpu their launches)."""
    from ...profile import by_kernel, by_onnx_op, step_rows
    from ..report import num, table

    def pct(x: float) -> str:
        return f"{x:.1%}"

    def ms(x: float) -> str:
        return num(x * 1e3)

    cols = ("ms", "share", "steps", "GFLOP/s", "GB/s")
    group = [(r.key, ms(r.seconds), pct(r.share), r.count, num(r.gflops), num(r.gbytes)) for r in by_onnx_op(prof)]
    kern = [(r.key, ms(r.seconds), pct(r.share), r.count, num(r.gflops), num(r.gbytes)) for r in by_kernel(prof)]
    steps = [(r.kernel, r.nodes, ms(r.seconds), pct(r.share), num(r.gflops), num(r.gbytes), r.key)
             for r in step_rows(prof)[:TOP]]
    total = sum(prof.run_seconds()) / max(len(prof.runs), 1)
    caption = f"median over {len(prof.runs)} profiled runs; a run took {total * 1e3:.3f} ms with the timers"
    out = [table(f"{title}: by ONNX op type", ["ONNX op", *cols], group, right=cols, caption=caption),
           table(f"{title}: by kernel", ["kernel", *cols], kern, right=cols)]
    scols = ("ms", "share", "GFLOP/s", "GB/s")
    out.append(table(f"{title}: the {min(TOP, len(steps))} slowest steps", ["kernel", "ONNX nodes", *scols,
                     "instruction"], steps, right=scols))
    if prof.lanes.get("host"):
        host = [(r.kernel, r.nodes, ms(r.seconds), pct(r.share)) for r in step_rows(prof, "host")[:TOP]]
        out.append(table(f"{title}: host launch time of the slowest launches", ["kernel", "ONNX nodes", "ms", "share"],
                         host, right=("ms", "share")))
    return out
