"""The ONNX backend node cases of one op, with their expected outputs: for ops ONNX Runtime lacks.

Building the whole node suite takes seconds; importing one case module of `onnx.backend.test.case.node`
builds only that op's cases (the module registers them in onnx's case list as it is imported).
"""

from __future__ import annotations

import importlib

from onnx.backend.test.case import node as onnx_cases

from tests.onnx.suite import compare


def node_cases(module: str, prefix: str) -> dict:
    """The cases of `onnx.backend.test.case.node.<module>` whose names start with `prefix`, by name."""
    importlib.import_module(f"{onnx_cases.__name__}.{module}")
    found = {c.name: c for c in onnx_cases._NodeTestCases if c.name.startswith(prefix)}
    assert found, f"no node cases named {prefix}* in {module}"
    return found


def check_node_case(case) -> None:
    """Run one case on fusegraph (the backend's CPU device) and compare with its expected outputs."""
    from fusegraph.backend import FusegraphBackend

    rep = FusegraphBackend.prepare(case.model, "CPU")
    for inputs, expected in case.data_sets:
        outs = rep.run(list(inputs))
        assert len(outs) == len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        for ref, out in zip(expected, outs):
            compare(ref, out, case.rtol, case.atol)
