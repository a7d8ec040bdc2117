"""Compiled programs as .fgx files: round trips, what the manifest records, signing, refusals."""

from __future__ import annotations

import mmap
import threading

import numpy as np
import pytest

import fusegraph
from fusegraph.errors import CompiledFileError, CompileError, IRError, TargetError
from fusegraph.ir import Program, make_op
from fusegraph.ir.text import parse_program, print_program
from fusegraph.runtime.fgx_format import ALIGNMENT, FORMAT_VERSION, Container
from fusegraph.targets import CompileOptions
from tests.helpers.fgx import dtype_program, onnx_program, reseal, set_header


def _literals(p: Program) -> list[np.ndarray]:
    return [i.literal for m in p.modules_in_order() for i in m.instructions if i.is_literal]


def _feeds(n: int = 3, hidden: int = 32) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((n, hidden)).astype(np.float32)}


def _assert_identical(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()  # bit-identical, NaNs included


# -- round trips ------------------------------------------------------------------------------------
def test_round_trip_is_bit_identical_for_every_literal_dtype(tmp_path):
    p = dtype_program()
    path = tmp_path / "m.fgx"
    fusegraph.save(p, path)
    q = fusegraph.load(path)
    assert q.to_text() == p.to_text()
    x = {"x": np.linspace(-2, 2, 64, dtype=np.float32)}
    _assert_identical(q.run(x), p.run(x))


def test_onnx_model_round_trip_keeps_names_options_and_dynamic_dims(tmp_path):
    opts = CompileOptions(threads=3, disabled_passes=("eliminate_identity",), device_resident=True)
    p = onnx_program(options=opts)
    fusegraph.save(p, tmp_path / "m.fgx")
    q = fusegraph.load(tmp_path / "m.fgx")
    assert q.target_name == "ref" and q.executable.options == opts
    assert q.output_names == ["y", "z"]
    for n in (1, 4, 8):
        _assert_identical(q.run(_feeds(n)), p.run(_feeds(n)))
    manifest = Container.open(tmp_path / "m.fgx").manifest
    assert manifest["target"] == "ref" and manifest["options"]["threads"] == 3
    assert manifest["inputs"][0]["dims"][0] == {"min": 1, "max": 8, "optimals": [4]}
    assert [o["name"] for o in manifest["outputs"]] == ["y", "z"]


def test_weights_are_read_only_aligned_views_of_the_mapped_file(tmp_path):
    p = dtype_program(n=256)
    fusegraph.save(p, tmp_path / "m.fgx")
    q = fusegraph.load(tmp_path / "m.fgx")
    big = [a for a in _literals(q) if a.size > 16]
    assert big
    for a in big:
        assert not a.flags.writeable and a.ctypes.data % ALIGNMENT == 0
        base = a
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)  # no copy was made


def test_equal_literals_share_one_blob_and_saving_is_deterministic():
    p = dtype_program()
    data = fusegraph.save_buffer(p)
    assert data == fusegraph.save_buffer(p)
    c = Container.from_buffer(data)
    big = {id(a): a for a in _literals(p) if a.size > 16}
    assert c.manifest["weights"]["blobs"] == len(big) - 1  # the two 0.5 literals are one blob


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_load_buffer_from_any_alignment(offset):
    p = onnx_program()
    raw = fusegraph.save_buffer(p)
    buf = bytearray(offset) + raw
    q = fusegraph.load_buffer(memoryview(buf)[offset:])
    _assert_identical(q.run(_feeds()), p.run(_feeds()))


def test_saving_over_a_loaded_file_leaves_the_loaded_program_intact(tmp_path):
    path = tmp_path / "m.fgx"
    p = onnx_program()
    fusegraph.save(p, path)
    q = fusegraph.load(path)
    fusegraph.save(onnx_program(hidden=16), path)  # a new file replaces the name; the old map stays valid
    _assert_identical(q.run(_feeds()), p.run(_feeds()))
    assert fusegraph.load(path).get_parameter_shapes()["x"].dims[1].min == 16


def test_an_uncompiled_program_cannot_be_saved():
    p = Program()
    x = p.main.add_parameter("x", fusegraph.Shape.of(fusegraph.DType.float32, [2]))
    p.main.add_return(p.main.add(make_op("relu"), x))
    with pytest.raises(CompileError, match="not compiled"):
        fusegraph.save_buffer(p)


def test_text_literal_hook_round_trip_and_missing_reader():
    p = dtype_program()
    store: list[np.ndarray] = []

    def write(v):
        store.append(v)
        return str(len(store) - 1)

    text = print_program(p, literal_writer=write)
    assert "@literal[ref:0]" in text and "b64:" not in text
    assert parse_program(text, literal_reader=lambda k, s: store[int(k)]).to_text() == p.to_text()
    with pytest.raises(IRError, match="literal_reader"):
        parse_program(text)


