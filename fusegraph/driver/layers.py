"""Layer-wise comparison (`verify --per-layer`): every ONNX node's outputs marked as model outputs,
as Polygraphy's `--mark all` does, then the target and the reference run on that model and each
tensor is compared; the first node whose output diverges is named.

Marking makes each tensor a program output, so no fusion crosses it: a wrong fusion may vanish
under the marks (then `--bisect` finds it in the program as compiled).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx

from ..ir.provenance import OnnxNode


@dataclasses.dataclass(frozen=True)
class Mark:
    node: OnnxNode
    tensor: str


def mark_all(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Mark]]:
    """A copy of `model` whose outputs are its own followed by every tensor a top-level node makes
    (in node order, each once); and the node each tensor comes from."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    g = marked.graph
    have = {o.name for o in g.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    marks = []
    for k, node in enumerate(g.node):
        who = OnnxNode(node.name or (node.output[0] if node.output else f"{node.op_type}_{k}"), node.op_type)
        for out in node.output:
            if not out:
                continue
            marks.append(Mark(who, out))
            if out not in have:
                have.add(out)
                g.output.append(onnx.ValueInfoProto(name=out))  # types left to the runtimes
    return marked, marks


def compare_layers(names: list[str], actual: list[Any], expected: list[Any], marks: list[Mark],
                   atol: float, rtol: float) -> list[tuple[Mark, Any]]:
    """(mark, OutputDiff) per marked tensor, in node order."""
    from .commands.verify import compare_one

    got = dict(zip(names, actual))
    want = dict(zip(names, expected))
    return [(m, compare_one(m.tensor, got[m.tensor], want[m.tensor], atol, rtol)) for m in marks
            if m.tensor in got and m.tensor in want]
