"""QDQ int8 products (int8_dot) as oneDNN calls of native programs: the output a reshape of its
planned buffer (kernels/int8.py's _Reshaped), the same bits as the steps run one by one."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.targets.cpu.native_program import PRIMITIVE, Region
from tests.targets.cpu.int8_models import matmul_model
from tests.util import target_or_skip

CASES = {"matmul batched": {}, "gemm": {"gemm": True}, "gemm transB": {"gemm": True, "trans_b": True},
         "gemm per-tensor": {"gemm": True, "per_channel": False}, "float result": {"out": "f"}}


def _compile(model):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    return p


@pytest.mark.parametrize("case", list(CASES))
def test_int8_products_join_the_native_program(case, monkeypatch):
    model, feeds = matmul_model(np.random.default_rng(5), **CASES[case])
    p = _compile(model)
    assert any(i.op.name == "int8_dot" for i in p.main)
    rows, _ = p.executable.main.thread_plan()
    assert any(isinstance(r[0], Region) and PRIMITIVE in {c.kind for c in r[0].table} for r in rows)
    assert not [r for r in rows if getattr(r[0], "__qualname__", "").startswith("_kernel")]  # no int8 Python step
    got = p.run(feeds)[0]
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    np.testing.assert_array_equal(got, _compile(model).run(feeds)[0])
