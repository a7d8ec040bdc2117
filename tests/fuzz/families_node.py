"""Node cases: one node of a real or built-in model with its real weights and its inputs' inferred
shapes, mutated at the protobuf level (attribute types and values, unknown attributes, inputs and
outputs dropped or added, element types, initializer dims) and run alone."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

from tests.fuzz.families import Outcome, Skip, family, judge_model, random_feed


# -- node cases from real and built-in models --------------------------------------------------------
def _sources() -> dict[str, tuple[onnx.ModelProto, dict]]:
    """Each source model with all its inputs' dims fixed, and its value infos by name."""
    from fusegraph.models import get_model
    from tests.helpers.real_models import REAL_MODELS

    out = {}
    models = {n: (get_model(n), {}) for n in ("bert_small", "unet")}
    for name, rm in REAL_MODELS.items():
        path = rm.path()
        if path is not None:
            models[name] = (onnx.load(str(path)), rm.input_dims)
    for name, (m, dims) in models.items():
        m.graph.ClearField("value_info")  # exporters' symbolic dims: re-inferred from the fixed inputs
        for vi in m.graph.input:
            if vi.name in dims:
                shape = vi.type.tensor_type.shape
                shape.ClearField("dim")
                for d in dims[vi.name]:
                    shape.dim.add().dim_value = d
            for d in vi.type.tensor_type.shape.dim:
                if not d.HasField("dim_value"):
                    d.dim_value = 2
        inferred = onnx.shape_inference.infer_shapes(m)
        vis = {v.name: v for v in [*inferred.graph.input, *inferred.graph.value_info]}
        out[name] = (m, vis)
    return out


sources = functools.cache(_sources)


_MUTABLE = (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.INTS, AttributeProto.FLOATS,
            AttributeProto.STRING)
# which nodes a family draws from: every node, or those with something for it to mutate
_POOLS: dict[str, Callable] = {
    "any": lambda n, inits: True,
    "attributes": lambda n, inits: any(a.type in _MUTABLE for a in n.attribute),
    "initializers": lambda n, inits: any(i in inits for i in n.input),
}


@functools.cache
def _node_pool(kind: str) -> list[tuple[str, int]]:
    pool = []
    for name, (m, _) in sources().items():
        inits = {i.name for i in m.graph.initializer}
        for k, n in enumerate(m.graph.node):
            if n.op_type != "Constant" and not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
                                                   for a in n.attribute) and _POOLS[kind](n, inits):
                pool.append((name, k))
    return pool


def one_node_model(rng: random.Random, pool: str = "any") -> tuple[onnx.ModelProto, onnx.NodeProto]:
    """A model of one node of a source model: its initializers (and Constant values) stay constants,
    its other inputs become graph inputs of their inferred types."""
    name, k = rng.choice(_node_pool(pool))
    m, vis = sources()[name]
    consts = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = _named(n.attribute[0].t, n.output[0])
    node = onnx.NodeProto()
    node.CopyFrom(m.graph.node[k])
    inputs, inits = [], []
    for i in dict.fromkeys(node.input):
        if not i:
            continue
        if i in consts:
            inits.append(consts[i])
        elif i in vis and vis[i].type.tensor_type.HasField("shape"):
            inputs.append(vis[i])
        else:
            raise Skip(f"{name} node {k}: no type for input {i!r}")
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "fuzz", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=list(m.opset_import), ir_version=m.ir_version)
    return model, model.graph.node[0]


def _named(t: TensorProto, name: str) -> TensorProto:
    c = TensorProto()
    c.CopyFrom(t)
    c.name = name
    return c


def feeds_for(model: onnx.ModelProto, rng: random.Random) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dt = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type in _NP_TYPES else None
        if dt is None:
            raise Skip(f"input {vi.name!r} of type {tt.elem_type}")
        if not all(d.HasField("dim_value") for d in tt.shape.dim):
            raise Skip(f"input {vi.name!r} has symbolic dims")
        feeds[vi.name] = random_feed(rng, np.dtype(dt), [d.dim_value for d in tt.shape.dim])
    return feeds


_NP_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
             TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.INT16}
_INTS = [-(2**63), -(2**31), -3, -1, 0, 1, 2, 3, 7, 2**31, 2**62]
_FLOATS = [float("nan"), float("inf"), -1.0, 0.0, 0.5, 1.0, 1e30]


def _mutate_attribute(rng: random.Random, node: onnx.NodeProto) -> str:
    a = rng.choice([a for a in node.attribute if a.type in _MUTABLE])
    how = rng.choice(["type", "value", "value", "drop"])
    if how == "drop":
        node.attribute.remove(a)
        return f"dropped {a.name}"
    if how == "type":
        kinds = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f", AttributeProto.INTS: "ints",
                 AttributeProto.FLOATS: "floats", AttributeProto.STRING: "s"}
        new = rng.choice([t for t in kinds if t != a.type])
        value = {AttributeProto.INT: 1, AttributeProto.FLOAT: 1.5, AttributeProto.INTS: [1, 2],
                 AttributeProto.FLOATS: [0.5], AttributeProto.STRING: b"x"}[new]
        a.CopyFrom(helper.make_attribute(a.name, value, attr_type=new))
        return f"{a.name} made {AttributeProto.AttributeType.Name(new)}"
    if a.type == AttributeProto.INT:
        a.i = rng.choice(_INTS)
    elif a.type == AttributeProto.FLOAT:
        a.f = rng.choice(_FLOATS)
    elif a.type == AttributeProto.INTS:
        vals = list(a.ints)
        op = rng.choice(["drop", "add", "set"])
        if op == "drop" and vals:
            vals.pop(rng.randrange(len(vals)))
        elif op == "add":
            vals.insert(rng.randrange(len(vals) + 1), rng.choice(_INTS))
        elif vals:
            vals[rng.randrange(len(vals))] = rng.choice(_INTS)
        a.ClearField("ints")
        a.ints.extend(vals)
    elif a.type == AttributeProto.STRING:
        a.s = rng.choice([b"", b"bogus", b"\xff\xfe", a.s.upper()])
    elif a.type == AttributeProto.FLOATS:
        a.floats.append(rng.choice(_FLOATS))
    else:
        raise Skip(f"attribute of type {a.type}")
    return f"{a.name} value changed"


