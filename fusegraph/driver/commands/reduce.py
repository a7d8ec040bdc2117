"""`fusegraph reduce MODEL -o small.onnx`: shrink a model on which `verify` fails (or compiling
fails) on a target to a small ONNX model that fails the same way (driver/reduce.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..common import add_model_options, add_target_option, compile_options, default_target
from .verify import DEFAULT_ATOL, DEFAULT_RTOL, _tolerance

HELP = "shrink a model that fails verify (or compile) on a target to a minimal failing ONNX model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.onnx", help="where the reduced model goes")
    p.add_argument("--reference", choices=("auto", "ort", "ref"), default="auto",
                   help="what to compare against (default auto: ONNX Runtime if installed, else ref)")
    p.add_argument("--atol", type=_tolerance, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL})")
    p.add_argument("--rtol", type=_tolerance, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL})")
    p.add_argument("-v", "--verbose", action="store_true", help="print every candidate tried")


class _Check:
    """Whether a candidate model fails on the target as `verify` would see it: parse, compile and
    run it on generated inputs and compare with the reference."""

    def __init__(self, args: argparse.Namespace, target: str, reference: str):
        from ..inputs import parse_dim_specs

        self.args, self.target, self.reference = args, target, reference
        self.options = compile_options(args)
        self.dims = parse_dim_specs(args.input_dim)
        self.tries = 0

    def parse(self, model: onnx.ModelProto) -> Any:
        """`model` parsed with the shapes --input-dim / --batch / --default-dim give its inputs."""
        from ... import parse_onnx
        from ..inputs import graph_inputs, resolve_input_dims

        names = {vi.name for vi in graph_inputs(model)}
        dims = resolve_input_dims(model, input_dims={k: v for k, v in self.dims.items() if k in names}, files={},
                                  samples=None, batch=self.args.batch, default_dim=self.args.default_dim)
        return parse_onnx(model, map_input_dims=dims.dims, default_dim_value=self.args.default_dim)

    def feeds(self, program: Any) -> dict[str, np.ndarray]:
        from ..inputs import build_inputs

        return build_inputs(program.get_parameter_shapes(), files={}, samples=None, fill="random",
                            seed=self.args.seed)

    def expected(self, model: onnx.ModelProto, feeds: dict) -> list:
        from ...targets import CompileOptions
        from .. import ort
        from ..models import ModelSource

        if self.reference == "ort":
            return ort.OrtSession(ModelSource("candidate", model)).run(feeds)
        return self.parse(model).compile("ref", CompileOptions(optimize=False)).run(feeds)

    def __call__(self, model: onnx.ModelProto):
        from ...errors import FusegraphError
        from ..ort import PeerError
        from ..reduce import Failure
        from .verify import compare_outputs

        self.tries += 1
        try:
            program = self.parse(model)
            feeds = self.feeds(program)
        except FusegraphError as e:
            return Failure(type(e).__name__, str(e))
        try:
            expected = self.expected(model, feeds)
        except (PeerError, FusegraphError):
            return None  # the reference cannot run it either: not a fusegraph failure
        try:
            actual = program.compile(self.target, self.options).run(feeds)
        except FusegraphError as e:
            return Failure(type(e).__name__, str(e))
        bad = [d.name for d in compare_outputs(program.output_names, actual, expected, self.args.atol, self.args.rtol)
               if not d.ok]
        return Failure("mismatch", ", ".join(bad)) if bad else None


def run(args: argparse.Namespace) -> int:
    from .. import ort
    from ..layers import mark_all
    from ..models import resolve_model
    from ..reduce import reduce_model
    from ..report import note, show, status

    source = resolve_model(args.model)
    if source.proto is None:
        from ...errors import InputError

        raise InputError(f"{args.model} is a compiled program: reduce needs the ONNX model")
    target = args.target or default_target()
    reference = args.reference if args.reference != "auto" else ("ort" if ort.available() else "ref")
    check = _Check(args, target, reference)
    model = source.proto
    with status("running the reference on every tensor"):
        marked, _ = mark_all(model)
        feeds = check.feeds(check.parse(model))
        names = [o.name for o in marked.graph.output]
        values = dict(zip(names, check.expected(marked, feeds)))
    with status(f"reducing {args.model} ({len(model.graph.node)} nodes)"):
        reduced, failure = reduce_model(model, values, check, log=show if args.verbose else (lambda s: None))
    onnx.save(reduced, args.output)
    kept = ", ".join(f"{n.name or n.output[0]} ({n.op_type})" for n in reduced.graph.node[:8])
    more = f" (+{len(reduced.graph.node) - 8} more)" if len(reduced.graph.node) > 8 else ""
    show(f"{args.model}: {len(model.graph.node)} nodes -> {len(reduced.graph.node)} in {args.output} "
         f"({check.tries} candidates compiled on {target}, against {reference})",
         f"nodes: {kept}{more}",
         f"still fails: {failure.kind}" + (f" ({' '.join(failure.detail.split())[:200]})" if failure.detail else ""))
    kept_inputs = {i.name for i in reduced.graph.input}
    shapes = " ".join(f"--input-dim {d}" for d in args.input_dim if d.split("=")[0] in kept_inputs)
    note(f"check it: fusegraph verify {args.output} --target {target} {shapes}".rstrip())
    return 0
