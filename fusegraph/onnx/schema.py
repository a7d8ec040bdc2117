"""Checks of a model against the ONNX operator schemas of its opsets, before any converter runs.

A converter reads the attributes and inputs it knows; without these checks anything else on a node
(an unknown or retired attribute, an extra input, a float where an int belongs, mixed input types)
would be silently ignored or coerced, and the model would run with semantics ONNX does not give it.
Each check raises a ParseError naming the node. Ops without an onnx.defs schema (ONNX Runtime's
com.microsoft contrib ops, custom domains, model-local functions) are left to their converters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import onnx
from onnx import AttributeProto, TensorProto
from onnx.defs import OpSchema, SchemaError

from ..errors import ParseError
from ..ir.shape import Shape

# The oldest default-domain opset fusegraph is tested at: the ONNX backend suite's pytorch-operator
# cases are opset 6 and pass; ONNX Runtime has no kernels for most ops older than that.
MIN_OPSET = 6
# The newest opset of each domain onnx.defs defines (the domain names as in an opset import).
_MAX_OPSETS = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.helper.VERSION_TABLE[-1][3],
               "ai.onnx.training": onnx.helper.VERSION_TABLE[-1][4],
               "ai.onnx.preview.training": onnx.helper.VERSION_TABLE[-1][4],
               "com.microsoft": 1}  # ONNX Runtime's contrib ops: the one version its converters implement
_SINGLE, _OPTIONAL = OpSchema.FormalParameterOption.Single, OpSchema.FormalParameterOption.Optional
_VARIADIC = OpSchema.FormalParameterOption.Variadic


def check_model(model: onnx.ModelProto, opsets: dict[str, int]) -> None:
    """Refuse a model of a newer IR than onnx knows, without a default-domain opset, or with one this
    fusegraph cannot honour."""
    if model.ir_version > onnx.IR_VERSION:
        raise ParseError(f"the model's IR version {model.ir_version} is newer than onnx {onnx.__version__} knows "
                         f"(up to {onnx.IR_VERSION})")
    if "" not in opsets:
        raise ParseError("the model imports no default-domain (ai.onnx) opset: its operators' versions "
                         "are unknown")
    for domain, version in opsets.items():
        newest = _MAX_OPSETS.get(domain)
        if newest is not None and not 1 <= version <= newest:
            raise ParseError(f"opset {version} of domain {domain or 'ai.onnx'!r} is not one fusegraph knows "
                             f"(versions 1 to {newest})")
    if opsets[""] < MIN_OPSET:
        raise ParseError(f"default-domain opset {opsets['']} is older than fusegraph supports "
                         f"(opset {MIN_OPSET} or later; onnx.version_converter can upgrade the model)")


@functools.cache
def schema_for(op_type: str, domain: str, opset: int) -> OpSchema | None:
    """The schema `op_type` has at `opset`; None for ops onnx.defs does not define there. ONNX Runtime
    defines some of those in the default domain (LayerNormalization before opset 17): converters
    handle them."""
    try:
        return onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain=domain)
    except SchemaError:
        return None


def check_node(node, args: Sequence) -> None:
    """Check one node's attributes, input and output counts and input types against its schema.

    `node` is a `Node`; `args` its resolved inputs (instructions, None for absent optional ones)."""
    schema = schema_for(node.op_type, node.domain, node.opset)
    if schema is None:
        return
    where = f"node {node.name!r} ({node.op_type}-{schema.since_version})"
    _check_attributes(node, schema, where)
    _check_arity(node.inputs, schema.inputs, schema.min_input, schema.max_input, "input", where)
    _check_arity(node.outputs, schema.outputs, schema.min_output, schema.max_output, "output", where)
    _check_input_types(node, args, schema, where)


def _check_attributes(node, schema: OpSchema, where: str) -> None:
    for name, a in node.attrs.items():
        if a.ref_attr_name:  # bound when a function is expanded
            continue
        spec = schema.attributes.get(name)
        if spec is None:
            raise ParseError(f"{where}: unknown attribute {name!r}{_retired(node, schema, name)}")
        want = int(spec.type)
        if want != AttributeProto.UNDEFINED and a.type != want:
            raise ParseError(f"{where}: attribute {name!r} must be {AttributeProto.AttributeType.Name(want)}, "
                             f"it is {AttributeProto.AttributeType.Name(a.type)}")
    for name, spec in schema.attributes.items():
        if spec.required and name not in node.attrs:
            raise ParseError(f"{where}: missing required attribute {name!r}")


def _retired(node, schema: OpSchema, name: str) -> str:
    """Where an older version of the op had attribute `name`: which opset removed it, and why to look."""
    newer = schema.since_version
    version = newer - 1
    while version >= 1:
        try:
            old = onnx.defs.get_schema(node.op_type, max_inclusive_version=version, domain=node.domain)
        except SchemaError:
            return ""
        if name in old.attributes:
            as_input = " (it is an input now)" if any(p.name == name for p in schema.inputs) else ""
            return (f": opset {newer} removed it from {node.op_type} ({node.op_type}-{old.since_version} was "
                    f"the last version with it){as_input}; this model imports opset {node.opset}")
        newer, version = old.since_version, old.since_version - 1
    return ""


def _check_arity(names: Sequence[str], formal, least: int, most: int, what: str, where: str) -> None:
    if len(names) > most:
        raise ParseError(f"{where}: {len(names)} {what}s, it takes at most {most}")
    if len(names) < least:
        raise ParseError(f"{where}: {len(names)} {what}s, it needs at least {least}")
    for k, name in enumerate(names):
        param = formal[min(k, len(formal) - 1)] if formal else None
        if name == "" and param is not None and param.option != _OPTIONAL:
            raise ParseError(f"{where}: {what} {k} ({param.name!r}) is required, but its name is empty")


def _check_input_types(node, args: Sequence, schema: OpSchema, where: str) -> None:
    """Each input's type is one its type parameter allows, and inputs sharing a (homogeneous) type
    parameter share one type: Add(float32, int64) is not promoted, it is refused."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    bound: dict[str, tuple[str, int]] = {}
    formal = schema.inputs
    for k, x in enumerate(args):
        if x is None or not formal or not isinstance(x.shape, Shape):
            continue
        param = formal[min(k, len(formal) - 1)]
        got = _type_str(x.shape.dtype.onnx)
        types = allowed.get(param.type_str) or ({param.type_str} if param.type_str.startswith("tensor(") else ())
        if types and got not in types and any(t.startswith("tensor(") for t in types):
            raise ParseError(f"{where}: input {k} ({node.inputs[k]!r}) is {got}, which {param.name!r} "
                             f"does not allow ({', '.join(sorted(types))})")
        if param.option == _VARIADIC and not param.is_homogeneous:
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
