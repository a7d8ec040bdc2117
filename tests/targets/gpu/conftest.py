"""Fixtures of the gpu target's tests.

`gpu`-marked tests need CUDA and are skipped without it. The `gpu_target` fixture gives the real
target on a CUDA machine and, elsewhere (CI), the same target on the CPU with Triton's interpreter
(TRITON_INTERPRET=1), so the generated kernels, the planner and the executable are exercised
everywhere; it is skipped only when torch or triton is not installed.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
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


def _interpreter_libdevice(module) -> None:
    """Give generated modules numpy forms of the libdevice functions the interpreter lacks."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    class Shim:
        def __getattr__(self, name):
            fn = {"rint": np.rint, "pow": np.power, "fmod": np.fmod, "tan": np.tan, "asin": np.arcsin,
                  "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
                  "acosh": np.arccosh, "atanh": np.arctanh, "tanh": np.tanh, "sin": np.sin,
                  "cos": np.cos}[name]

            def call(*args):
                data = [a.handle.data if isinstance(a, tl.core.tensor) else a for a in args]
                first = next(a for a in args if isinstance(a, tl.core.tensor))
                with np.errstate(all="ignore"):
                    out = np.asarray(fn(*data)).astype(first.handle.data.dtype)
                return tl.core.tensor(TensorHandle(out, first.handle.dtype), first.type)
            return call

    module.libdevice = Shim()


@pytest.fixture(scope="session")
def gpu_target():
    if not (_has("torch") and _has("triton")):
        pytest.skip("needs torch and triton (pip install 'fusegraph[gpu]')")
    from fusegraph.targets.gpu import GpuTarget

    if cuda_available():
        return GpuTarget()
    os.environ["TRITON_INTERPRET"] = "1"  # read by triton.jit when the generated modules load
    from fusegraph.targets.gpu import kernels

    if _interpreter_libdevice not in kernels.MODULE_HOOKS:
        kernels.MODULE_HOOKS.append(_interpreter_libdevice)
    return GpuTarget(device="cpu")
