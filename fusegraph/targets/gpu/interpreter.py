"""The gpu target without a GPU: the same lowering, plan and executable on CPU tensors, with the
generated kernels run by Triton's interpreter (TRITON_INTERPRET=1). Tests, CI and the ONNX suite
runner use it on machines without CUDA; it is slow and only meant to check results.

    target = interpreted_target()     # GpuTarget(device="cpu") with the interpreter set up
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# libdevice functions the interpreter lacks, as numpy ufuncs of the same meaning
_NUMPY_LIBDEVICE = {
    "rint": np.rint, "div_rn": np.divide, "pow": np.power, "fmod": np.fmod, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
}


def interpreter_libdevice(module: Any) -> None:
    """Give a generated kernel module numpy forms of the libdevice functions it calls (a
    kernels.MODULE_HOOKS entry)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    class Shim:
        def __getattr__(self, name):
            fn = _NUMPY_LIBDEVICE[name]

            def call(*args):
                data = [a.handle.data if isinstance(a, tl.core.tensor) else a for a in args]
                tensors = [a for a in args if isinstance(a, tl.core.tensor)]
                first = max(tensors, key=lambda a: a.handle.data.size)  # the broadcast result's type
                with np.errstate(all="ignore"):
                    out = np.asarray(fn(*data)).astype(first.handle.data.dtype)
                return tl.core.tensor(TensorHandle(out, first.handle.dtype), first.type)
            return call

    module.libdevice = Shim()


def use_interpreter() -> None:
    """Make generated kernels load under Triton's interpreter, with the libdevice shim. Call it
    before the first kernel is generated (triton.jit reads TRITON_INTERPRET when a module loads)."""
    from . import kernels

    os.environ["TRITON_INTERPRET"] = "1"
    if interpreter_libdevice not in kernels.MODULE_HOOKS:
        kernels.MODULE_HOOKS.append(interpreter_libdevice)


def interpreted_target(**options: Any):
    """A GpuTarget on the CPU through Triton's interpreter (`options` as GpuTarget takes them)."""
    from . import GpuTarget

    use_interpreter()
    return GpuTarget(device="cpu", **options)
