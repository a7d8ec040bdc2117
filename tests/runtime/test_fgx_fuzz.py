"""Fuzzing the .fgx loader: damaged, truncated, hostile and random files give typed errors only.

Raw mutations (flips, overwrites, truncations, insertions) must all be caught, since every byte of a
file is under some checksum. Resealed mutations (checksums recomputed) reach the deeper checks of the
manifest and the IR: they may load, but may only ever fail with a FusegraphError. Bounded for CI.
"""

from __future__ import annotations

import functools
import json
import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import fusegraph
from fusegraph.errors import CompiledFileError, FusegraphError
from fusegraph.runtime.fgx_format import HEADER_SIZE, MAGIC, Container
from tests.helpers.fgx import onnx_program, reseal, set_header, with_manifest

FUZZ = settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
HIDDEN = 20
FEEDS = {"x": np.linspace(-1, 1, 2 * HIDDEN, dtype=np.float32).reshape(2, HIDDEN)}

pytestmark = pytest.mark.skipif(bool(os.environ.get("FUSEGRAPH_SIGN_KEY")),
                                reason="a signing key in the environment makes every unsigned file fail")


@functools.cache
def valid_file() -> bytes:
    return fusegraph.save_buffer(onnx_program(hidden=HIDDEN))


def load_and_run(data: bytes) -> None:
    fusegraph.load_buffer(data).run(FEEDS)


def test_the_valid_file_loads_and_runs():
    load_and_run(valid_file())


# -- raw damage: always caught ----------------------------------------------------------------------
@st.composite
def damaged(draw) -> bytes:
    data = bytearray(valid_file())
    kind = draw(st.sampled_from(["flip", "overwrite", "truncate", "insert", "append"]))
    at = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "overwrite":
        junk = draw(st.binary(min_size=1, max_size=64))
        data[at:at + len(junk)] = junk[:len(data) - at]
    elif kind == "truncate":
        del data[at:]
    elif kind == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=64))
    else:
        data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


@FUZZ
@given(damaged())
def test_any_damage_is_caught_before_an_output(data):
    assume(data != valid_file())
    with pytest.raises(CompiledFileError):
        load_and_run(data)


def test_every_header_byte_and_a_stride_of_the_rest_is_covered():
    data = valid_file()
    for at in [*range(HEADER_SIZE), *range(HEADER_SIZE, len(data), 7)]:
        bad = bytearray(data)
        bad[at] ^= 1 << (at % 8)
        with pytest.raises(CompiledFileError):
            load_and_run(bytes(bad))


@FUZZ
@given(st.binary(max_size=2048), st.sampled_from([b"", MAGIC, MAGIC + b"\x01\x00\x00\x00"]))
def test_random_bytes_are_refused(tail, prefix):
    with pytest.raises(CompiledFileError):
        fusegraph.load_buffer(prefix + tail)


# -- resealed: the manifest and IR checks themselves ------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda sub: st.lists(sub, max_size=4) | st.dictionaries(st.text(max_size=8), sub, max_size=4),
    max_leaves=12,
)


def typed_errors_only(data: bytes, integrity: str = "lazy") -> None:
    try:
        fusegraph.load_buffer(data, integrity=integrity).run(FEEDS)
    except FusegraphError:
        pass


@FUZZ
@given(st.sampled_from(["target", "options", "inputs", "outputs", "metadata", "weights", "artifacts",
                        "format", "fusegraph_version"]), json_values)
def test_resealed_manifest_fields(key, value):
    typed_errors_only(reseal(valid_file(), manifest={key: value}))


@FUZZ
@given(st.data())
def test_resealed_parts_lists(data):
    c = Container.from_buffer(valid_file())
    manifest = json.loads(bytes(c.manifest_bytes))
    part = data.draw(st.sampled_from(manifest["parts"]))
    field = data.draw(st.sampled_from(sorted(part)))
    part[field] = data.draw(json_values | st.sampled_from([2**63, 2**64 - 64, -64, 0, 64]))
    if data.draw(st.booleans()):
        manifest["parts"].reverse()
    typed_errors_only(with_manifest(valid_file(), json.dumps(manifest).encode()))


@FUZZ
@given(st.data(), st.sampled_from(["lazy", "eager"]))  # weights checked before the first run, or at load
def test_resealed_ir_edits(data, integrity):
    text = bytes(Container.from_buffer(valid_file()).part("ir")).decode()
    lines = text.splitlines()
    k = data.draw(st.integers(0, len(lines) - 1))
    edit = data.draw(st.sampled_from(["char", "drop", "swap", "dup"]))
    if edit == "char":
        at = data.draw(st.integers(0, max(0, len(lines[k]) - 1)))
        ch = data.draw(st.characters(codec="utf-8", exclude_characters="\n\r"))
        lines[k] = lines[k][:at] + ch + lines[k][at + 1:]
    elif edit == "drop":
        del lines[k]
    elif edit == "swap":
        j = data.draw(st.integers(0, len(lines) - 1))
        lines[k], lines[j] = lines[j], lines[k]
    else:
        lines.insert(k, lines[k])
    typed_errors_only(reseal(valid_file(), parts={"ir": "\n".join(lines).encode()}), integrity)


# -- absurd sizes: refused without allocating them ---------------------------------------------------
def _absurd_files() -> list[bytes]:
    data = valid_file()
    c = Container.from_buffer(data)
    manifest = json.loads(bytes(c.manifest_bytes))
    manifest["parts"][-1]["length"] = 2**62
    ir = bytes(c.part("ir")).decode()
    huge_literal = ir.replace("float32[1,20]", "float32[1000000000,1000000000]", 1)
    return [
        set_header(data, length=2**64 - 1),
        set_header(data, manifest_length=2**63),
        set_header(data, manifest_offset=2**64 - 2),
        with_manifest(data, json.dumps(manifest).encode()),
        reseal(data, parts={"ir": huge_literal.encode()}),
        reseal(data, parts={"ir": (b"module main\n  %0 = @literal[1, 2] : float32[99999999999]\n"
                                   b"  @return(%0)\n")}),
    ]


def test_absurd_lengths_are_refused_without_allocating_them():
    files = _absurd_files()
    tracemalloc.start()
    try:
        for data in files:
            with pytest.raises(FusegraphError):
                load_and_run(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"loading hostile files allocated {peak} bytes"


@pytest.mark.parametrize("integrity", ["lazy", "eager"])
def test_a_resealed_shape_that_disagrees_with_its_rule_is_refused(integrity):
    # the executable plans its buffers from these shapes: the cpu target copied an (8, 20) result into
    # the (8, 1) buffer of such an edit and failed with numpy's ValueError at run time
    text = bytes(Container.from_buffer(valid_file()).part("ir")).decode()
    line = next(ln for ln in text.splitlines() if " = add(" in ln)
    edited = text.replace(line, line.rsplit(":", 1)[0] + ": float32[{8..8},1]")
    with pytest.raises(CompiledFileError, match=r"add: text says float32\[8,1\], the shape rule gives"):
        fusegraph.load_buffer(reseal(valid_file(), parts={"ir": edited.encode()}), integrity=integrity)
