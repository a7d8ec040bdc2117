"""ONNX model -> Program. Walks the graph once, calling one converter per node."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import (
    FusegraphError,
    InputError,
    ModelLoadError,
    ParseError,
    ShapeError,
    UnsupportedOpError,
    api_boundary,
)
from ..ir.dtypes import DType
from ..ir.module import Instruction, Module
from ..ir.program import Program
from ..ir.shape import Dim, Shape
from ..ir.symbolic import symbol_name
from . import converters  # noqa: F401  (registers every converter)
from .context import Context
from .converters.sparse import sparse_constant
from .loading import ModelSource, RawWeights, read_model
from .node import Node, check_text, tensor_to_array
from .registry import lookup
from .schema import check_model, check_node

DimSpec = Any  # int | Dim | (min, max) | (min, max, optimals)


class OnnxParser:
    def __init__(self, map_input_dims: Mapping[str, Sequence[int]] | None = None,
                 map_dyn_input_dims: Mapping[str, Sequence[DimSpec]] | None = None,
                 default_dim_value: int | None = None, skip_unknown_operators: bool = False,
                 map_input_values: Mapping[str, Any] | None = None):
        self.map_input_dims = dict(map_input_dims or {})
        self.map_input_values = dict(map_input_values or {})
        self.map_dyn_input_dims = dict(map_dyn_input_dims or {})
        self.symbols: dict[str, tuple[int, int | None]] = {}  # dim_param symbol -> its range
        self.default_dim_value = 1 if default_dim_value is None else int(default_dim_value)
        self.skip_unknown_operators = skip_unknown_operators
        self.defaulted: dict[str, list[str]] = {}  # input -> its symbolic dims set to default_dim_value
        self.program = Program()
        self.const_cache: dict[int, Any] = {}
        self.opsets: dict[str, int] = {}
        self.functions: dict[tuple[str, str], onnx.FunctionProto] = {}

    # -- model ------------------------------------------------------------------------------------
    def parse(self, model: onnx.ModelProto, weights: RawWeights | None = None) -> Program:
        """`model` as a Program; `weights` holds the raw data of the initializers read_model left out."""
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        check_model(model, self.opsets)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        graph = model.graph
        main = self.program.main
        scope: dict[str, Instruction] = {}
        ctx = Context(self, main, self.opsets)
        weights = weights or RawWeights()
        for k, init in enumerate(graph.initializer):
            scope[init.name] = ctx.literal(self._initializer(init, weights.get(k)))
        for sparse in graph.sparse_initializer:
            scope[sparse.values.name] = sparse_constant(ctx, sparse)  # kept sparse (converters/sparse.py)
        for kind, protos in (("graph input", graph.input), ("graph output", graph.output),
                             ("initializer", graph.initializer)):
            for vi in protos:
                check_text(vi, ("name",), f"a {kind}")
        names = [vi.name for vi in graph.input]
        if len(set(names)) != len(names):
            raise ParseError(f"graph inputs {sorted({n for n in names if names.count(n) > 1})} are declared twice")
        for vi in graph.input:
            if vi.name in scope:
                continue  # an initializer listed as an input (opset < 9 style): a constant
            if vi.name in self.map_input_values:
                scope[vi.name] = ctx.literal(self._fixed_value(vi))
                continue
            scope[vi.name] = main.add_parameter(vi.name, self._input_shape(vi))
        try:
            self._parse_nodes(graph, ctx, [scope])
        except ShapeError as e:
            if not self.defaulted:
                raise
            named = "; ".join(f"{k}: {', '.join(repr(s) for s in v)}" for k, v in self.defaulted.items())
            raise ShapeError(f"{e} (the cause may be symbolic dims set to default_dim_value="
                             f"{self.default_dim_value}: {named}; map_input_dims chooses them)") from None
        outs = []
        for o in graph.output:
            if o.name not in scope:
                raise ParseError(f"graph output {o.name!r} is not produced by any node")
            outs.append(scope[o.name])
        main.add_return(*outs)
        self.program.metadata["output_names"] = "\x1f".join(o.name for o in graph.output)
        return self.program

    def _initializer(self, t: onnx.TensorProto, raw: memoryview | None = None):
        try:
            return tensor_to_array(t, raw)
        except ParseError as e:
            raise ModelLoadError(f"initializer {t.name!r}: {e}") from None
        except (ValueError, TypeError, OSError, onnx.checker.ValidationError) as e:  # external data
            raise ModelLoadError(f"initializer {t.name!r} cannot be read: {e}") from None

    def _input_shape(self, vi: onnx.ValueInfoProto) -> Shape:
        name = vi.name
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):  # sequences and optionals: their declared type
            from .types import shape_from_type

            return shape_from_type(vi.type, name)
        try:
            dtype = DType.from_onnx(tt.elem_type)
        except TypeError as e:
            raise ParseError(f"input {name!r}: {e}") from None
        if name in self.map_input_dims:
            return Shape.of(dtype, self.map_input_dims[name])
        if name in self.map_dyn_input_dims:
            dims = [_dim(d) for d in self.map_dyn_input_dims[name]]
            return Shape.dynamic(dtype, self._named(dims, tt.shape.dim))
        lens = [d.dim_value if d.HasField("dim_value") else self.default_dim_value
                for d in tt.shape.dim]
        symbols = [d.dim_param or "?" for d in tt.shape.dim if not d.HasField("dim_value")]
        if symbols:
            self.defaulted[name] = symbols
        return Shape.of(dtype, lens)

    def _named(self, dims: list[Dim], declared) -> list[Dim]:
        """Dynamic dims named by the model's dim_params (ir/symbolic.py: one name is one size, as in
        ONNX). A name the user gave two ranges names only the first; the others get names of their own."""
        out = []
        for k, d in enumerate(dims):
            param = declared[k].dim_param if k < len(declared) and not declared[k].HasField("dim_value") else ""
            if d.is_fixed or d.sym is not None or not any(c.isalnum() for c in param):  # "?": unknown, not a name
                out.append(d)
                continue
            name = symbol_name(param)
            while self.symbols.setdefault(name, (d.min, d.max)) != (d.min, d.max):
                name += "_"
            out.append(Dim(d.min, d.max, d.optimals, name))
        return out

    def _fixed_value(self, vi: onnx.ValueInfoProto) -> np.ndarray:
        """The value map_input_values fixes for input `vi`, checked against its declared type."""
        value = np.asarray(self.map_input_values[vi.name])
        declared = self._input_shape(vi)
        if not isinstance(declared, Shape) or value.dtype != declared.dtype.np:
            raise InputError(f"map_input_values[{vi.name!r}] is {value.dtype}{list(value.shape)}; "
                             f"the input is {declared}")
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and (
                len(dims) != value.ndim
                or any(d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, value.shape))):
            raise InputError(f"map_input_values[{vi.name!r}] has shape {list(value.shape)}; the input is "
                             f"declared {[d.dim_value if d.HasField('dim_value') else '?' for d in dims]}")
        return value

    # -- graphs -----------------------------------------------------------------------------------
    def _parse_nodes(self, graph: onnx.GraphProto, ctx: Context, scopes: list[dict[str, Instruction]]) -> None:
        scope = scopes[-1]

        def resolve(name: str, node: Node) -> Instruction | None:
            if name == "":
                return None
            for s in reversed(scopes):
                if name in s:
                    return s[name]
            raise ParseError(f"node {node.name!r} ({node.op_type}): input {name!r} is not defined")

        for proto in graph.node:
            node = Node(proto, self.opsets.get(proto.domain if proto.domain != "ai.onnx" else "", 1))
            args = [resolve(n, node) for n in node.inputs]
            check_node(node, args)
            for out_name in node.outputs:
                if out_name in scope:  # SSA: a second writer would silently replace the first
                    raise ParseError(f"node {node.name!r} ({node.op_type}): output {out_name!r} is already "
                                     f"{_origin(graph, out_name)}: a tensor has one producer")
            ctx.node = node
            ctx.scopes = scopes  # type: ignore[attr-defined]
            results = self._convert(ctx, node, args)
            for out_name, ins in zip(node.outputs, results):
                if out_name:
                    scope[out_name] = ins
                    if ins.tensor is None and ins.origin:  # not an input passed through (Identity)
                        ins.tensor = out_name
        ctx.node = None

    def _convert(self, ctx: Context, node: Node, args: list[Instruction | None]) -> list[Instruction]:
        fn = lookup(node.domain, node.op_type, node.opset)
        if fn is None and (node.domain, node.op_type) in self.functions:
            from .functions import expand_function

            return expand_function(ctx, node, args, self.functions[(node.domain, node.op_type)])
        if fn is None:
            if self.skip_unknown_operators:
                return self._unknown(ctx, node, args)
            raise UnsupportedOpError(node.op_type, node.domain, node.opset, node.name)
        try:
            out = fn(ctx, node, args)
        except UnsupportedOpError:
            raise
        except FusegraphError as e:
            if f"node {node.name!r}" in str(e):
                raise
            raise type(e)(f"node {node.name!r} ({node.op_type}): {e}") from None
        except (ValueError, TypeError, IndexError, KeyError, ArithmeticError, NotImplementedError) as e:
            raise ParseError(f"node {node.name!r} ({node.op_type}): {type(e).__name__}: {e}") from e
        results = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(results) < len([o for o in node.outputs if o]):
            raise ParseError(f"node {node.name!r} ({node.op_type}): converter gave {len(results)} outputs, "
                             f"the node has {len(node.outputs)}")
        return results

    def _unknown(self, ctx: Context, node: Node, args: list[Instruction | None]) -> list[Instruction]:
        present = [a for a in args if a is not None]
        out = ctx.add("unknown", *present, op_type=node.op_type, domain=node.domain)
        return [out] * max(1, len(node.outputs))

    def parse_subgraph(self, graph: onnx.GraphProto, name: str, parent_ctx: Context,
                       input_shapes: Sequence[Any] | None = None) -> Module:
        """Parse a subgraph into a new submodule whose parameters are the graph's inputs.

        `input_shapes` gives the parameters' shapes where the caller knows them (Loop, Scan);
        otherwise they come from the subgraph's declared input types."""
        mod = self.program.create_module(name, parent_ctx.module)
        ctx = Context(self, mod, self.opsets)
        scope: dict[str, Instruction] = {}
        for init in graph.initializer:
            scope[init.name] = ctx.literal(self._initializer(init))
        for k, vi in enumerate(graph.input):
            shape = input_shapes[k] if input_shapes is not None else self._subgraph_input_shape(vi)
            scope[vi.name] = mod.add_parameter(vi.name, shape)
        outs = self._parse_scoped(graph, ctx, parent_ctx, scope)
        # a subgraph output may be an outer value: the submodule returns its own copy
        mod.add_return(*[ctx.add("identity", o) if o.module is not mod and isinstance(o.shape, Shape) else o
                         for o in outs])
        return mod

    def inline_subgraph(self, graph: onnx.GraphProto, parent_ctx: Context,
                        inputs: Sequence[Instruction] = ()) -> list[Instruction]:
        """Parse a subgraph's nodes into the current module, its inputs bound to `inputs`; return
        its outputs.

        For a branch chosen at parse time (an If whose condition is a constant), and for graphs an
        op applies in place (FlexAttention's score_mod / prob_mod)."""
        if len(graph.input) != len(inputs):
            raise ParseError(f"subgraph {graph.name!r} has {len(graph.input)} inputs, {len(inputs)} given: "
                             "it cannot be inlined")
        scope: dict[str, Instruction] = {vi.name: x for vi, x in zip(graph.input, inputs)}
        for init in graph.initializer:
            scope[init.name] = parent_ctx.literal(self._initializer(init))
        return self._parse_scoped(graph, parent_ctx, parent_ctx, scope)

    def _parse_scoped(self, graph: onnx.GraphProto, ctx: Context, parent_ctx: Context,
                      scope: dict[str, Instruction]) -> list[Instruction]:
        """Parse `graph`'s nodes into `ctx`, names resolved in `scope`, then in the parent's scopes
        (innermost first); return the graph's outputs. The parent's node and scopes are left as
        they were."""
        outer = list(getattr(parent_ctx, "scopes", []))
        scopes = outer + [scope]
        saved = parent_ctx.node
        self._parse_nodes(graph, ctx, scopes)
        if ctx is parent_ctx:  # inlined: the graph's scope ends with it
            parent_ctx.scopes = outer  # type: ignore[attr-defined]
        parent_ctx.node = saved
        outs = []
        for o in graph.output:
            found = next((s[o.name] for s in reversed(scopes) if o.name in s), None)
            if found is None:
                raise ParseError(f"subgraph {graph.name!r}: output {o.name!r} is not defined")
            outs.append(found)
        return outs

    def _subgraph_input_shape(self, vi: onnx.ValueInfoProto):
        from .types import shape_from_type

        return shape_from_type(vi.type, vi.name)


