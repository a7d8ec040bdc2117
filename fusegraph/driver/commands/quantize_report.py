"""`fusegraph quantize-report MODEL --calibration DIR [--held-out DIR]`: each quantizable layer's
output error when only it is quantized to int8 (quantize/sensitivity.py), worst first, to choose
what `compile --int8 --skip-names` keeps in float. Layers are ONNX node names."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "rank the layers of a model by the output error int8 quantization of each alone causes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..common import add_model_options
    from ..quantize_args import add_calibration_options

    add_model_options(p)
    add_calibration_options(p)
    p.add_argument("--held-out", metavar="DIR", type=Path, help="inputs to measure on (default: the calibration ones)")
    p.add_argument("--held-out-samples", type=int, default=8, metavar="N",
                   help="measure on at most N held-out samples (default 8)")
    p.add_argument("--top", type=int, metavar="N", help="show only the N worst layers")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the report as JSON")


def report(args: argparse.Namespace):
    """The sensitivity rows for the model and options in `args`, shown as a table."""
    from ...errors import InputError
    from ...quantize import sensitivity
    from ..common import load
    from ..quantize_args import quantize_kwargs
    from ..report import fmt, show, status, table

    if args.calibration is None:
        raise InputError("quantize-report needs --calibration DIR (the folder of inputs to calibrate on)")
    program = load(args).program
    kw = quantize_kwargs(args)
    with status("quantizing each layer alone"):
        rows = sensitivity(program, args.calibration, args.held_out, method=kw["method"],
                           per_channel=kw["per_channel"], symmetric=getattr(args, "symmetric", False),
                           activation_type=getattr(args, "activation_type", "int8"), quantize_ops=kw["quantize_ops"],
                           skip_ops=kw["skip_ops"], max_samples=kw["max_samples"], runner=kw["runner"],
                           held_out_samples=args.held_out_samples)
    shown = rows[: args.top + 1] if getattr(args, "top", None) else rows
    show(table(f"{args.model}: int8 sensitivity (one layer quantized at a time)", ["layer", "op", "rel L2", "head"],
               [(r.name, r.op, fmt(r.rel_l2, 3), "kept float" if r.head else "") for r in shown], right=("rel L2",),
               caption="rel L2: the worst output's ||q - f|| / ||f||; (all): every listed layer quantized; "
                       "heads stay float unless --quantize-heads"))
    return rows


def run(args: argparse.Namespace) -> int:
    rows = report(args)
    if args.json is not None:
        args.json.write_text(json.dumps({"model": args.model, "layers": [r.as_dict() for r in rows]}, indent=2) + "\n")
    return 0
