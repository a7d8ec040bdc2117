"""`fusegraph perf MODEL`: compile time, latency percentiles and throughput, optionally against ORT.

With `--compare ort` each engine runs in a process of its own on the same inputs (the compiled
program saved and loaded there; fusegraph.driver.isolated: the process not being timed is stopped,
so neither's threads run during the other's timing), ORT at its defaults (or `--ort-best`: the
fastest of its tuned settings), in alternating rounds after a warm-up; latencies are medians of the
round medians, and the ratio column is fusegraph / ONNX Runtime (see shared BENCHMARKS.md).
`--threads` sets both engines' threads; without it each uses its own default.
"""

from __future__ import annotations

import argparse
import json
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
    p.add_argument("--compare", choices=("ort",),
                   help="also measure ONNX Runtime (at its defaults), each engine in its own process, in turns")
    p.add_argument("--rounds", type=positive_int, default=5, metavar="R",
                   help="with --compare: alternating rounds the runs are split into (default 5)")
    p.add_argument("--ort-best", action="store_true",
                   help="with --compare: ONNX Runtime at the fastest of its tuned settings (each tried first)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    perf_profile.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ..common import usable_cores
    from ..report import num, progress, show, table

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
    first = next(iter(feeds.values()), np.zeros(()))
    batch = int(first.shape[0]) if first.ndim else 1
    setup = {"fusegraph": loaded.parse_s + loaded.compile_s}
    ort_label = ""
    if args.compare == "ort":
        results, ort_label = _compare_isolated(args, loaded, feeds, batch, setup["fusegraph"])
    else:
        with progress(f"measuring ({args.warmup} warm-up runs first)", args.iterations) as bar:
            times = measure({"fusegraph": lambda: program.run(feeds)}, args.iterations, args.warmup,
                            on_round=lambda _: bar.advance())
        results = {"fusegraph": {"compile_s": setup["fusegraph"], **summary(times["fusegraph"], batch)}}

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
        caption = (f"{results['fusegraph']['rounds']} rounds x {results['fusegraph']['runs_per_round']} runs after "
                   f"{args.warmup} warm-up, each engine in its own process; threads: "
                   f"{args.threads or 'each engine its default'}; ORT settings: {ort_label}")
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


def _compare_isolated(args: argparse.Namespace, loaded: Any, feeds: dict[str, np.ndarray], batch: int,
                      fg_setup: float) -> tuple[dict[str, dict[str, Any]], str]:
    """fusegraph (the compiled program, saved and loaded in its process) against ORT, each alone."""
    import tempfile

    from ...runtime.serialize import save
    from ..common import usable_cores
    from ..isolated import engines, measure_rounds, round_summary
    from ..ort import INSTALL_HINT, OrtConfig, PeerError, TargetError, available, tuned_configs
    from ..report import progress, status

    if not available():
        raise TargetError(f"ONNX Runtime is not installed: {INSTALL_HINT}")
    if loaded.source.proto is None:
        raise PeerError(f"{loaded.source.label} is a compiled fusegraph program: ONNX Runtime needs the ONNX model")
    ort_model = loaded.source.path or loaded.source.proto
    config = OrtConfig(intra_op_threads=args.threads or 0)
    rounds = min(args.rounds, args.iterations)
    runs = -(-args.iterations // rounds)
    with tempfile.TemporaryDirectory(prefix="fusegraph-perf-") as tmp:
        fgx = Path(tmp) / "program.fgx"
        save(loaded.program, fgx)
        if args.ort_best:
            candidates = tuned_configs(args.threads or usable_cores())
            best = []
            with status(f"trying {len(candidates)} ONNX Runtime settings"):
                for c in candidates:
                    with engines({"ort": {"engine": "onnxruntime", "model": ort_model, "ort": c.to_json()}},
                                 feeds) as procs:
                        procs["ort"].request(f"warmup {args.warmup}")
                        best.append((float(np.median(procs["ort"].times(max(runs, 3)))), c))
            config = min(best, key=lambda t: t[0])[1]
        specs = {"fusegraph": {"engine": "fusegraph", "model": fgx},
                 "onnxruntime": {"engine": "onnxruntime", "model": ort_model, "ort": config.to_json()}}
        with status("starting fusegraph and ONNX Runtime, each in its own process"), engines(specs, feeds) as procs:
            with progress(f"measuring ({args.warmup} warm-up runs first)", rounds) as bar:
                times = measure_rounds(procs, rounds, runs, args.warmup, on_round=lambda _: bar.advance())
            setup = {"fusegraph": fg_setup, "onnxruntime": procs["onnxruntime"].setup_s}
    return ({name: {"compile_s": setup[name], **round_summary(t, batch)} for name, t in times.items()},
            config.label)


def _ratio(ours: float, theirs: float) -> str:
    r = ratio(ours, theirs)
    return "-" if r != r else f"{r:.2f}"
