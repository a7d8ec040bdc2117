"""Generated C kernels for the cpu target: fused pointwise chains and fused reductions.

`pointwise_kernel` / `reduce_kernel` / `softmax_kernel` write C source (`KernelSource`); one
`build_library` call compiles every kernel of a program in one translation unit (cached on disk) and
loads it. Generators raise `CodegenUnsupported` for what they do not handle, so the target can choose
another kernel; a missing C compiler is a `CompileError`.
"""

from .build import Kernel, Library, build_library, find_compiler
from .c_expr import CodegenUnsupported, CRenderer, CValue
from .kernels import KernelSource, Layout, coalesce, plan_pointwise, pointwise_kernel, pointwise_kernel_for
from .reduce import reduce_kernel, softmax_kernel

__all__ = [
    "CRenderer", "CValue", "CodegenUnsupported", "Kernel", "KernelSource", "Layout", "Library", "build_library",
    "coalesce", "find_compiler", "plan_pointwise", "pointwise_kernel", "pointwise_kernel_for", "reduce_kernel",
    "softmax_kernel",
]
