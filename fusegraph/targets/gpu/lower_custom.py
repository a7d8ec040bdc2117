"""Custom ops (fusegraph/custom) on the gpu target: a TorchKernel is a "value" step (its function
returns the output tensors), a TritonKernel an "into" step (its launch writes the buffer the plan
gives it, so a static program still captures as one CUDA graph). An op without a gpu kernel has no
entry: the target's host steps run its reference when the definition allows it (host.py, with a
HostFallbackWarning naming the op), else compiling is a CompileError naming it (dynamic.py)."""

from __future__ import annotations

from ...custom.definition import custom_ops
from ...custom.kernels import TorchKernel, TritonKernel
from ...errors import CompileError, ExecutionError
from ...ir.shape import Shape, TupleShape
from .lowering import LOWERINGS, Lowering


def _torch_value(ctx, step):
    op = step.ins.op
    fn, attrs = op.definition.gpu.fn, op.attrs
    shapes = step.ins.shape.elements if isinstance(step.ins.shape, TupleShape) else (step.ins.shape,)

    def run(*args):
        out = fn(*args, **attrs)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        for k, (o, s) in enumerate(zip(outs, shapes)):
            if not isinstance(s, Shape) or tuple(o.shape) != tuple(s.lens):
                raise ExecutionError(f"custom op {op.definition.qualified}: its gpu kernel's output {k} is "
                                     f"{list(o.shape)}, its shape rule says {s}")
        return outs if isinstance(step.ins.shape, TupleShape) else outs[0]
    return run


def _triton_into(ctx, step):
    op = step.ins.op
    if isinstance(step.ins.shape, TupleShape):
        raise CompileError(f"target 'gpu': custom op {op.definition.qualified}: a TritonKernel writes one output, "
                           f"its shape rule gives {step.ins.shape} (use a TorchKernel)")
    launch, attrs = op.definition.gpu.launch, op.attrs

    def run(out, *args):
        launch(out, *args, **attrs)
    return run


def install(d) -> None:
    if isinstance(d.gpu, TorchKernel):
        LOWERINGS[d.op_name] = Lowering("value", _torch_value, f"custom op {d.qualified}: torch function")
    elif isinstance(d.gpu, TritonKernel):
        LOWERINGS[d.op_name] = Lowering("into", _triton_into, f"custom op {d.qualified}: Triton kernel")
    else:
        LOWERINGS.pop(d.op_name, None)  # (a definition replaced by one without a gpu kernel)


for _d in custom_ops().values():  # the ops defined before this target's tables were loaded
    install(_d)
