"""`fusegraph verify MODEL --per-layer / --bisect`: where a target's outputs go wrong.

--per-layer: every ONNX node's outputs marked as model outputs (driver/layers.py), both sides run,
each tensor compared in node order; prints the first diverging node(s) and a table of the errors of
the diverging layers. --bisect: the pass without which the outputs match, then the first wrong
kernel and the first step departing from the ONNX tensors (driver/bisect.py). Both exit 1 when the
model fails, 0 when it does not.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

ROWS = 20  # diverging layers listed


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("finding the fault")
    g.add_argument("--per-layer", action="store_true",
                   help="compare every ONNX node's outputs (each marked as a model output) and name the "
                        "first diverging node")
    g.add_argument("--bisect", action="store_true",
                   help="find the pass that makes the outputs wrong (disabling each in turn), then the first "
                        "wrong kernel / the first instruction departing from the ONNX tensors")


def _onnx_source(args: argparse.Namespace) -> tuple[Any, dict]:
    from ...errors import InputError
    from ..inputs import load_input_files
    from ..models import resolve_model

    source = resolve_model(args.model)
    if source.proto is None:
        raise InputError(f"{args.model} is a compiled program: --per-layer and --bisect need the ONNX model")
    return source, load_input_files(getattr(args, "input", []))


def _reference(args: argparse.Namespace, source: Any, files: dict, feeds: dict) -> tuple[list, list[str], str]:
    """The reference's outputs of `source` for `feeds`: ONNX Runtime's, or the ref target's."""
    from .. import ort
    from ..common import load_source
    from ..report import status

    kind = args.reference
    if kind == "auto":
        kind = "ort" if ort.available() else "ref"
    if kind == "ort":
        with status("running ONNX Runtime"):
            session = ort.OrtSession(source)
            return session.run(feeds), session.output_names, "onnxruntime"
    ref = load_source(args, source, files, target="ref")
    return ref.program.run(feeds), ref.program.output_names, "ref"


def run_per_layer(args: argparse.Namespace) -> int:
    from ..common import compile_options, default_target, load_source
    from ..layers import compare_layers, mark_all
    from ..report import fmt, note, show, table

    source, files = _onnx_source(args)
    marked, marks = mark_all(source.proto)
    msource = dataclasses.replace(source, proto=marked, path=None)
    target = args.target or default_target()
    loaded = load_source(args, msource, files, target=target, options=compile_options(args))
    feeds = loaded.inputs(args.fill, args.seed)
    actual = loaded.run(feeds)
    expected, names, label = _reference(args, msource, files, feeds)
    diffs = compare_layers(loaded.program.output_names, actual, [dict(zip(names, expected))[n] for n in
                           loaded.program.output_names], marks, args.atol, args.rtol)
    bad = [(m, d) for m, d in diffs if not d.ok]
    show(f"{args.model}: {len(diffs)} tensors of {len({m.node for m in marks})} ONNX nodes compared, {target} vs "
         f"{label} (atol {args.atol:g}, rtol {args.rtol:g})")
    if not bad:
        show("every layer matches")
        return 0
    first = bad[0][0].node
    firsts = [m for m, _ in bad if m.node == first]
    show(f"first diverging node: {first.name} ({first.op_type}), output(s) {', '.join(m.tensor for m in firsts)}")
    rows = [(m.node.name, m.node.op_type, m.tensor, fmt(d.max_abs, 3), fmt(d.rel_l2, 3), d.mismatched, d.note)
            for m, d in bad[:ROWS]]
    numeric = ("max abs err", "rel L2 err", "mismatched")
    show(table(f"diverging layers, in node order ({len(bad)} of {len(diffs)})",
               ["node", "op", "tensor", *numeric, "note"], rows, right=numeric))
    note(f"verify --per-layer: {len(bad)} tensor(s) differ from {label}; the first at node {first.name!r}")
    return 1


def run_bisect(args: argparse.Namespace) -> int:
    from ...errors import FusegraphError
    from ...passes.manager import PassManager
    from ...profile import step_info
    from ..bisect import bisect_passes, localize, passes_that_ran
    from ..common import compile_options, default_target, load_source
    from ..layers import mark_all
    from ..report import fmt, note, show, status, table
    from .verify import compare_outputs

    source, files = _onnx_source(args)
    target = args.target or default_target()
    manager = PassManager()
    options = compile_options(args)
    loaded = load_source(args, source, files, target=target, options=options, manager=manager)
    feeds = loaded.inputs(args.fill, args.seed)
    expected, _, label = _reference(args, source, files, feeds)

    def fails(program: Any) -> bool:
        return not all(d.ok for d in compare_outputs(program.output_names, program.run(feeds), expected,
                                                     args.atol, args.rtol))

    if not fails(loaded.program):
        show(f"{args.model}: the outputs on {target} match {label}: nothing to bisect")
        return 0

    def fails_without(name: str) -> bool | str:
        opts = dataclasses.replace(options, disabled_passes=(*options.disabled_passes, name))
        try:
            with status(f"compiling without {name}"):
                return fails(load_source(args, source, files, target=target, options=opts).program)
        except FusegraphError as e:
            return " ".join(str(e).split())

    names = passes_that_ran(manager)
    trials = bisect_passes(names, fails_without)
    show(table(f"{args.model} on {target}: the outputs differ from {label}; each pass disabled in turn",
               ["pass", "outputs without it"], [(t.name, t.outcome) for t in trials]))
    culprits = [t.name for t in trials if t.outcome == "fixes it"]
    show(f"culprit pass(es): {', '.join(culprits)}" if culprits else
         "no single pass: the outputs differ with any one disabled (a kernel, or passes together)")
    marked, _ = mark_all(source.proto)  # the reference's value of every ONNX tensor
    ref_all, ref_names, _ = _reference(args, dataclasses.replace(source, proto=marked, path=None), files, feeds)
    with status("running every step, comparing"):
        kernel, tensor, compared = localize(loaded.program, feeds, dict(zip(ref_names, ref_all)), args.atol, args.rtol)
    for d, title in ((kernel, "first wrong kernel (differs from its op's reference on the same inputs)"),
                     (tensor, f"first instruction departing from the ONNX tensors ({compared} compared)")):
        if d is None:
            show(f"{title}: none")
            continue
        nodes = ", ".join(f"{n.name} ({n.op_type})" for n in d.ins.origin) or "(none)"
        show(f"{title}:", f"  {step_info(d.ins).instruction}", f"  ONNX nodes: {nodes}" +
             (f"; tensor {d.tensor}" if d.tensor else ""),
             f"  max abs err {fmt(d.diff.max_abs, 3)}, rel L2 err {fmt(d.diff.rel_l2, 3)}, "
             f"{d.diff.mismatched} mismatched {d.diff.note}".rstrip())
    note(f"verify --bisect: the outputs differ from {label}" + (f"; culprit: {', '.join(culprits)}" if culprits else ""))
    return 1
