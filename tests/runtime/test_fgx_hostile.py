"""Unsigned .fgx files are hostile input: what sizes a kernel's buffers is checked against the IR, and
the IR's shapes are re-derived, so a file edited with its checksums recomputed is refused, not run over
memory it does not own (docs/fgx-format.md, "What an unsigned file may not decide")."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fusegraph
from fusegraph import models
from fusegraph.errors import CompiledFileError, TargetError
from fusegraph.runtime.fgx_format import Container
from tests.helpers.fgx import onnx_model, onnx_program, reseal

KERNELS = "artifact/kernels.json"
KEY = b"hostile-test-key"


@pytest.fixture(scope="module")
def bert() -> tuple[fusegraph.Program, bytes]:
    try:
        cpu = fusegraph.get_target("cpu")
    except TargetError as e:
        pytest.skip(f"cpu target unavailable: {e}")
    p = fusegraph.parse_onnx(models.get_model("bert_small"), map_input_dims=models.MODELS["bert_small"].default_shapes(1))
    p.compile(cpu)
    return p, fusegraph.save_buffer(p)


def _kernels(data: bytes) -> dict:
    return json.loads(bytes(Container.from_buffer(data).part(KERNELS)))


def _two_kernels_of_other_shapes(saved: dict) -> tuple[str, str]:
    keys = sorted(saved["kernels"])
    for a in keys:
        for b in keys:
            if saved["kernels"][a]["in_shapes"] != saved["kernels"][b]["in_shapes"]:
                return a, b
    raise AssertionError("the model has no two reduction kernels of different shapes")


def test_swapped_kernel_entries_are_refused_at_load(bert):
    _, data = bert
    saved = _kernels(data)
    a, b = _two_kernels_of_other_shapes(saved)
    saved["kernels"][a], saved["kernels"][b] = saved["kernels"][b], saved["kernels"][a]
    # before: the load succeeded and its first run died in a generated kernel (SIGSEGV / malloc abort)
    with pytest.raises(CompiledFileError, match="not one generated for it"):
        fusegraph.load_buffer(reseal(data, parts={KERNELS: json.dumps(saved).encode()}))


def test_a_kernel_relabelled_with_another_kernels_shapes_is_refused(bert):
    _, data = bert
    saved = _kernels(data)
    a, b = _two_kernels_of_other_shapes(saved)
    fields = ("in_dtypes", "out_dtype", "in_shapes", "out_lens")
    saved["kernels"][b] = {**saved["kernels"][b], **{f: saved["kernels"][a][f] for f in fields}}
    saved["kernels"][a], saved["kernels"][b] = saved["kernels"][b], saved["kernels"][a]
    with pytest.raises(CompiledFileError, match="its name is not the hash of its code"):
        fusegraph.load_buffer(reseal(data, parts={KERNELS: json.dumps(saved).encode()}))


def test_an_intact_file_still_takes_its_saved_kernels(bert):
    p, data = bert
    q = fusegraph.load_buffer(data)
    assert q.executable.built.kernels.provided  # checked and used: none generated again
    feeds = models.sample_inputs("bert_small", batch=1)
    assert [a.tobytes() for a in q.run(feeds)] == [a.tobytes() for a in p.run(feeds)]


def _ir(data: bytes) -> str:
    return bytes(Container.from_buffer(data).part("ir")).decode()


def test_an_unsigned_files_ir_shapes_are_re_derived():
    data = fusegraph.save_buffer(onnx_program(hidden=20))
    ir = _ir(data)
    line = next(ln for ln in ir.splitlines() if " = mul" in ln)
    shape = line.rsplit(" : ", 1)[1]
    lied = ir.replace(line, line.replace(" : " + shape, " : " + shape.replace("20]", "2000]")))
    assert lied != ir
    # before: the same fusegraph's file was taken at its word (check_shapes=False)
    with pytest.raises(CompiledFileError, match="shape rule gives"):
        fusegraph.load_buffer(reseal(data, parts={"ir": lied.encode()}))
    signed = reseal(data, parts={"ir": lied.encode()}, sign_key=KEY)
    with pytest.raises(CompiledFileError):  # a verified signature skips re-deriving: the key's holder vouches
        fusegraph.load_buffer(signed)  # no key given: as unsigned
    with pytest.raises(CompiledFileError):
        fusegraph.load_buffer(signed, verify_key=b"another key")


def test_a_strided_program_input_is_refused():
    p = fusegraph.parse_onnx(onnx_model(20), map_input_dims={"x": [2, 20]}).compile(fusegraph.get_target("ref"))
    data = fusegraph.save_buffer(p)
    ir = _ir(data)
    line = next(ln for ln in ir.splitlines() if "@param" in ln)
    shape = line.rsplit(" : ", 1)[1]
    assert "@" not in shape
    lied = ir.replace(line, f"{line}@[1000,1]")
    spec = [{"name": "x", "shape": f"{shape}@[1000,1]"}]  # the manifest agrees with the edited IR
    with pytest.raises(CompiledFileError, match="strided"):
        fusegraph.load_buffer(reseal(data, manifest={"inputs": spec}, parts={"ir": lied.encode()}))


def test_a_signed_file_loads_with_its_key():
    p = onnx_program(hidden=20)
    q = fusegraph.load_buffer(fusegraph.save_buffer(p, sign_key=KEY), verify_key=KEY)
    x = {"x": np.ones((2, 20), np.float32)}
    assert [a.tobytes() for a in q.run(x)] == [a.tobytes() for a in p.run(x)]


@pytest.mark.parametrize("recorded", [b"[1]", b'{"mm": 3}', b'{"mm": {"name": 7}}', b"not json"])
def test_a_gpu_files_recorded_choices_are_a_table_or_refused(recorded):
    from fusegraph.targets.gpu.autotune import read_recorded

    assert read_recorded(memoryview(b'{"mm": {"name": "library"}}')) == {"mm": {"name": "library"}}
    with pytest.raises(CompiledFileError, match="autotune.json"):  # before: AttributeError or a JSON error
        read_recorded(memoryview(recorded))
