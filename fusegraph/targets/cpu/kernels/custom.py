"""Custom ops (fusegraph/custom) on the cpu target: their C function, built with the generated
kernels' machinery into a library of its own (cached on disk; never part of a .fgx's kernels.c), or
their Python callable; without either, their numpy reference where the definition allows it (with
a CustomOpFallbackWarning naming the op), else a CompileError naming the op."""

from __future__ import annotations

import ctypes
import hashlib
import warnings

import numpy as np

from ....custom.definition import CustomOp, check_result, custom_ops
from ....custom.kernels import CKernel
from ....custom.warnings import CustomOpFallbackWarning
from ....errors import CompileError
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..lowering import LOWERINGS, Kernel, LowerContext, reference_kernel


def lower_custom(ins: Instruction, ctx: LowerContext) -> Kernel:
    op: CustomOp = ins.op  # type: ignore[assignment]
    d = op.definition
    if isinstance(d.cpu, CKernel):
        return _c_kernel(ins, op, ctx)
    if d.cpu is not None:
        fn, attrs = d.cpu, op.attrs

        def run(args, out):
            r = check_result(op, args, fn(*args, **attrs))
            if out is None:
                return r
            np.copyto(out, r)
            return out
        return run
    if not d.host_fallback:
        raise CompileError(f"cpu target: custom op {d.qualified} has no cpu kernel and its definition does not "
                           "allow running its reference (host_fallback=False)")
    warnings.warn(f"cpu target: custom op {d.qualified} has no cpu kernel: its numpy reference runs",
                  CustomOpFallbackWarning, stacklevel=2)
    return reference_kernel(ins, ctx)


def _c_source(op: CustomOp, kernel: CKernel) -> tuple[str, str]:
    """The translation unit's part for this instance: its attributes as macros, the user's symbol
    renamed to one named by the content (instances with other attributes are other kernels)."""
    macros = "".join(f"#define ATTR_{k} {_c_value(v)}\n" for k, v in op.attrs.items() if not isinstance(v, str))
    body = f"{macros}#pragma GCC visibility push(default)\n{kernel.source}\n#pragma GCC visibility pop\n"
    name = "fgc_" + hashlib.sha256((op.definition.qualified + body).encode()).hexdigest()[:16]
    undefs = "".join(f"#undef ATTR_{k}\n" for k, v in op.attrs.items() if not isinstance(v, str))
    return name, f"#define {kernel.symbol} {name}\n{body}#undef {kernel.symbol}\n{undefs}"


def _c_value(v) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, tuple):
        return "{" + ", ".join(_c_value(x) for x in v) + "}"
    return repr(float(v)) + "f" if isinstance(v, float) else str(int(v))


def _c_kernel(ins: Instruction, op: CustomOp, ctx: LowerContext) -> Kernel:
    from ..codegen import KernelSource, build_library

    d = op.definition
    if not isinstance(ins.shape, Shape):
        raise CompileError(f"cpu target: custom op {d.qualified}: a C kernel writes one output, its shape rule "
                           f"gives {ins.shape}")
    name, code = _c_source(op, d.cpu)  # type: ignore[arg-type]
    src = KernelSource(name=name, code=code, helpers=(), in_dtypes=tuple(i.shape.dtype for i in ins.inputs),
                       out_dtype=ins.shape.dtype)
    try:
        kernel = build_library([src], threads=ctx.threads)[name]
    except CompileError as e:
        raise CompileError(f"cpu target: custom op {d.qualified}: its C kernel {d.cpu.symbol!r} does not build: "  # type: ignore[union-attr]
                           f"{e}") from None
    static = None if ins.shape.is_dynamic else ins.shape
    dtype = ins.shape.dtype.np

    def run(args, out):
        args = [np.ascontiguousarray(a) for a in args]
        shape = static or op.compute_shape([Shape.of(i.shape.dtype, a.shape) for i, a in zip(ins.inputs, args)])
        if out is None or not out.flags.c_contiguous:
            out = np.empty(shape.lens, dtype)
        dims = [len(out.shape), *out.shape]
        for a in args:
            dims += [a.ndim, *a.shape]
        ptrs = (ctypes.c_void_p * (1 + len(args)))(out.ctypes.data, *[a.ctypes.data for a in args])
        kernel._fn(ptrs, (ctypes.c_int64 * len(dims))(*dims), kernel.threads)
        return out

    return run


def install(d) -> None:
    LOWERINGS[d.op_name] = lower_custom


for _d in custom_ops().values():  # the ops defined before this target was imported
    install(_d)
