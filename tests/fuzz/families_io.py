"""Fuzz families over whole files: damaged small models, bad run-time inputs, damaged .fgx files."""

from __future__ import annotations

import functools
import json
import random
import re

import numpy as np
import onnx
from onnx import helper

import fusegraph
from fusegraph.errors import CompiledFileError
from fusegraph.ir import Dim
from tests.fuzz.families import (
    Outcome,
    Skip,
    _ort_refuses,
    _ort_session,
    _typed,
    compare,
    family,
    judge_model,
    ort_message,
)

HIDDEN = 6


@functools.cache
def small_model() -> onnx.ModelProto:
    from tests.helpers.fgx import onnx_model

    return onnx_model(hidden=HIDDEN)


def small_feeds(rng: random.Random, batch: int = 2) -> dict[str, np.ndarray]:
    g = np.random.default_rng(rng.randrange(2**32))
    return {"x": g.standard_normal((batch, HIDDEN)).astype(np.float32)}


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


# -- whole models --------------------------------------------------------------------------------------
def _proto_edit(rng: random.Random, m: onnx.ModelProto) -> str:
    g = m.graph
    how = rng.choice(["opset", "opset-drop", "opset-domain", "ir", "dup-writer", "undefined-input",
                      "undefined-output", "op-type", "domain", "dup-input", "input-type", "input-dims"])
    node = rng.choice(g.node)
    if how == "opset":
        m.opset_import[0].version = rng.choice([-1, 0, 1, 5, 6, 7, 12, 28, 29, 999, 2**40])
    elif how == "opset-drop":
        del m.opset_import[:]
    elif how == "opset-domain":
        m.opset_import.append(helper.make_opsetid(rng.choice(["ai.onnx.ml", "com.microsoft", "x", ""]),
                                                  rng.choice([0, 1, 99])))
    elif how == "ir":
        m.ir_version = rng.choice([0, 1, 2, 3, 99, 2**40])
    elif how == "dup-writer":
        other = rng.choice(g.node)
        node.output[0] = rng.choice([other.output[0], g.input[0].name, g.initializer[0].name])
    elif how == "undefined-input":
        node.input[rng.randrange(len(node.input))] = "nowhere"
    elif how == "undefined-output":
        g.output[rng.randrange(len(g.output))].name = "nowhere"
    elif how == "op-type":
        node.op_type = rng.choice(["", "Bogus", "relu", "Sub", "Div", "Sum", "Mean", "Identity", "Where"])
    elif how == "domain":
        node.domain = rng.choice(["ai.onnx", "com.microsoft", "bogus", "ai.onnx.ml"])
    elif how == "dup-input":
        g.input.append(g.input[0])
    elif how == "input-type":
        g.input[0].type.tensor_type.elem_type = rng.choice([0, 8, 16, 99, onnx.TensorProto.DOUBLE])
    else:
        dims = g.input[0].type.tensor_type.shape.dim
        dims[rng.randrange(len(dims))].dim_value = rng.choice([-1, 0, 3, 2**40])
    return how


@family("model-proto")
def model_proto(rng: random.Random) -> Outcome:
    m = _copy(small_model())
    how = _proto_edit(rng, m)
    outcome, detail = judge_model(m, small_feeds(rng))
    return outcome, f"{how}: {detail}"


def damage_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """`data` with one bit flipped, a tail cut, junk inserted, overwritten or appended; and what was done."""
    out = bytearray(data)
    how = rng.choice(["flip", "truncate", "insert", "overwrite", "append"])
    at = rng.randrange(len(out))
    if how == "flip":
        out[at] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        del out[at:]
    elif how == "insert":
        out[at:at] = rng.randbytes(rng.randrange(1, 32))
    elif how == "overwrite":
        out[at:at + 8] = rng.randbytes(8)
    else:
        out += rng.randbytes(rng.randrange(1, 32))
    return bytes(out), f"{how} at {at}"


@family("model-bytes")
def model_bytes(rng: random.Random) -> Outcome:
    data, how = damage_bytes(rng, small_model().SerializeToString())
    outcome, detail = judge_model(data, small_feeds(rng))
    return outcome, f"{how}: {detail}"


# -- run-time inputs ----------------------------------------------------------------------------------
@functools.cache
def _compiled(target: str):
    p = fusegraph.parse_onnx(small_model(), map_dyn_input_dims={"x": [Dim(1, 8, (4,)), HIDDEN]})
    return p.compile(target)


@functools.cache
def _dynamic_model() -> onnx.ModelProto:
    """The small model with a symbolic batch, as the compiled programs have it (1 to 8)."""
    m = _copy(small_model())
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return m


def _bad_feeds(rng: random.Random) -> tuple[str, dict]:
    x = small_feeds(rng, rng.randrange(1, 9))["x"]
    how = rng.choice(["missing", "extra", "rename", "dtype", "rank", "batch", "width", "nan", "huge",
                      "list", "scalar", "string", "none", "fortran", "strided", "readonly", "object", "empty"])
    if how == "missing":
        return how, {}
    if how == "extra":
        return how, {"x": x, "y": x}
    if how == "rename":
        return how, {"X": x}
    if how == "dtype":
        return how, {"x": x.astype(rng.choice([np.float64, np.float16, np.int64, np.int32, np.bool_]))}
    if how == "rank":
        return how, {"x": x.reshape(-1) if rng.random() < 0.5 else x[None]}
    if how == "batch":
        return how, {"x": np.zeros((rng.choice([0, 9, 64]), HIDDEN), np.float32)}
    if how == "width":
        return how, {"x": np.zeros((2, HIDDEN + rng.choice([-1, 1])), np.float32)}
    if how == "nan":
        x[rng.randrange(x.shape[0]), rng.randrange(HIDDEN)] = rng.choice([np.nan, np.inf, -np.inf])
        return how, {"x": x}
    if how == "huge":
        return how, {"x": (x * 3e38).astype(np.float32)}
    if how == "list":
        return how, {"x": x.tolist()}
    if how == "scalar":
        return how, {"x": np.float32(1)}
    if how == "string":
        return how, {"x": "x"}
    if how == "none":
        return how, {"x": None}
    if how == "fortran":
        return how, {"x": np.asfortranarray(x)}
    if how == "strided":
        return how, {"x": np.repeat(x, 2, axis=1)[:, ::2]}
    if how == "readonly":
        x.setflags(write=False)
        return how, {"x": x}
    if how == "object":
        return how, {"x": x.astype(object)}
    return how, {"x": np.zeros((0, HIDDEN), np.float32)}