@family("node-ok")
def node_ok(rng: random.Random) -> Outcome:
    """An unmutated node: the baseline every mutation is compared from."""
    model, _ = one_node_model(rng)
    return judge_model(model, feeds_for(model, rng))


@family("node-attr")
def node_attr(rng: random.Random) -> Outcome:
    model, node = one_node_model(rng, "attributes")
    what = _mutate_attribute(rng, node)
    outcome, detail = judge_model(model, feeds_for(model, rng))
    return outcome, f"{node.op_type}: {what}: {detail}"


@family("node-unknown-attr")
def node_unknown_attr(rng: random.Random) -> Outcome:
    model, node = one_node_model(rng)
    name = rng.choice(["bogus", "axes", "axis", "keepdims", "broadcast", "consumed_inputs", "kernel_shape"])
    if any(a.name == name for a in node.attribute):
        raise Skip("the node has it")
    node.attribute.append(helper.make_attribute(name, rng.choice([0, 1, [0, 1]])))
    outcome, detail = judge_model(model, feeds_for(model, rng))
    return outcome, f"{node.op_type} +{name}: {detail}"


@family("node-inputs")
def node_inputs(rng: random.Random) -> Outcome:
    model, node = one_node_model(rng)
    ins = list(node.input)
    how = rng.choice(["drop-last", "blank", "duplicate", "extra", "outputs"])
    if how == "drop-last" and ins:
        ins.pop()
    elif how == "blank" and ins:
        ins[rng.randrange(len(ins))] = ""
    elif how == "duplicate" and ins:
        ins.append(rng.choice(ins))
    elif how == "extra":
        ins.append(rng.choice([i for i in ins if i] or ["nope"]))
    elif how == "outputs":
        outs = list(node.output)
        if rng.random() < 0.5:
            outs.append(outs[0] + "_extra")
            model.graph.output.append(helper.make_empty_tensor_value_info(outs[-1]))
        else:
            outs[0] = ""
        node.ClearField("output")
        node.output.extend(outs)
    node.ClearField("input")
    node.input.extend(ins)
    outcome, detail = judge_model(model, feeds_for(model, rng))
    return outcome, f"{node.op_type} {how}: {detail}"


@family("node-dtype")
def node_dtype(rng: random.Random) -> Outcome:
    """A graph input or initializer of another element type than the model declares."""
    model, node = one_node_model(rng)
    new = rng.choice([TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
                      TensorProto.BOOL, TensorProto.FLOAT, TensorProto.UINT8])
    g = model.graph
    if g.initializer and (not g.input or rng.random() < 0.5):
        t = rng.choice(g.initializer)
        arr = onnx.numpy_helper.to_array(t)
        t.CopyFrom(onnx.numpy_helper.from_array(arr.astype(helper.tensor_dtype_to_np_dtype(new)), t.name))
        what = f"initializer {t.name} as {TensorProto.DataType.Name(new)}"
    elif g.input:
        vi = rng.choice(g.input)
        vi.type.tensor_type.elem_type = new
        what = f"input {vi.name} as {TensorProto.DataType.Name(new)}"
    else:
        raise Skip("no inputs")
    outcome, detail = judge_model(model, feeds_for(model, rng))
    return outcome, f"{node.op_type} {what}: {detail}"


@family("node-init-dims")
def node_init_dims(rng: random.Random) -> Outcome:
    """An initializer whose dims, data type or data disagree."""
    model, node = one_node_model(rng, "initializers")
    if not model.graph.initializer:
        raise Skip("no initializers")
    t = rng.choice(model.graph.initializer)
    how = rng.choice(["negative", "grow", "reverse", "data_type", "truncate"])
    dims = list(t.dims)
    if how == "negative":
        dims = [-3] if not dims else [-d if d else -1 for d in dims]
    elif how == "grow":
        dims = [*dims, 2] if rng.random() < 0.5 else [d + 1 for d in dims] or [2]
    elif how == "reverse":
        dims = dims[::-1] if len(set(dims)) > 1 else [*dims, 1, 1]
    elif how == "data_type":
        t.data_type = rng.choice([0, 99, TensorProto.STRING, TensorProto.DOUBLE, TensorProto.INT8])
    elif t.raw_data:
        t.raw_data = t.raw_data[:len(t.raw_data) // 2]
    else:
        raise Skip("not raw data")
    t.ClearField("dims")
    t.dims.extend(dims)
    outcome, detail = judge_model(model, feeds_for(model, rng))
    return outcome, f"{node.op_type} {t.name} {how}: {detail}"
