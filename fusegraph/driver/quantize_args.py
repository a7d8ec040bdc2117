"""The quantization options `compile`, `verify` and `quantize-report` share (--int8, --fp8,
--calibration, ...), the 2:4 pruning options of `compile` and `verify` (--prune-2-4), and what they
ask for, run between parse and compile (`preparer`: pruning, then quantization)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def add_calibration_options(p: argparse.ArgumentParser) -> None:
    from ..quantize.ranges import METHODS

    g = p.add_argument_group("calibration")
    g.add_argument("--calibration", metavar="DIR", type=Path,
                   help="calibration inputs: a folder of <input>.npy, of numbered subfolders of them, or of .npz "
                        "files (or one .npz); an array of k batches counts as k samples")
    g.add_argument("--calibration-method", choices=METHODS, default="minmax",
                   help="how activation ranges are chosen (default minmax, as ONNX Runtime's default)")
    g.add_argument("--calibration-samples", type=int, metavar="N", help="use at most N calibration samples")
    g.add_argument("--calibration-runner", choices=("ref", "cpu"), default="ref",
                   help="where calibration runs the float program (default ref; cpu pays off past ~100 samples)")
    g.add_argument("--quantize-ops", metavar="OP[,OP...]", default="convolution,dot",
                   help="ops to quantize: IR names or ONNX op types (default convolution,dot: Conv, MatMul, Gemm)")
    g.add_argument("--skip-ops", metavar="OP[,OP...]", default="", help="op types to keep in float")
    g.add_argument("--skip-names", metavar="NAME[,NAME...]", default="",
                   help="ONNX node or tensor names to keep in float (see `fusegraph quantize-report`), and "
                        "with --prune-2-4 dense")
    g.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor, not per output channel")
    g.add_argument("--symmetric", action="store_true", help="symmetric activations (zero point 0)")
    g.add_argument("--activation-type", choices=("int8", "uint8"), default="int8",
                   help="int8 activations (ONNX Runtime's default) or uint8")
    g.add_argument("--quantize-heads", action="store_true",
                   help="also quantize each output's last conv / matmul (kept float by default: detector and "
                        "classifier heads lose the most)")


def add_quantize_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--int8", action="store_true", help="quantize to int8 with calibration (needs --calibration)")
    p.add_argument("--fp8", action="store_true", help="quantize to float8 e4m3fn with calibration (needs --calibration)")
    p.add_argument("--prune-2-4", action="store_true",
                   help="prune every product's constant weight to 2:4 along K (two largest of every four kept)")
    p.add_argument("--prune-min-size", type=int, metavar="N", default=None,
                   help="with --prune-2-4: leave weights of fewer than N elements dense (default 1024)")
    add_calibration_options(p)


def quantize_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(method=args.calibration_method, per_channel=not args.per_tensor, quantize_ops=_names(args.quantize_ops),
                skip_ops=_names(args.skip_ops), skip_names=_names(args.skip_names), keep_heads=not args.quantize_heads,
                max_samples=args.calibration_samples, runner=args.calibration_runner)


def quantizer(args: argparse.Namespace) -> Callable[[Any], None] | None:
    """What --int8 / --fp8 ask for, as a function of the parsed program; None without them."""
    from ..quantize import quantize_fp8, quantize_int8

    int8, fp8 = getattr(args, "int8", False), getattr(args, "fp8", False)
    if not (int8 or fp8):
        return None
    if int8 and fp8:
        raise InputError("--int8 and --fp8 exclude each other")
    if getattr(args, "fp16", False):
        raise InputError(f"--fp16 and --{'int8' if int8 else 'fp8'} exclude each other")
    if args.calibration is None:
        raise InputError(f"--{'int8' if int8 else 'fp8'} needs --calibration DIR (the folder of inputs to calibrate on)")
    kwargs = quantize_kwargs(args)
    if int8:
        return lambda program: quantize_int8(program, args.calibration, symmetric=args.symmetric,
                                             activation_type=args.activation_type, **kwargs)
    return lambda program: quantize_fp8(program, args.calibration, **kwargs)


def pruner(args: argparse.Namespace) -> Callable[[Any], None] | None:
    """What --prune-2-4 asks for, as a function of the parsed program (in place); None without it."""
    from ..passes.prune_2_4 import DEFAULT_MIN_SIZE, prune_program_2_4, summary
    from .report import note

    if not getattr(args, "prune_2_4", False):
        if getattr(args, "prune_min_size", None) is not None:
            raise InputError("--prune-min-size sets what --prune-2-4 prunes: add --prune-2-4")
        return None
    min_size = DEFAULT_MIN_SIZE if args.prune_min_size is None else args.prune_min_size

    def prune(program: Any) -> None:
        rows = prune_program_2_4(program, _names(args.skip_names), min_size)
        if not any(r.status in ("pruned", "found") for r in rows):
            why = "; ".join(sorted({f"{r.name}: {r.status}" for r in rows})[:5]) or "no product reads a constant weight"
            note(f"warning: --prune-2-4: no product weight of {args.model} can be 2:4 ({why})")
        else:
            note(f"note: {summary(rows)}")

    return prune


def preparer(args: argparse.Namespace) -> Callable[[Any], None] | None:
    """--prune-2-4, then --int8 / --fp8 (calibrated on the pruned program), as one function; None without them."""
    steps = [s for s in (pruner(args), quantizer(args)) if s is not None]
    if not steps:
        return None

    def prepare(program: Any) -> None:
        for step in steps:
            step(program)

    return prepare