@family("run-inputs")
def run_inputs(rng: random.Random) -> Outcome:
    target = rng.choice(["ref", "cpu"])
    how, feeds = _bad_feeds(rng)
    try:
        got = _compiled(target).run(feeds)
    except Exception as e:  # noqa: BLE001
        return _typed(e)
    try:
        want = _ort_session(_dynamic_model().SerializeToString()).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        if _ort_refuses(e):
            return "accepted-invalid", f"{target} {how}: {ort_message(e)}"
        raise Skip("no ORT kernel") from None
    outcome, detail = compare(got, want, 1e-3, 1e-4)
    return outcome, f"{target} {how}: {detail}"


# -- compiled files ----------------------------------------------------------------------------------
@functools.cache
def _fgx(target: str) -> bytes:
    return fusegraph.save_buffer(_compiled(target))


def _load_run(data: bytes, integrity: str) -> Outcome:
    try:
        fusegraph.load_buffer(data, integrity=integrity).run(small_feeds(random.Random(0)))
    except Exception as e:  # noqa: BLE001
        return _typed(e)
    return "ok-correct", "ran"


@family("fgx-raw")
def fgx_raw(rng: random.Random) -> Outcome:
    """Raw damage is under a checksum: it must be refused as a CompiledFileError."""
    target = rng.choice(["ref", "cpu"])
    data, how = damage_bytes(rng, _fgx(target))
    if data == _fgx(target):
        return "skipped", "the damage changed nothing"
    try:
        fusegraph.load_buffer(data).run(small_feeds(rng))
    except CompiledFileError:
        return "typed-error", "CompiledFileError"
    except Exception as e:  # noqa: BLE001
        outcome, detail = _typed(e)
        return ("untyped-error" if outcome == "typed-error" else outcome), f"{target} {how}: {detail}"
    return "accepted-invalid", f"{target} {how}: a damaged file ran"


def _ir_edit(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    k = rng.randrange(len(lines))
    how = rng.choice(["number", "number", "dtype", "char", "drop", "swap", "dup"])
    if how == "number":
        spots = list(re.finditer(r"\d+", text))
        m = rng.choice(spots)
        return text[:m.start()] + str(rng.choice([0, 1, 2, 3, 5, 7, 8, 9, 99, 2**31, 2**63])) + text[m.end():]
    if how == "dtype":
        return re.sub(r"float32", rng.choice(["float16", "int64", "bool", "float64", "int4"]), text,
                      count=rng.randrange(1, 4))
    if how == "char":
        at = rng.randrange(max(1, len(lines[k])))
        lines[k] = lines[k][:at] + rng.choice("%@[](){},:=.-x0 ") + lines[k][at + 1:]
    elif how == "drop":
        del lines[k]
    elif how == "swap":
        j = rng.randrange(len(lines))
        lines[k], lines[j] = lines[j], lines[k]
    else:
        lines.insert(k, lines[k])
    return "\n".join(lines)


@family("fgx-resealed")
def fgx_resealed(rng: random.Random) -> Outcome:
    """Edits with the checksums recomputed reach the manifest and IR checks: typed errors or a run."""
    from fusegraph.runtime.fgx_format import Container
    from tests.helpers.fgx import reseal, with_manifest

    target = rng.choice(["ref", "cpu"])
    data = _fgx(target)
    c = Container.from_buffer(data)
    where = rng.choice(["ir", "manifest", "parts"])
    if where == "ir":
        new = reseal(data, parts={"ir": _ir_edit(rng, bytes(c.part("ir")).decode()).encode()})
    elif where == "manifest":
        key = rng.choice(["target", "options", "inputs", "outputs", "metadata", "format", "fusegraph_version"])
        value = rng.choice([None, 1, -1, 2**70, "x", [], {}, {"threads": "x"}, {"threads": 0},
                            {"disabled_passes": [1]}, {"optimize": 1}, [{"name": "x", "shape": "?"}]])
        new = reseal(data, manifest={key: value})
    else:
        manifest = json.loads(bytes(c.manifest_bytes))
        part = rng.choice(manifest["parts"])
        part[rng.choice(sorted(part))] = rng.choice([None, -64, 0, 64, 2**63, "x", 2**64 - 64])
        new = with_manifest(data, json.dumps(manifest).encode())
    outcome, detail = _load_run(new, rng.choice(["lazy", "eager"]))
    return outcome, f"{target} {where}: {detail}"


@family("fgx-ok")
def fgx_ok(rng: random.Random) -> Outcome:
    """The undamaged file loads, runs, and agrees with the program it was saved from."""
    target = rng.choice(["ref", "cpu"])
    feeds = small_feeds(rng, rng.randrange(1, 9))
    try:
        got = fusegraph.load_buffer(_fgx(target)).run(feeds)
    except Exception as e:  # noqa: BLE001
        return "wrong-result", f"{target}: the valid file failed: {_typed(e)[1]}"
    return compare(got, _compiled(target).run(feeds), 0, 0)

