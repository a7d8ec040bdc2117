"""`fusegraph verify MODEL --int8 --calibration DIR [--held-out DIR]`: the quantized program against
the float one on held-out inputs, in the terms of the model's task (quantize/accuracy.py): relative
L2 per output, top-1 / top-5 agreement for classifiers, box agreement for YOLO-style detectors,
decoded-text agreement for CTC recognizers. Both programs run on --target. Without --held-out the
calibration samples are used (and the report says so: agreement on them flatters the quantizer).
The held-out options are also those of `verify --prune-2-4` (verify_pruned.py); the comparison
both make is driver/accuracy_report.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..accuracy_report import DEFAULT_QUANT_TOL


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ...quantize.accuracy import TASKS
    from ..quantize_args import add_quantize_options

    add_quantize_options(p)
    g = p.add_argument_group("accuracy against the float program (--int8 / --fp8 / --prune-2-4)")
    g.add_argument("--held-out", metavar="DIR", type=Path,
                   help="inputs to measure on, laid out as --calibration (default: the calibration inputs; "
                        "with --prune-2-4, --held-out-samples inputs made from --seed)")
    g.add_argument("--held-out-samples", type=int, metavar="N",
                   help="measure on at most N held-out samples (--prune-2-4 without --held-out: N made, default 4)")
    g.add_argument("--task", choices=TASKS, default="auto",
                   help="what the outputs are (default auto: [N,C] logits classify, [N,4+C,A] detect, "
                        "[N,T,V] probabilities ctc)")
    g.add_argument("--quant-tol", type=float, default=DEFAULT_QUANT_TOL,
                   help=f"largest relative L2 error of an output (default {DEFAULT_QUANT_TOL})")
    g.add_argument("--sensitivity", action="store_true",
                   help="also report each layer's error when only it is quantized (as quantize-report)")


def run(args: argparse.Namespace) -> int:
    from ...quantize.calibration import iter_calibration
    from ..accuracy_report import finish, measure
    from ..common import compile_options, load_on_target
    from ..quantize_args import quantizer
    from ..report import note

    quantize = quantizer(args)
    floating = load_on_target(args, compile_options(args))
    quantized = load_on_target(args, compile_options(args), prepare=quantize)
    source = args.held_out if args.held_out is not None else args.calibration
    if args.held_out is None:
        note("note: no --held-out: measuring on the calibration inputs themselves")
    feeds = list(iter_calibration(floating.program, source, args.held_out_samples))
    label = "int8" if args.int8 else "fp8"
    scheme = quantized.program.metadata.get("quantized", label)
    results = measure(args, floating, quantized, feeds, f"{label} vs float32", scheme)
    layers = _sensitivity(args) if args.sensitivity else None
    return finish(args, results, {
        "target": quantized.target, "quantization": label, "scheme": scheme, "held_out": str(source),
        "samples": len(feeds), **({"sensitivity": [row.as_dict() for row in layers]} if layers is not None else {}),
    })


def _sensitivity(args: argparse.Namespace):
    from .quantize_report import report

    return report(args)
