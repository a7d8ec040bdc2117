"""`fusegraph verify MODEL --int8 --calibration DIR [--held-out DIR]`: the quantized program against
the float one on held-out inputs, in the terms of the model's task (quantize/accuracy.py): relative
L2 per output, top-1 / top-5 agreement for classifiers, box agreement for YOLO-style detectors,
decoded-text agreement for CTC recognizers. Both programs run on --target. Without --held-out the
calibration samples are used (and the report says so: agreement on them flatters the quantizer).

An output passes when its relative L2 error is at most --quant-tol; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_QUANT_TOL = 0.1


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ...quantize.accuracy import TASKS
    from ..quantize_args import add_quantize_options

    add_quantize_options(p)
    g = p.add_argument_group("quantized accuracy (--int8 / --fp8)")
    g.add_argument("--held-out", metavar="DIR", type=Path,
                   help="inputs to measure on, laid out as --calibration (default: the calibration inputs)")
    g.add_argument("--held-out-samples", type=int, metavar="N", help="measure on at most N held-out samples")
    g.add_argument("--task", choices=TASKS, default="auto",
                   help="what the outputs are (default auto: [N,C] logits classify, [N,4+C,A] detect, "
                        "[N,T,V] probabilities ctc)")
    g.add_argument("--quant-tol", type=float, default=DEFAULT_QUANT_TOL,
                   help=f"largest relative L2 error of an output (default {DEFAULT_QUANT_TOL})")
    g.add_argument("--sensitivity", action="store_true",
                   help="also report each layer's error when only it is quantized (as quantize-report)")


def run(args: argparse.Namespace) -> int:
    from ...quantize.accuracy import compare
    from ...quantize.calibration import iter_calibration
    from ..common import compile_options, load_on_target
    from ..quantize_args import quantizer
    from ..report import fmt, note, show, status, table

    quantize = quantizer(args)
    floating = load_on_target(args, compile_options(args))
    quantized = load_on_target(args, compile_options(args), prepare=quantize)
    source = args.held_out if args.held_out is not None else args.calibration
    if args.held_out is None:
        note("note: no --held-out: measuring on the calibration inputs themselves")
    feeds = list(iter_calibration(floating.program, source, args.held_out_samples))
    with status(f"running {len(feeds)} held-out samples on {floating.target}"):
        ref = [floating.program.run(f) for f in feeds]
        got = [quantized.program.run(f) for f in feeds]
    results = compare(floating.program.output_names, got, ref, args.task)
    keys = sorted({k for r in results for k in r.metrics})
    rows = [(r.name, r.task, "ok" if r.rel_l2 <= args.quant_tol else "MISMATCH", fmt(r.rel_l2, 3),
             *[fmt(r.metrics.get(k), 4) if k in r.metrics else "" for k in keys]) for r in results]
    label = "int8" if args.int8 else "fp8"
    scheme = quantized.program.metadata.get("quantized", label)
    show(table(f"{args.model}: {label} vs float32 on {quantized.target}, {len(feeds)} held-out samples",
               ["output", "task", "result", "rel L2", *keys], rows, right=("rel L2", *keys),
               caption=f"{scheme}; ok when rel L2 <= {args.quant_tol:g}"))
    layers = _sensitivity(args) if args.sensitivity else None
    failed = [r.name for r in results if not r.rel_l2 <= args.quant_tol]
    if args.json is not None:
        args.json.write_text(json.dumps({
            "model": args.model, "target": quantized.target, "quantization": label, "scheme": scheme,
            "held_out": str(source), "samples": len(feeds), "quant_tol": args.quant_tol, "ok": not failed,
            "outputs": [r.as_dict() for r in results],
            **({"sensitivity": [row.as_dict() for row in layers]} if layers is not None else {}),
        }, indent=2) + "\n")
    if failed:
        note(f"verify failed: {len(failed)} of {len(results)} output(s) have rel L2 above {args.quant_tol:g}")
        return 1
    return 0


def _sensitivity(args: argparse.Namespace):
    from .quantize_report import report

    return report(args)