def _origin(graph: onnx.GraphProto, name: str) -> str:
    """What defines `name` in `graph` first, for a duplicate-producer error."""
    if any(i.name == name for i in graph.initializer):
        return "an initializer"
    if any(i.name == name for i in graph.input):
        return "a graph input"
    n = next(n for n in graph.node if name in n.output)
    return f"the output of node {n.name or n.output[0]!r} ({n.op_type})"


def _dim(d: DimSpec) -> Dim:
    if isinstance(d, Dim):
        return d
    if isinstance(d, int):
        return Dim.fixed(d)
    d = tuple(d)
    return Dim(int(d[0]), None if d[1] is None else int(d[1]), tuple(d[2]) if len(d) > 2 else ())


@api_boundary
def parse_onnx(model: ModelSource, *,
               map_input_dims: Mapping[str, Sequence[int]] | None = None,
               map_dyn_input_dims: Mapping[str, Sequence[DimSpec]] | None = None,
               default_dim_value: int | None = None,
               skip_unknown_operators: bool = False,
               map_input_values: Mapping[str, Any] | None = None,
               external_data_dir: str | os.PathLike | None = None) -> Program:
    """Parse an ONNX model (path, bytes or ModelProto) into a Program.

    Inputs with symbolic or unknown dimensions take `default_dim_value` (1) unless
    `map_input_dims` fixes their whole shape or `map_dyn_input_dims` gives dynamic ranges.
    `map_input_values` fixes the values of inputs (arrays of their declared type), as TensorRT fixes
    shape tensors: each becomes a constant, so shapes, ranks and branches that depend on it are
    resolved while parsing (see ValueDependentError), and the program no longer takes that input.
    External data is read from the model's folder, or for bytes and a ModelProto only from
    `external_data_dir` (loading.py says what is refused).
    """
    proto, weights = read_model(model, external_data_dir)
    parser = OnnxParser(map_input_dims, map_dyn_input_dims, default_dim_value, skip_unknown_operators,
                        map_input_values)
    unknown = set(map_input_dims or {}) | set(map_dyn_input_dims or {}) | set(map_input_values or {})
    names = {i.name for i in proto.graph.input}
    if unknown - names:
        raise ParseError(f"map_input_dims/values name unknown input(s) {sorted(unknown - names)}; inputs are {sorted(names)}")
    return parser.parse(proto, weights)
