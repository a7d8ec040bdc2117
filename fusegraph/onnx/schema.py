"""Checks of a model against the ONNX operator schemas of its opsets, before any converter runs.

A converter reads the attributes and inputs it knows; without these checks anything else on a node
(an unknown or retired attribute, an extra input, a float where an int belongs, mixed input types)
would be silently ignored or coerced, and the model would run with semantics ONNX does not give it.
Each check raises a ParseError naming the node. Ops without an onnx.defs schema (ONNX Runtime's
com.microsoft contrib ops, custom domains, model-local functions) are left to their converters.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import onnx
from onnx import AttributeProto, TensorProto
from onnx.defs import OpSchema, SchemaError

from ..errors import ParseError
from ..ir.shape import Shape

# The oldest default-domain opset fusegraph implements: the ONNX backend suite's pytorch-operator cases
# are opset 6 and pass. A model of an older opset is refused where it uses an op that changed since
# (Relu-1, Add-1: consumed_inputs, legacy broadcasting); ops unchanged since (Not-1) are today's.
MIN_OPSET = 6
# The newest opset of each domain onnx.defs defines (the domain names as in an opset import).
_MAX_OPSETS = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.helper.VERSION_TABLE[-1][3],
               "ai.onnx.training": onnx.helper.VERSION_TABLE[-1][4],
               "ai.onnx.preview.training": onnx.helper.VERSION_TABLE[-1][4],
               "com.microsoft": 1}  # ONNX Runtime's contrib ops: the one version its converters implement
_OPTIONAL = OpSchema.FormalParameterOption.Optional
_VARIADIC = OpSchema.FormalParameterOption.Variadic


def check_model(model: onnx.ModelProto, opsets: dict[str, int]) -> None:
    """Refuse a model of a newer IR than onnx knows, without a default-domain opset, or with one this
    fusegraph cannot honour."""
    if model.ir_version > onnx.IR_VERSION:
        raise ParseError(f"the model's IR version {model.ir_version} is newer than onnx {onnx.__version__} knows "
                         f"(up to {onnx.IR_VERSION})")
    if "" not in opsets and any(n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise ParseError("the model imports no default-domain (ai.onnx) opset, but its nodes use that domain: "
                         "their versions are unknown")
    for domain, version in opsets.items():
        newest = _MAX_OPSETS.get(domain)
        if newest is not None and not 1 <= version <= newest:
            raise ParseError(f"opset {version} of domain {domain or 'ai.onnx'!r} is not one fusegraph knows "
                             f"(versions 1 to {newest})")


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    type_str: str          # a type parameter ("T") or a type ("tensor(int64)")
    types: frozenset[str]  # what it allows ("tensor(float)", "seq(tensor(float))", ...)
    optional: bool
    variadic: bool
    homogeneous: bool


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the checks read of an OpSchema, as plain Python: onnx.defs builds its attribute and
    parameter lists anew on every access, which would cost more than the parse itself."""
    op_type: str
    domain: str
    since: int
    attributes: dict[str, tuple[int, bool]]  # name: (AttributeProto type, required)
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    inputs_range: tuple[int, int]
    outputs_range: tuple[int, int]


@functools.cache
def schema_for(op_type: str, domain: str, opset: int) -> Spec | None:
    """The schema `op_type` has at `opset`; None for ops onnx.defs does not define there. ONNX Runtime
    defines some of those in the default domain (LayerNormalization before opset 17): converters
    handle them."""
    try:
        s = onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain=domain)
    except SchemaError:
        return None
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints}

    def params(formal) -> tuple[Param, ...]:
        return tuple(Param(p.name, p.type_str, allowed.get(p.type_str) or frozenset([p.type_str]),
                           p.option == _OPTIONAL, p.option == _VARIADIC, p.is_homogeneous) for p in formal)

    return Spec(op_type, domain, s.since_version, {n: (int(a.type), a.required) for n, a in s.attributes.items()},
                params(s.inputs), params(s.outputs), (s.min_input, s.max_input), (s.min_output, s.max_output))


