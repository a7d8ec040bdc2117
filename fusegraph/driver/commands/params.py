"""`fusegraph params MODEL`: the inputs and outputs, as declared by the model and as parsed."""

from __future__ import annotations

import argparse

from ..common import add_model_options, load

HELP = "list a model's inputs and outputs with their shapes and dtypes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)


def run(args: argparse.Namespace) -> int:
    from ..inputs import declared_dims, graph_inputs
    from ..report import dims_str, show, table

    loaded = load(args)
    program, proto = loaded.program, loaded.source.proto
    declared = {}
    if proto is not None:  # a compiled .fgx file keeps no ONNX declarations
        declared = {vi.name: dims_str(declared_dims(vi)) for vi in graph_inputs(proto)}
        declared.update({vi.name: dims_str(declared_dims(vi)) for vi in proto.graph.output})
    rows = []
    for name, shape in program.get_parameter_shapes().items():
        rows.append(("input", name, _dtype(shape), _dims(shape), declared.get(name, "-")))
    for name, shape in zip(program.output_names, program.get_output_shapes(), strict=True):
        rows.append(("output", name, _dtype(shape), _dims(shape), declared.get(name, "-")))
    show(table(args.model, ["kind", "name", "dtype", "shape", "declared"], rows))
    return 0


def _dtype(shape) -> str:
    return str(shape.dtype) if hasattr(shape, "dtype") else "-"


def _dims(shape) -> str:
    # dims print as ranges ({1..8}) when dynamic; tuples and sequences print whole
    return "[" + ",".join(str(d) for d in shape.dims) + "]" if hasattr(shape, "dims") else str(shape)
