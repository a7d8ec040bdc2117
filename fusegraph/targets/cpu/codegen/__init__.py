"""Generated C kernels for the cpu target: fused pointwise chains and fused reductions.

Generators write C source (`KernelSource`); one `build_library` call compiles every kernel of a
program in one translation unit (cached on disk by source, flags and compiler) and loads it:

    src, layout = pointwise_kernel_for(ins.op.expr, [i.shape for i in ins.inputs], ins.shape)
    red = reduce_kernel(fused.module_args[0], fused.op.axes)      # a fused_reduce instruction
    lib = build_library([src, red], threads=options.threads)      # lib.source: the C text to save
    step = lib[src.name].bind_addresses(out_addr, in_addrs, layout.dims())   # once, at lowering
    step()                                                          # per run: no allocation

Generators raise `CodegenUnsupported` (a CompileError and a NotImplementedError) for what they do not
handle (float16/bfloat16, reductions over leading axes, ...), so the target can pick another kernel;
a missing C compiler is a plain `CompileError`.
"""

from .build import Kernel, Library, build_library, find_compiler, library_path, translation_unit
from .c_expr import CodegenUnsupported, CRenderer, CValue
from .kernels import KernelSource, Layout, coalesce, plan_pointwise, pointwise_kernel, pointwise_kernel_for
from .memo import KernelCache, kernel_cache, source_from_json, source_to_json
from .reduce import reduce_kernel, softmax_kernel

__all__ = [
    "CRenderer", "CValue", "CodegenUnsupported", "Kernel", "KernelCache", "KernelSource", "Layout", "Library",
    "build_library", "coalesce", "find_compiler", "kernel_cache", "library_path", "plan_pointwise", "pointwise_kernel",
    "pointwise_kernel_for", "reduce_kernel", "softmax_kernel", "source_from_json", "source_to_json",
    "translation_unit",
]
