"""Compiled files of the cpu target: oneDNN's packed weights and the generated kernels travel in the
file (targets/cpu/artifacts.py), so a load packs and generates nothing, and runs bit-identically."""

from __future__ import annotations

import json
import mmap

import numpy as np
import pytest

import fusegraph
from fusegraph import models
from fusegraph.errors import CompiledFileError, TargetError
from fusegraph.runtime.fgx_format import ALIGNMENT, Container
from tests.helpers.fgx import reseal

try:
    CPU = fusegraph.get_target("cpu")
except TargetError as e:  # no oneDNN here
    pytest.skip(f"cpu target unavailable: {e}", allow_module_level=True)

PACKED, INDEX = "artifact/weights/onednn/", "artifact/onednn_packing.json"


@pytest.fixture(scope="module")
def compiled() -> dict[str, tuple[fusegraph.Program, bytes]]:
    """Each model compiled once for cpu, with its file's bytes."""
    out = {}
    for name in ("bert_small", "resnet50"):
        p = fusegraph.parse_onnx(models.get_model(name), map_input_dims=models.MODELS[name].default_shapes(1))
        p.compile(CPU)
        out[name] = p, fusegraph.save_buffer(p)
    return out


def _identical(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(got, want))


def _mapped(a: np.ndarray) -> bool:
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


@pytest.mark.parametrize("name", ["bert_small", "resnet50"])
def test_load_takes_every_packed_weight_from_the_file_and_runs_bit_identically(compiled, name, tmp_path):
    p, data = compiled[name]
    (tmp_path / "m.fgx").write_bytes(data)
    q = fusegraph.load(tmp_path / "m.fgx")
    packed = q.executable.built.packing.packed()
    assert len(packed) == len(p.executable.built.packing.packed()) > 0
    assert q.executable.built.packed_from_file == len(packed)  # no weight packed again
    for a in packed.values():  # the file's bytes, mapped: no copy
        assert _mapped(a) and a.ctypes.data % ALIGNMENT == 0
    feeds = models.sample_inputs(name, batch=1)
    assert _identical(q.run(feeds), p.run(feeds))


def test_load_reuses_the_generated_kernels_and_saves_the_same_file_again(compiled):
    p, data = compiled["bert_small"]
    q = fusegraph.load_buffer(data)
    kernels = q.executable.built.kernels
    assert kernels.provided and kernels.kernels == p.executable.built.kernels.kernels  # none generated again
    assert q.executable.built.library.path == p.executable.built.library.path
    assert fusegraph.save_buffer(q) == data  # what a loaded program saves is what it was loaded from


def test_kernels_are_generated_again_where_their_library_is_not_built(compiled, tmp_path, monkeypatch):
    p, data = compiled["bert_small"]
    monkeypatch.setenv("FUSEGRAPH_CACHE_DIR", str(tmp_path / "empty"))  # a machine that never built it
    q = fusegraph.load_buffer(data)
    assert not q.executable.built.kernels.provided  # the file's C is never compiled
    assert q.executable.built.kernels.kernels == p.executable.built.kernels.kernels
    feeds = models.sample_inputs("bert_small", batch=1)
    assert _identical(q.run(feeds), p.run(feeds))


def test_a_weight_packed_for_another_layout_is_packed_again(compiled):
    # what a machine whose oneDNN kernels want other layouts (another ISA) sees
    p, data = compiled["bert_small"]
    c = Container.from_buffer(data)
    index = json.loads(bytes(c.part(INDEX)))
    for e in index["packed"]:
        e["layout"] = e["layout"].replace("bytes=", "bytes=1")
    q = fusegraph.load_buffer(reseal(data, parts={INDEX: json.dumps(index).encode()}))
    assert q.executable.built.packed_from_file == 0
    feeds = models.sample_inputs("bert_small", batch=1)
    assert _identical(q.run(feeds), p.run(feeds))


def test_a_damaged_packed_weight_is_refused(compiled):
    _, data = compiled["bert_small"]
    c = Container.from_buffer(data)
    part = c.parts[min(n for n in c.parts if n.startswith(PACKED))]
    bad = bytearray(data)
    bad[part.offset + part.length // 2] ^= 0x10
    with pytest.raises(CompiledFileError, match="weights/onednn/"):
        fusegraph.load_buffer(bytes(bad), integrity="eager")
    lazy = fusegraph.load_buffer(bytes(bad))  # checked with the weights, before the first run
    for _ in range(2):
        with pytest.raises(CompiledFileError, match="weights/onednn/"):
            lazy.run(models.sample_inputs("bert_small", batch=1))


def test_a_packing_index_naming_a_missing_part_is_refused(compiled):
    _, data = compiled["bert_small"]
    index = json.loads(bytes(Container.from_buffer(data).part(INDEX)))
    index["packed"][0]["part"] = "weights/onednn/999999"
    with pytest.raises(CompiledFileError, match="does not hold"):
        fusegraph.load_buffer(reseal(data, parts={INDEX: json.dumps(index).encode()}))
    index["packed"][0] = {"literal": "3"}
    with pytest.raises(CompiledFileError, match="malformed"):
        fusegraph.load_buffer(reseal(data, parts={INDEX: json.dumps(index).encode()}))
