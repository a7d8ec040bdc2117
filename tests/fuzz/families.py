"""Fuzz case families: each makes one hostile input from a seed, runs it and names the outcome.

Families (FAMILIES): `node-*` take one node of a real or built-in model with its real weights and
inputs' inferred shapes, mutate it at the protobuf level and run it alone; `model-*` damage a whole
small model (protobuf fields, serialized bytes); `run-inputs` feeds bad inputs to a compiled program;
`fgx-*` damage a saved program (raw bytes, or resealed so the checksums hold). A case that fusegraph
runs is also given to ONNX Runtime: where ORT refuses the model or the inputs, fusegraph accepted
something invalid; where both run, the outputs must agree.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

import fusegraph
from fusegraph.errors import FusegraphError, InternalError

Outcome = tuple[str, str]
FAMILIES: dict[str, Callable[[random.Random], Outcome]] = {}


def family(name: str):
    def deco(fn):
        FAMILIES[name] = fn
        return fn
    return deco


def run_case(name: str, seed: int) -> Outcome:
    import warnings

    from tests.fuzz import families_hostile, families_io  # noqa: F401  (register their families)

    warnings.simplefilter("ignore")
    try:
        return FAMILIES[name](random.Random(f"{name}/{seed}"))
    except Skip as e:
        return "skipped", str(e)


class Skip(Exception):
    """The case generator could not make a case from this seed (it counts as nothing found)."""


# -- running and judging -----------------------------------------------------------------------------
def _typed(e: BaseException) -> Outcome:
    if isinstance(e, InternalError) or not isinstance(e, FusegraphError):
        cause = e.__cause__ if isinstance(e, InternalError) and e.__cause__ is not None else e
        return "untyped-error", f"{type(cause).__name__}: {cause}"
    return "typed-error", type(e).__name__


def _ort_session(model_bytes: bytes):
    import onnxruntime as ort

    oracle_phase()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def note(text: str) -> None:
    """Tell the harness what the case is, for its report should the worker crash or hang."""
    print(f"note {' '.join(text.split())}", flush=True)


def oracle_phase() -> None:
    """Tell the harness that ONNX Runtime runs from here on: a crash now is the oracle's (a worker
    writes its case's outcome on stdout; this line comes before it)."""

    print("phase oracle", flush=True)


def ort_message(e: Exception) -> str:
    """The end of an ORT error: the reason (its start is a long C++ signature)."""
    return "ONNX Runtime: " + " ".join(str(e).split())[-260:]


def _ort_refuses(e: Exception) -> bool:
    """ORT's NOT_IMPLEMENTED is a missing kernel (a valid model ORT lacks), not an invalid model."""
    return "NOT_IMPLEMENTED" not in str(e)


def judge_model(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], target: str = "ref",
                rtol: float = 1e-3, atol: float = 1e-4) -> Outcome:
    """Parse, compile and run `model` on fusegraph; compare what ran with ONNX Runtime."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        got = fusegraph.parse_onnx(data).compile(target).run(feeds)
    except Exception as e:  # noqa: BLE001  (classifying every exception is the point)
        return _typed(e)
    try:
        sess = _ort_session(data)
        names = {i.name for i in sess.get_inputs()}
        want = sess.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception as e:  # noqa: BLE001
        if _ort_refuses(e):
            return "accepted-invalid", ort_message(e)
        return "ok-correct", "unchecked: ORT has no kernel"
    return compare(got, want, rtol, atol)


def compare(got, want, rtol: float, atol: float) -> Outcome:
    if len(got) != len(want):
        return "wrong-result", f"{len(got)} outputs, ORT gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return "wrong-result", f"output {k}: {a.dtype}{list(a.shape)}, ORT gives {b.dtype}{list(b.shape)}"
        if a.dtype.kind in "fc":
            bad = ~np.isclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
            # float32 rounding of huge intermediate values may flip to inf on one side only
            if bad.any() and not (np.abs(b[bad]) > 1e30).all():
                return "wrong-result", f"output {k}: {int(bad.sum())} of {a.size} values differ"
        elif not np.array_equal(a, b):
            return "wrong-result", f"output {k}: values differ"
    return "ok-correct", ""


def random_feed(rng: random.Random, dtype: np.dtype, shape) -> np.ndarray:
    g = np.random.default_rng(rng.randrange(2**32))
    if dtype.kind == "f":
        return g.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return g.integers(0, 3, shape).astype(dtype)
    if dtype.kind == "b":
        return g.random(shape) > 0.5
    raise Skip(f"no sample values of {dtype}")


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
