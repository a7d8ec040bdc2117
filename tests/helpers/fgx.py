"""Small compiled programs and .fgx surgery for the compiled-file tests."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

import ml_dtypes
import numpy as np
from onnx import helper

import fusegraph
from fusegraph.ir import Dim, DType, Program, Shape, make_op
from fusegraph.runtime.fgx_format import HEADER, HEADER_SIZE, Container, ContainerWriter
from tests.util import make_model

# one literal of each storage class: plain, half, ml_dtypes (bf16, fp8, int4), bool
LITERAL_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int8,
                  ml_dtypes.int4, np.bool_, np.int64]


def dtype_program(n: int = 64, seed: int = 0) -> Program:
    """x[n] plus one large literal of every dtype above, converted to float32; compiled for ref."""
    rng = np.random.default_rng(seed)
    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [n]))
    acc = x
    for dt in LITERAL_DTYPES:
        value = (rng.standard_normal(n) * 3).astype(dt) if dt is not np.bool_ else rng.random(n) > 0.5
        lit = m.add_literal(value)
        acc = m.add(make_op("add"), acc, m.add(make_op("convert", to=DType.float32), lit))
    twin = m.add_literal(np.full(n, 0.5, np.float32))  # two equal literals share one blob
    twin2 = m.add_literal(np.full(n, 0.5, np.float32))
    m.add_return(m.add(make_op("mul"), acc, twin), twin2)
    p.compile(fusegraph.get_target("ref"))
    return p


def onnx_model(hidden: int = 32, seed: int = 0):
    """relu(x * w1 + b1) over a dynamic batch, and w2 * w2; outputs named y and z."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.standard_normal((1, hidden)).astype(np.float32),
             "b1": rng.standard_normal(hidden).astype(np.float32),
             "w2": rng.standard_normal((4, hidden)).astype(np.float32)}
    nodes = [helper.make_node("Mul", ["x", "w1"], ["t"]), helper.make_node("Add", ["t", "b1"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"]), helper.make_node("Mul", ["w2", "w2"], ["z"])]
    return make_model(nodes, {"x": np.zeros((2, hidden), np.float32)}, ["y", "z"], inits)


def onnx_program(hidden: int = 32, options: Any = None) -> Program:
    p = fusegraph.parse_onnx(onnx_model(hidden), map_dyn_input_dims={"x": [Dim(1, 8, (4,)), hidden]})
    return p.compile(fusegraph.get_target("ref"), options)


def reseal(data: bytes, manifest: dict | None = None, parts: dict[str, bytes] | None = None,
           sign_key: bytes | None = None) -> bytes:
    """Rebuild a valid container from `data` with some manifest fields and part contents replaced:
    every checksum is recomputed, so the loader's deeper checks (not its checksums) see the change."""
    c = Container.from_buffer(data)
    out = io.BytesIO()
    w = ContainerWriter(out, c.writer)
    for name, part in c.parts.items():
        w.add(name, part.kind, (parts or {}).get(name, bytes(c.part(name))))
    body = {k: v for k, v in c.manifest.items() if k not in ("parts", "format_version")}
    body.update(manifest or {})
    w.finish(body, sign_key)
    return out.getvalue()


def set_header(data: bytes, **fields: int) -> bytes:
    """Overwrite header fields (by name) and fix the header CRC, so only the named fields are wrong."""
    names = ["magic", "version", "header_size", "writer", "length", "manifest_offset", "manifest_length",
             "flags", "crc", "manifest_sha256", "signature"]
    values = dict(zip(names, HEADER.unpack(data[:HEADER_SIZE])))
    values.update(fields, crc=0)
    header = bytearray(HEADER.pack(*values.values()))
    struct.pack_into("<I", header, 60, zlib.crc32(header))
    return bytes(header) + data[HEADER_SIZE:]


def with_manifest(data: bytes, body: bytes) -> bytes:
    """Replace the manifest with raw `body` (parts list and all) and fix the header to match."""
    import hashlib

    c = Container.from_buffer(data)
    start = len(data) - len(c.manifest_bytes)
    out = data[:start] + body
    return set_header(out, length=len(out), manifest_length=len(body), manifest_sha256=hashlib.sha256(body).digest())
