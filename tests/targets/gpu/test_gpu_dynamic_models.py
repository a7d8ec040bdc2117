"""tests/targets/test_dynamic_models.py on the GPU: every built-in and real model compiled once with a
dynamic batch (and sequence or resolution) and run at three shapes against ONNX Runtime, fp32. Marked
`gpu` (an NVIDIA GPU; under Triton's interpreter these would take hours) and `slow`. The real models
need their packages' .onnx files (docs/developing.md, "The gpu target without a GPU")."""

from __future__ import annotations

import pytest

from tests.targets.dynamic_models import CASES
from tests.targets.test_dynamic_models import check_case

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu(case, gpu_target):
    check_case(case, gpu_target)
