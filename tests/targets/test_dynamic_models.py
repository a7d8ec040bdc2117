"""Every built-in and real model of the test suite compiled ONCE with a dynamic batch (and sequence or
resolution where it has one) and run at three shapes against ONNX Runtime, on ref and cpu (issue 16).
The same on the GPU: tests/targets/gpu/test_gpu_dynamic_models.py. fp32 tolerance as
tests/test_models_verify.py: rtol 1e-3, atol 1e-4 scaled by the output's magnitude."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest

import fusegraph
from fusegraph.ir import Dim
from tests.targets.dynamic_models import CASES
from tests.util import run_ort, target_or_skip

pytestmark = pytest.mark.slow


def relaxed(model, dyn) -> onnx.ModelProto:
    """The model with the dims `dyn` makes dynamic declared symbolic (the built-in UNet declares its
    256x256 input, which ONNX Runtime would hold it to): both engines run this one."""
    proto = onnx.load(model) if isinstance(model, str) else copy.deepcopy(model)
    for vi in proto.graph.input:
        for k, (d, spec) in enumerate(zip(vi.type.tensor_type.shape.dim, dyn.get(vi.name, []))):
            if isinstance(spec, Dim) and not spec.is_fixed and d.HasField("dim_value"):
                d.dim_param = f"{vi.name}_{k}"
    return proto


def check_case(case, target) -> None:
    proto = relaxed(case.load(), case.dyn)
    p = fusegraph.parse_onnx(proto, map_dyn_input_dims=case.dyn)
    assert any(s.is_dynamic for s in p.get_parameter_shapes().values())
    p.compile(target)
    rng = np.random.default_rng(0)
    for batch, size in case.shapes:
        feeds = case.feeds(batch, size, rng)
        got, want = p.run(feeds), run_ort(proto, feeds)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            g = np.asarray(g)
            assert g.shape == w.shape and g.dtype == w.dtype, f"{case} at {batch}x{size}: output {k}"
            scale = float(np.abs(w).max()) if w.size and w.dtype.kind == "f" else 1.0
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(scale, 1.0),
                                       err_msg=f"{case} at batch {batch}, size {size}: output {k}")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_ref(case):
    check_case(case, fusegraph.get_target("ref"))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_cpu(case):
    check_case(case, target_or_skip("cpu"))
