"""Lowerings of arithmetic: pointwise ops and fused_pointwise as generated Triton kernels (torch ops for
dtypes Triton lacks), fused_reduce as one generated Triton kernel (its body op by op otherwise), and
the plain reductions, softmax and moments through torch's CUDA kernels."""

from __future__ import annotations

from ...ir.op import registered_ops
from ...ops.pointwise import PointwiseOp
from . import torch_expr
from .device import torch, torch_dtype
from .launch import PointwiseLauncher, ReduceLauncher
from .lowering import lowering
from .triton_expr import expr_types, literal_exponents, triton_types_ok
from .triton_reduce import Unsupported, analyze_body

POINTWISE = sorted(n for n, c in registered_ops().items() if issubclass(c, PointwiseOp) and n != "identity")


@lowering(*POINTWISE, mode="into", note="generated Triton kernel", in_place=True)
def pointwise(ctx, step):
    ins = step.ins
    expr = literal_exponents(ins.op.expr, step.inputs)
    in_types = [x.shape.dtype for x in step.inputs]
    out_type = ins.shape.dtype
    if triton_types_ok([*in_types, out_type, *expr_types(expr, in_types)]):
        launcher = PointwiseLauncher(expr, in_types, out_type)
        ctx.kernels.append(launcher)
        return launcher
    torch_expr.check_expr(expr)
    target = torch_dtype(out_type)
    consts: dict = {}

    def run(out, *xs):  # dtypes without Triton types (float8, complex): torch's kernels
        out.copy_(torch_expr.evaluate(expr, list(xs), consts).to(target).broadcast_to(out.shape))

    return run


@lowering("identity", "staged_input", mode="view",
          note="a view (staged_input: an input's conversion, done by its copy-in, plan._staged_inputs)")
def identity(ctx, step):
    return lambda x: x


@lowering("fused_reduce", mode="into", note="generated Triton kernel (one pass per reduction)")
def fused_reduce(ctx, step):
    ins = step.ins
    body = ins.module_args[0]
    try:
        rb = analyze_body(body, ins.op.axes)
        if any(rb.full[a] == 0 for a in rb.axes):
            raise Unsupported("empty reduction")
    except Unsupported:
        return ctx.submodule_runner(body)  # the body's ops one by one, each with its own lowering
    launcher = ReduceLauncher(rb)
    ctx.kernels.append(launcher)
    return launcher


# -- plain reductions (outside fused regions) -------------------------------------------------------
@lowering("reduce_sum", mode="into")
def reduce_sum(ctx, step):
    axes = list(step.ins.op.axes)
    t = torch()

    def run(out, x):
        if not axes:
            out.copy_(x)
        elif x.dtype == t.bool:
            out.copy_(x.sum(dim=axes, keepdim=True).to(t.bool))
        else:
            t.sum(x, dim=axes, keepdim=True, dtype=out.dtype, out=out)
    return run


@lowering("reduce_mean", mode="into")
def reduce_mean(ctx, step):
    axes = list(step.ins.op.axes)
    t = torch()

    def run(out, x):
        if not axes:
            out.copy_(x)
        elif x.dtype.is_floating_point:
            t.mean(x, dim=axes, keepdim=True, out=out)
        else:  # integer means truncate toward zero (the reference's rule)
            out.copy_(t.trunc(x.to(t.float64).mean(dim=axes, keepdim=True)))
    return run


@lowering("reduce_max", "reduce_min", mode="into")
def reduce_extremum(ctx, step):
    axes = list(step.ins.op.axes)
    t = torch()
    fn = t.amax if step.kind == "reduce_max" else t.amin

    def run(out, x):
        if not axes:
            out.copy_(x)
        elif x.numel() == 0:  # an empty reduction gives the dtype's lowest (max) or highest (min)
            info = t.finfo(x.dtype) if x.dtype.is_floating_point else t.iinfo(x.dtype)
            inf = float("inf") if x.dtype.is_floating_point else None
            if step.kind == "reduce_max":
                out.fill_(-inf if inf else info.min)
            else:
                out.fill_(inf if inf else info.max)
        else:
            out.copy_(fn(x, dim=axes, keepdim=True))
    return run


@lowering("reduce_prod", mode="into")
def reduce_prod(ctx, step):
    axes = list(step.ins.op.axes)

    def run(out, x):
        for a in axes:
            x = x.prod(dim=a, keepdim=True)
        out.copy_(x)
    return run


@lowering("argmax", "argmin", mode="into")
def arg_extremum(ctx, step):
    op = step.ins.op
    t = torch()
    fn = t.argmax if step.kind == "argmax" else t.argmin

    def run(out, x):
        if op.select_last_index:  # the last extremum is the first of the reversed axis
            r = fn(x.flip(op.axis), dim=op.axis, keepdim=True)
            out.copy_(x.shape[op.axis] - 1 - r)
        else:
            out.copy_(fn(x, dim=op.axis, keepdim=True))
    return run


@lowering("softmax", "log_softmax", mode="into")
def softmax(ctx, step):
    axis = step.ins.op.axis
    t = torch()
    fn = t.softmax if step.kind == "softmax" else t.log_softmax

    def run(out, x):
        if x.numel():
            out.copy_(fn(x, dim=axis))
    return run


@lowering("moments", mode="value")
def moments(ctx, step):
    op = step.ins.op
    axes = list(op.axes)
    t = torch()

    def run(x):
        xf = x.float() if x.dtype in (t.float16, t.bfloat16) else x
        if op.centered:
            var, mean = t.var_mean(xf, dim=axes, keepdim=True, correction=0)
        else:
            mean = xf.mean(dim=axes, keepdim=True)
            var = (xf * xf).mean(dim=axes, keepdim=True)
        return mean.to(x.dtype), var.to(x.dtype)
    return run
