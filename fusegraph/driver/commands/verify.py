"""`fusegraph verify MODEL`: run a target and a reference on the same inputs and compare every output.

The reference is ONNX Runtime when it is installed, else fusegraph's numpy `ref` target (the
executable specification). An output matches when every element satisfies
|actual - expected| <= atol + rtol * |expected| (numpy's allclose), NaNs in the same places.

With --fp16 the target runs the program through quantize_fp16 (float16 compute, float32 inputs and
outputs) and is compared with the float32 reference. Element-wise tolerances do not fit half precision
(11 significant bits; errors grow with depth, and outputs near zero have no meaningful relative error),
so an output then matches when its relative L2 error ||a - r|| / ||r|| is at most --fp16-tol (default
1e-2; ResNet-50 and BERT of the zoo measure about 1e-3), the measure torch and TensorRT users compare fp16 by.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..common import (
    add_input_options,
    add_model_options,
    add_target_option,
    compile_options,
    load,
    load_on_target,
)
from . import verify_layers, verify_pruned, verify_quantized

HELP = "compare a target's outputs with ONNX Runtime's (or the ref target's); exit 1 on mismatch"
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3
DEFAULT_FP16_TOL = 1e-2


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"a tolerance is a number >= 0, not {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    add_input_options(p)
    p.add_argument("--reference", choices=("auto", "ort", "ref"), default="auto",
                   help="what to compare against (default auto: ONNX Runtime if installed, else ref)")
    p.add_argument("--atol", type=_tolerance, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL})")
    p.add_argument("--rtol", type=_tolerance, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL})")
    p.add_argument("--fp16-tol", type=_tolerance, default=DEFAULT_FP16_TOL,
                   help=f"with --fp16: largest relative L2 error of an output (default {DEFAULT_FP16_TOL})")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the comparison as JSON")
    verify_layers.add_arguments(p)
    verify_quantized.add_arguments(p)


@dataclasses.dataclass
class OutputDiff:
    name: str
    ok: bool
    max_abs: float | None = None
    max_rel: float | None = None
    rms: float | None = None
    rel_l2: float | None = None  # ||actual - expected|| / ||expected||
    mismatched: int = 0     # elements outside the tolerance
    note: str = ""          # why it failed when values could not be compared


def compare_outputs(names: Sequence[str], actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
                    rel_l2_tol: float | None = None) -> list[OutputDiff]:
    """Per output: element-wise allclose, or (with `rel_l2_tol`) relative L2 error at most that."""
    if len(actual) != len(expected):
        return [OutputDiff("(outputs)", False, note=f"{len(actual)} outputs, reference has {len(expected)}")]
    return [compare_one(n, a, e, atol, rtol, rel_l2_tol) for n, a, e in zip(names, actual, expected, strict=True)]


def compare_one(name: str, actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float,
                rel_l2_tol: float | None = None) -> OutputDiff:
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return OutputDiff(name, False, note=f"shape {list(a.shape)}, reference {list(e.shape)}")
    if a.dtype != e.dtype:
        return OutputDiff(name, False, note=f"dtype {a.dtype}, reference {e.dtype}")
    if a.size == 0:
        return OutputDiff(name, True, 0.0, 0.0, 0.0)
    a64, e64 = a.astype(np.float64).ravel(), e.astype(np.float64).ravel()
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    nan_bad, both = nan_a != nan_e, ~(nan_a | nan_e)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        same = a64 == e64  # equal infinities have no finite difference
        diff = np.where(same, 0.0, np.abs(a64 - e64))
        rel = np.where(diff == 0, 0.0, diff / np.abs(e64))
        outside = both & ~(diff <= atol + rtol * np.abs(e64))
    d, r = diff[both], rel[both]
    norm = float(np.sqrt(np.sum(e64[both] ** 2))) if d.size else 0.0
    rel_l2 = float(np.sqrt(np.sum(d * d))) / norm if norm else (0.0 if not d.any() else float("inf"))
    if rel_l2_tol is None:  # element by element
        mismatched = int((nan_bad | outside).sum())
    else:  # half precision: one measure over the whole output, which counts once when it fails
        mismatched = int(nan_bad.sum()) + (not rel_l2 <= rel_l2_tol)
    return OutputDiff(
        name, ok=mismatched == 0,
        max_abs=float(d.max()) if d.size else 0.0,
        max_rel=float(r.max()) if r.size else 0.0,
        rms=float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
        rel_l2=rel_l2,
        mismatched=mismatched,
        note="NaN where the reference has none (or the reverse)" if nan_bad.any() else "",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from .. import ort
    from ..report import fmt, note, show, status, table

    if args.prune_2_4:
        return verify_pruned.run(args)
    if args.int8 or args.fp8:
        return verify_quantized.run(args)
    if args.per_layer:
        return verify_layers.run_per_layer(args)
    if args.bisect:
        return verify_layers.run_bisect(args)
    loaded = load_on_target(args, compile_options(args))  # --fp16: against the float32 reference
    target = loaded.target
    feeds = loaded.inputs(args.fill, args.seed)
    actual = loaded.run(feeds)
    reference = args.reference
    if reference == "auto":
        from ...custom.definition import uses_custom_ops

        # ORT cannot run custom ops: their numpy references (the ref target) are what they are checked against
        reference = ("ort" if ort.available() and loaded.source.proto is not None
                     and not uses_custom_ops(loaded.program) else "ref")
    declared = _declared_feeds(loaded.source.proto, feeds) if args.fp16_io else feeds  # the reference's
    if reference == "ort":
        with status("running ONNX Runtime"):
            expected = ort.OrtSession(loaded.source).run(declared)
        ref_label = "onnxruntime"
    elif loaded.source.compiled is not None and target != "ref":
        # a compiled file holds no ONNX model: its own program, evaluated op by op by the ref target,
        # checks the kernels it runs (with --fp16, both sides compute in float16)
        with status("running the file's program on the ref target"):
            expected = _on_ref(args.model).run(feeds)
        ref_label = "ref (the file's program)"
    else:
        if target == "ref":
            note("note: comparing the ref target with itself (install onnxruntime for an independent reference)")
        expected = load(args, target="ref").program.run(declared)
        ref_label = "ref"
    if args.fp16_io:  # float16 outputs of the model's float32 ones: compared as float32
        actual = [a.astype(np.float32) if a.dtype == np.float16 and np.asarray(e).dtype == np.float32 else a
                  for a, e in zip(map(np.asarray, actual), expected)]
    fp16_tol = args.fp16_tol if args.fp16 else None
    diffs = compare_outputs(loaded.program.output_names, actual, expected, args.atol, args.rtol, fp16_tol)
    rows = [(d.name, "ok" if d.ok else "MISMATCH", fmt(d.max_abs, 3), fmt(d.max_rel, 3), fmt(d.rms, 3),
             fmt(d.rel_l2, 3), d.mismatched, d.note) for d in diffs]
    numeric = ("max abs err", "max rel err", "RMS err", "rel L2 err", "mismatched")
    if args.fp16:
        against = "float16" if loaded.source.compiled is not None else "float32"
        caption = f"float16 against {against}: ok when the relative L2 error <= {args.fp16_tol:g}"
    else:
        caption = f"atol {args.atol:g}, rtol {args.rtol:g}: ok when |a - r| <= atol + rtol * |r| everywhere"
    label = f"{target} fp16" if args.fp16 else target
    show(table(f"{args.model}: {label} vs {ref_label}", ["output", "result", *numeric, "note"], rows,
               right=numeric, caption=caption))
    failed = [d.name for d in diffs if not d.ok]
    if args.json is not None:
        args.json.write_text(json.dumps({
            "model": args.model, "target": target, "fp16": bool(args.fp16), "reference": ref_label,
            "criterion": caption, "ok": not failed, "outputs": [dataclasses.asdict(d) for d in diffs],
        }, indent=2) + "\n")
    if failed:
        note(f"verify failed: {len(failed)} of {len(diffs)} output(s) differ from {ref_label}")
        return 1
    return 0


def _declared_feeds(proto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds as the ONNX model declares them (--fp16-io: the float16 arrays of its float32 inputs,
    as float32: the same values)."""
    if proto is None:
        return feeds
    floats = {i.name for i in proto.graph.input if i.type.tensor_type.elem_type == 1}  # FLOAT
    return {k: v.astype(np.float32) if k in floats and v.dtype == np.float16 else v for k, v in feeds.items()}


def _on_ref(path: str):
    """The compiled program in file `path`, loaded again and lowered by the ref target as it is."""
    from ... import get_target
    from ... import load as load_file
    from ...targets import CompileOptions

    program = load_file(path)
    program.compile(get_target("ref"), CompileOptions(optimize=False))
    return program
