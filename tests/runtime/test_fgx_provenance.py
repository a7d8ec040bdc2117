"""The .fgx provenance part: a loaded program names the ONNX nodes and tensors its compile named;
files without the part still load; a lying part is refused as hostile input."""

from __future__ import annotations

import io
import json

import pytest

import fusegraph
from fusegraph.errors import CompiledFileError
from fusegraph.runtime.fgx_format import Container, ContainerWriter
from tests.helpers.fgx import reseal
from tests.profile.models import feeds, small_cnn


def _names(program):
    return [(i.tensor, tuple(n.name for n in i.origin)) for i in program.main.instructions]


@pytest.fixture(scope="module")
def saved():
    p = fusegraph.parse_onnx(small_cnn())
    p.compile(fusegraph.get_target("ref"))
    return p, fusegraph.save_buffer(p)


def test_a_loaded_program_names_what_the_compiled_one_named(saved):
    p, data = saved
    q = fusegraph.load_buffer(data)
    assert _names(q) == _names(p) and any(origin for _, origin in _names(q))
    prof = q.executable.profile(feeds(), runs=1)
    assert {"conv", "fc"} <= {n.name for s in prof.steps for n in s.origin}


def test_a_file_without_the_part_loads_without_names(saved):
    _, data = saved
    c = Container.from_buffer(data)
    out = io.BytesIO()
    w = ContainerWriter(out, c.writer)
    for name, part in c.parts.items():
        if name != "provenance":
            w.add(name, part.kind, bytes(c.part(name)))
    w.finish({k: v for k, v in c.manifest.items() if k not in ("parts", "format_version")}, None)
    q = fusegraph.load_buffer(out.getvalue())
    assert not any(i.origin for i in q.main.instructions)
    q.run(feeds())


@pytest.mark.parametrize("body", [
    b"not json", b'{"modules": []}', b'{"modules": {"nowhere": []}}',
    b'{"modules": {"main": [[99999, null, []]]}}', b'{"modules": {"main": [[0, 5, []]]}}',
    b'{"modules": {"main": [[0, "t", [["n"]]]]}}',
])
def test_a_lying_part_is_refused(saved, body):
    _, data = saved
    with pytest.raises(CompiledFileError, match="provenance"):
        fusegraph.load_buffer(reseal(data, parts={"provenance": body}))


def test_names_are_plain_json(saved):
    _, data = saved
    doc = json.loads(bytes(Container.from_buffer(data).part("provenance")))
    assert any(row[1] == "y" for row in doc["modules"]["main"])