# -- integrity --------------------------------------------------------------------------------------
def _flip_in_part(data: bytes, kind: str) -> bytes:
    c = Container.from_buffer(data)
    part = next(p for p in c.parts.values() if p.kind == kind)
    out = bytearray(data)
    out[part.offset + part.length // 2] ^= 0x10
    return bytes(out)


def test_a_damaged_weight_is_caught_before_any_output():
    data = _flip_in_part(fusegraph.save_buffer(onnx_program()), "weights")
    q = fusegraph.load_buffer(data)  # lazy: load does not read the weights
    for _ in range(2):  # and every run keeps refusing
        with pytest.raises(CompiledFileError, match="weights/.*SHA-256"):
            q.run(_feeds())
    with pytest.raises(CompiledFileError, match="SHA-256"):
        fusegraph.load_buffer(data, integrity="eager")


def test_damaged_ir_is_caught_at_load():
    with pytest.raises(CompiledFileError, match="'ir' is damaged"):
        fusegraph.load_buffer(_flip_in_part(fusegraph.save_buffer(onnx_program()), "ir"))


def test_first_runs_from_many_threads_check_once_and_agree():
    p = onnx_program()
    q = fusegraph.load_buffer(fusegraph.save_buffer(p))
    results: list = [None] * 4

    def work(k):
        results[k] = q.run(_feeds())

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        _assert_identical(r, p.run(_feeds()))


# -- signing ----------------------------------------------------------------------------------------
def test_signed_file_loads_with_the_key_and_is_refused_otherwise():
    p = onnx_program()
    signed = fusegraph.save_buffer(p, sign_key="s3cret")
    _assert_identical(fusegraph.load_buffer(signed, verify_key=b"s3cret").run(_feeds()), p.run(_feeds()))
    fusegraph.load_buffer(signed)  # without a key, a signed file loads like any other
    with pytest.raises(CompiledFileError, match="signature does not match"):
        fusegraph.load_buffer(signed, verify_key="other")
    with pytest.raises(CompiledFileError, match="not signed"):
        fusegraph.load_buffer(fusegraph.save_buffer(p), verify_key="s3cret")


def test_tampering_that_fixes_every_checksum_still_breaks_the_signature():
    signed = fusegraph.save_buffer(onnx_program(), sign_key="k")
    c = Container.from_buffer(signed)
    weights = next(n for n, part in c.parts.items() if part.kind == "weights")
    tampered = bytearray(c.part(weights))
    tampered[0] ^= 1
    forged = reseal(signed, parts={weights: bytes(tampered)}, sign_key=b"guess")
    fusegraph.load_buffer(forged)  # consistent checksums: only the signature can tell
    with pytest.raises(CompiledFileError, match="signature"):
        fusegraph.load_buffer(forged, verify_key="k")


def test_sign_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("FUSEGRAPH_SIGN_KEY", "from-env")
    signed = fusegraph.save_buffer(onnx_program())
    assert Container.from_buffer(signed).signed
    fusegraph.load_buffer(signed)  # verified with the environment's key
    monkeypatch.setenv("FUSEGRAPH_SIGN_KEY", "another")
    with pytest.raises(CompiledFileError, match="signature"):
        fusegraph.load_buffer(signed)


# -- refusals ---------------------------------------------------------------------------------------
def test_a_newer_format_version_names_the_version_needed():
    data = set_header(fusegraph.save_buffer(onnx_program()), version=FORMAT_VERSION + 1)
    with pytest.raises(CompiledFileError, match=f"needs fgx format version {FORMAT_VERSION + 1}.*upgrade"):
        fusegraph.load_buffer(data)


def test_a_program_for_a_target_this_machine_lacks_is_a_target_error():
    data = reseal(fusegraph.save_buffer(onnx_program()), manifest={"target": "tpu"})
    with pytest.raises(TargetError, match="compiled for target 'tpu'"):
        fusegraph.load_buffer(data)


def test_a_target_that_cannot_run_here_refuses_at_load(monkeypatch):
    from fusegraph.targets.ref import TARGET

    def no_device(program, options, artifacts):
        raise TargetError("target 'ref' needs a device, and this machine has none")

    monkeypatch.setattr(TARGET, "load", no_device)
    with pytest.raises(TargetError, match="has none"):
        fusegraph.load_buffer(fusegraph.save_buffer(onnx_program()))


def test_unknown_compile_options_are_refused():
    data = reseal(fusegraph.save_buffer(onnx_program()), manifest={"options": {"warp_speed": True}})
    with pytest.raises(CompiledFileError, match="warp_speed"):
        fusegraph.load_buffer(data)


def test_an_onnx_file_is_not_an_fgx_file(tmp_path):
    from tests.helpers.fgx import onnx_model

    path = tmp_path / "m.onnx"
    path.write_bytes(onnx_model().SerializeToString())
    with pytest.raises(CompiledFileError, match="parse_onnx"):
        fusegraph.load(path)
    with pytest.raises(CompiledFileError, match="cannot read"):
        fusegraph.load(tmp_path / "missing.fgx")


def test_shapes_are_re_derived_in_every_integrity_mode():
    data = fusegraph.save_buffer(onnx_program())
    ir = bytes(Container.from_buffer(data).part("ir")).decode()
    wrong = ir.replace("add(%7, %8) : float32[{1..8},32]", "add(%7, %8) : float32[{1..8},33]")
    assert wrong != ir
    bad = reseal(data, parts={"ir": wrong.encode()})
    # an intact checksum proves the IR undamaged, not untampered: the shapes are checked all the same
    for integrity in ("lazy", "eager"):
        with pytest.raises(CompiledFileError, match="shape rule gives"):
            fusegraph.load_buffer(bad, integrity=integrity)
    with pytest.raises(CompiledFileError, match="shape rule gives"):
        fusegraph.load_buffer(reseal(bad, manifest={"fusegraph_version": "0.0.1"}))
