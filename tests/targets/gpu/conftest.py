"""Fixtures of the gpu target's tests.

`gpu`-marked tests need CUDA and are skipped without it. The `gpu_target` fixture gives the real
target on a CUDA machine and, elsewhere (CI), the same target on the CPU with Triton's interpreter
(TRITON_INTERPRET=1), so the generated kernels, the planner and the executable are exercised
everywhere; it is skipped only when torch or triton is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def cuda_available() -> bool:
    if not _has("torch"):
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (CUDA)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _interpreter_first():
    """Without a GPU, Triton's interpreter set up before any test here imports Triton (which reads
    TRITON_INTERPRET once): a test that imports Triton's NVIDIA backend first would otherwise leave
    the later tests' kernels compiled for a GPU there is not, whichever file runs first."""
    if _has("torch") and _has("triton") and not cuda_available():
        from fusegraph.targets.gpu.interpreter import use_interpreter

        use_interpreter()


@pytest.fixture(scope="session")
def gpu_target():
    if not (_has("torch") and _has("triton")):
        pytest.skip("needs torch and triton (pip install 'fusegraph[gpu]')")
    from fusegraph.targets.gpu import GpuTarget

    if cuda_available():
        return GpuTarget()
    from fusegraph.targets.gpu.interpreter import interpreted_target

    return interpreted_target()


@pytest.fixture(scope="session")
def target_of(gpu_target):
    """GpuTarget(gemm=...) where `gpu_target` runs: on the GPU, or through Triton's interpreter."""
    from fusegraph.targets.gpu import GpuTarget
    from fusegraph.targets.gpu.interpreter import interpreted_target

    return lambda gemm: interpreted_target(gemm=gemm) if gpu_target.device == "cpu" else GpuTarget(gemm=gemm)
