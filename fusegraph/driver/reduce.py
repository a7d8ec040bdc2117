"""A model reducer (`fusegraph reduce`): shrink an ONNX model on which `verify` fails (or compiling
fails) to a small subgraph that still fails the same way, as Polygraphy's `debug reduce` does.

The model's nodes are in topological order. Delta debugging over them, each step a bisection that
keeps a candidate only when it still fails the same way (`Failure.kind`):
1. the tail: the shortest prefix whose frontier tensors (made there, read nowhere after within it)
   as outputs still fail;
2. the head: the latest start from which that prefix, its earlier tensors made graph inputs, fails;
3. the outputs: halved while one half fails alone; then the head again, for those outputs.
Nodes that compute constants (Constant, a weight's shape) are never cut into inputs: converters need
many of them constant. They come along where the kept nodes read them.
A candidate's new inputs take the dtype and shape those tensors had in the reference's run of the
whole model; like `verify`, each candidate runs on generated inputs, so the reduced file fails
`fusegraph verify small.onnx` as it stands, ready for a bug report or a regression test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper


@dataclasses.dataclass(frozen=True)
class Failure:
    kind: str     # "mismatch", or the error's type name (ParseError, CompileError, ...)
    detail: str   # the differing outputs, or the error's message

    def same(self, other: Failure | None) -> bool:
        return other is not None and other.kind == self.kind


def _referenced(node: onnx.NodeProto) -> list[str]:
    """Every tensor name `node` reads, those its subgraphs read from the outer scope included."""
    names = [n for n in node.input if n]
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            inner = {o for n in g.node for o in n.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
            names += [x for n in g.node for x in _referenced(n) if x not in inner]
    return names


class Extractor:
    """Subgraphs of `model`: node ranges, their outputs and inputs, as models of their own."""

    def __init__(self, model: onnx.ModelProto, values: dict[str, np.ndarray]):
        self.model = model
        self.nodes = list(model.graph.node)
        self.values = values  # tensor name -> its value in the reference's run (dtype, shape)
        self.inits = {t.name: t for t in model.graph.initializer}
        self.inputs = {i.name: i for i in model.graph.input}
        self.outputs = {o.name: o for o in model.graph.output}
        # nodes computing constants (Constant, shapes of weights, ...): a cut never makes their tensors
        # inputs, since converters need many of them constant (a Reshape's shape): they come along
        known = set(self.inits)
        self.constant: set[int] = set()
        for k, n in enumerate(self.nodes):
            if all(x in known for x in _referenced(n)) and n.op_type not in _RANDOM:
                self.constant.add(k)
                known.update(n.output)

    def frontier(self, start: int, end: int) -> list[str]:
        """Tensors nodes[start:end] make that none of them reads, and the model's outputs among those made."""
        made = [o for k, n in enumerate(self.nodes[start:end], start) if k not in self.constant for o in n.output if o]
        read = {x for n in self.nodes[start:end] for x in _referenced(n)}
        return [t for t in made if t not in read or t in self.outputs]

    def build(self, start: int, end: int, outputs: Sequence[str]) -> onnx.ModelProto:
        """nodes[start:end] that `outputs` need, as a model: what they read from earlier nodes
        becomes graph inputs."""
        needed, keep = set(outputs), []
        for k in reversed(range(end)):
            n = self.nodes[k]
            if (k >= start or k in self.constant) and any(o in needed for o in n.output):
                keep.append(n)
                needed |= set(_referenced(n))
        keep.reverse()
        made = {o for n in keep for o in n.output}
        reads = list(dict.fromkeys(x for n in keep for x in _referenced(n) if x not in made))
        inputs = [self.inputs[x] if x in self.inputs else self._info(x) for x in reads if x not in self.inits]
        outs = [self.outputs[o] if o in self.outputs else self._info(o) for o in outputs]
        graph = helper.make_graph(keep, f"{self.model.graph.name}_reduced", inputs, outs,
                                  [self.inits[x] for x in reads if x in self.inits])
        m = helper.make_model(graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        m.functions.extend(self.model.functions)
        return m

    def _info(self, name: str) -> onnx.ValueInfoProto:
        v = self.values[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))


_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"})


def _first(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The least k in [lo, hi] with ok(k), given ok(hi) (bisection: ok taken as monotone)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def reduce_model(model: onnx.ModelProto, values: dict[str, np.ndarray],
                 fails: Callable[[onnx.ModelProto], Failure | None],
                 log: Callable[[str], None] = lambda s: None) -> tuple[onnx.ModelProto, Failure]:
    """The smallest failing subgraph found; `fails(candidate)` gives its Failure or None."""
    original = fails(model)
    if original is None:
        from ..errors import InputError

        raise InputError("the model does not fail: nothing to reduce")
    ex = Extractor(model, values)
    n = len(ex.nodes)
    tried: dict[tuple, bool] = {}

    def still(start: int, end: int, outputs: Sequence[str]) -> bool:
        key = (start, end, tuple(outputs))
        if key not in tried:
            usable = all(o in values or o in ex.outputs for o in outputs) and outputs
            tried[key] = bool(usable) and original.same(fails(ex.build(start, end, outputs)))
            log(f"nodes {start}..{end - 1}, {len(outputs)} output(s): {'fails' if tried[key] else 'passes'}")
        return tried[key]

    def head(end: int, outputs: list[str]) -> int:
        return end - _first(1, end, lambda k: k == end or still(end - k, end, outputs))

    end = _first(1, n, lambda e: e == n or still(0, e, ex.frontier(0, e)))
    outputs = ex.frontier(0, end) if end < n else [o.name for o in model.graph.output]
    start = head(end, outputs)
    while len(outputs) > 1:  # halve the outputs while one half fails the same way alone
        half = len(outputs) // 2
        kept = next((part for part in (outputs[:half], outputs[half:]) if still(start, end, part)), None)
        if kept is None:
            break
        outputs = kept
    start = head(end, outputs)  # fewer outputs may need fewer nodes before them
    reduced = ex.build(start, end, outputs)
    return reduced, fails(reduced) or original