def check_node(node, args: Sequence) -> None:
    """Check one node's attributes, input and output counts and input types against its schema.

    `node` is a `Node`; `args` its resolved inputs (instructions, None for absent optional ones)."""
    spec = schema_for(node.op_type, node.domain, node.opset)
    if spec is None:
        return
    where = f"node {node.name!r} ({node.op_type}-{spec.since})"
    if node.opset < MIN_OPSET and node.domain == "":
        modern = schema_for(node.op_type, node.domain, MIN_OPSET)
        if modern is not None and modern.since != spec.since:  # the op changed since: the old one is not implemented
            raise ParseError(f"{where}: opset {node.opset} gives {node.op_type}-{spec.since}, older than fusegraph "
                             f"supports ({node.op_type}-{modern.since} of opset {MIN_OPSET} on; "
                             "onnx.version_converter can upgrade the model)")
    _check_attributes(node, spec, where)
    _check_arity(node.inputs, spec.inputs, spec.inputs_range, "input", where)
    _check_arity(node.outputs, spec.outputs, spec.outputs_range, "output", where)
    _check_input_types(node, args, spec, where)


def _check_attributes(node, spec: Spec, where: str) -> None:
    for name, a in node.attrs.items():
        if a.ref_attr_name:  # bound when a function is expanded
            continue
        if name not in spec.attributes:
            raise ParseError(f"{where}: unknown attribute {name!r}{_retired(node, spec, name)}")
        want = spec.attributes[name][0]
        if want != AttributeProto.UNDEFINED and a.type != want:
            raise ParseError(f"{where}: attribute {name!r} must be {AttributeProto.AttributeType.Name(want)}, "
                             f"it is {AttributeProto.AttributeType.Name(a.type)}")
    for name, (_, required) in spec.attributes.items():
        if required and name not in node.attrs:
            raise ParseError(f"{where}: missing required attribute {name!r}")


def _retired(node, spec: Spec, name: str) -> str:
    """Where an older version of the op had attribute `name`: which opset removed it."""
    newer = spec.since
    while newer > 1:
        old = schema_for(node.op_type, node.domain, newer - 1)
        if old is None:
            return ""
        if name in old.attributes:
            as_input = " (it is an input now)" if any(p.name == name for p in spec.inputs) else ""
            return (f": opset {newer} removed it from {node.op_type} ({node.op_type}-{old.since} was "
                    f"the last version with it){as_input}; this model imports opset {node.opset}")
        newer = old.since
    return ""


def _check_arity(names: Sequence[str], formal: tuple[Param, ...], bounds: tuple[int, int], what: str,
                 where: str) -> None:
    least, most = bounds
    if len(names) > most:
        raise ParseError(f"{where}: {len(names)} {what}s, it takes at most {most}")
    if len(names) < least:
        raise ParseError(f"{where}: {len(names)} {what}s, it needs at least {least}")
    for k, name in enumerate(names):
        param = formal[min(k, len(formal) - 1)] if formal else None
        if name == "" and param is not None and not param.optional:
            raise ParseError(f"{where}: {what} {k} ({param.name!r}) is required, but its name is empty")


def _check_input_types(node, args: Sequence, spec: Spec, where: str) -> None:
    """Each input's type is one its type parameter allows, and inputs sharing a (homogeneous) type
    parameter share one type: Add(float32, int64) is not promoted, it is refused."""
    bound: dict[str, tuple[str, int]] = {}
    formal = spec.inputs
    for k, x in enumerate(args):
        if x is None or not formal or not isinstance(x.shape, Shape):
            continue
        param = formal[min(k, len(formal) - 1)]
        got = _type_str(x.shape.dtype.onnx)
        if got not in param.types and any(t.startswith("tensor(") for t in param.types):
            raise ParseError(f"{where}: input {k} ({node.inputs[k]!r}) is {got}, which {param.name!r} "
                             f"does not allow ({', '.join(sorted(param.types))})")
        if param.variadic and not param.homogeneous:
            continue
        key = param.type_str
        if key in bound and bound[key][0] != got:
            j = bound[key][1]
            raise ParseError(f"{where}: inputs {j} ({node.inputs[j]!r}) and {k} ({node.inputs[k]!r}) must have "
                             f"one type ({key}), they are {bound[key][0]} and {got}")
        bound.setdefault(key, (got, k))


@functools.cache
def _type_str(elem_type: int) -> str:
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
