"""`fusegraph perf MODEL`: compile time, latency percentiles and throughput, optionally against ORT.

With `--compare ort` both run in this process on the same inputs and thread count, alternating
run by run after a warm-up (and swapping who goes first each round), so machine drift hits both
alike; the ratio column is fusegraph / ONNX Runtime (see shared BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..common import (
    add_input_options,
    add_model_options,
    add_target_option,
    compile_options,
    default_target,
    load,
    positive_int,
)
from ..timing import measure, ratio, summary
from . import perf_profile

HELP = "measure compile time, latency and throughput (--compare ort: against ONNX Runtime)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    add_input_options(p)
    p.add_argument("-n", "--iterations", type=positive_int, default=20, metavar="ITER",
                   help="timed runs (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed runs first (default 3)")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="threads for fusegraph and the peer (default: all usable cores)")
    p.add_argument("--compare", choices=("ort",), help="also measure ONNX Runtime, alternating with fusegraph")
    p.add_argument("--ort-spin", action="store_true",
                   help="let ONNX Runtime's idle workers spin (its default; off: they would hold a core through "
                        "fusegraph's runs)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    perf_profile.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ..common import usable_cores
    from ..ort import OrtSession
    from ..report import num, progress, show, status, table

    target = args.target or default_target()
    threads = args.threads or usable_cores()
    manager = None
    if perf_profile.wanted(args):  # the trace shows each pass: records with their start times
        from ...passes.manager import PassManager

        manager = PassManager()
    options = compile_options(args, threads=threads)
    loaded = load(args, target=target, options=options, manager=manager, warn_defaults=True)
    target = loaded.target or target  # a compiled .fgx file runs on the target it was compiled for
    feeds = loaded.inputs(args.fill, args.seed)
    program = loaded.program
    runners: dict[str, Callable[[], Any]] = {"fusegraph": lambda: program.run(feeds)}
    setup = {"fusegraph": loaded.parse_s + loaded.compile_s}
    if args.compare == "ort":
        with status("creating the ONNX Runtime session"):
            t0 = time.perf_counter()
            session = OrtSession(loaded.source, threads, spin=args.ort_spin)
            setup["onnxruntime"] = time.perf_counter() - t0
        runners["onnxruntime"] = lambda: session.run(feeds)
    with progress(f"measuring ({args.warmup} warm-up runs first)", args.iterations) as bar:
        times = measure(runners, args.iterations, args.warmup, on_round=lambda _: bar.advance())
    first = next(iter(feeds.values()), np.zeros(()))
    batch = int(first.shape[0]) if first.ndim else 1
    results = {name: {"compile_s": setup[name], **summary(t, batch)} for name, t in times.items()}

    rows = [
        ("compile (s)", "compile_s"), ("latency median (ms)", "median_ms"), ("latency p90 (ms)", "p90_ms"),
        ("latency p99 (ms)", "p99_ms"), (f"throughput (batch {batch}, /s)", "throughput"),
    ]
    columns = [f"fusegraph ({target})", *(["onnxruntime", "ratio"] if "onnxruntime" in results else [])]
    body = []
    for label, key in rows:
        cells = [num(results[name][key]) for name in results]
        if "onnxruntime" in results:
            cells.append(_ratio(results["fusegraph"][key], results["onnxruntime"][key]))
        body.append((label, *cells))
    caption = f"{args.iterations} runs after {args.warmup} warm-up, {threads} thread(s)"
    if "onnxruntime" in results:
        caption += f", alternating; ORT workers {'spinning' if args.ort_spin else 'not spinning (--ort-spin)'}"
    show(table(f"{args.model} on {target}", ["", *columns], body, right=columns, caption=caption))
    if "onnxruntime" in results:
        show("compile: fusegraph parse + compile; ONNX Runtime session creation.",
             "ratio = fusegraph / ONNX Runtime: below 1 fusegraph is faster (for throughput: above 1).")
    if perf_profile.wanted(args):
        perf_profile.run(args, loaded, feeds, manager, target)
    if args.json is not None:
        meta = {"model": args.model, "target": target, "threads": threads, "batch": batch,
                "iterations": args.iterations, "warmup": args.warmup}
        args.json.write_text(json.dumps({**meta, "results": results}, indent=2) + "\n")
    return 0


def _ratio(ours: float, theirs: float) -> str:
    r = ratio(ours, theirs)
    return "-" if r != r else f"{r:.2f}"
