"""A fused_reduce over axes that are not the trailing ones (YOLOv8's Q/DQ'd DFL softmax over the 16
bins of [1, 16, 4, 8400]) reads its inputs transposed so that the reduced axes come last, copied
contiguous, and its result is transposed back (a view). The generated reduction kernels take rows of
contiguous elements only (codegen/reduce.py); before, the ref interpreter ran the body op by op in
numpy: 15.8 of YOLOv8n int8's 38 ms. A lone softmax stays (numpy's softmax along any axis is a few
vectorized passes; choose_layout keeps the float DFL convolution N, C, H, W around it).

    fused_reduce[axes=(1,)](x: [1, 16, 4, 8400], s)
        -> transpose[perm=(0, 2, 3, 1)](fused_reduce[axes=(3,)](contiguous(transpose(x)), s))

A lone reduce_sum/mean/max/min over leading axes (an NHWC global average pool) is moved the same way.

Taken when every value of the body is 0-d or of the full rank and the body has only broadcasts,
pointwise ops, reductions and softmaxes (whose attributes follow the permutation); anything else is
left as it was. Invariant: values unchanged (the same body on permuted indices).
"""

from __future__ import annotations

import dataclasses

from ....ir.module import Instruction, Module
from ....ir.op import Op, OpKind
from ....ir.shape import Shape
from ....ops.fused import FusedReduce
from ....ops.movement import Broadcast, Contiguous, Transpose
from ....passes.fuse_reduce import NORMALIZATIONS, REDUCTIONS

# the reductions a lone step runs as generated C (kernels/pointwise.plain_reduce), trailing axes only
PLAIN_REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min"})


def _trailing(lens: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Whether `axes` are the last of the dims longer than 1 (what the reduction kernels take)."""
    long = [a for a, n in enumerate(lens) if n != 1]
    reduced = [a for a in long if a in axes]
    return long[len(long) - len(reduced):] == reduced


def _permuted(op: Op, perm: list[int]) -> Op | None:
    """`op` acting on the permuted tensor, or None when it is not one this pass can permute."""
    if isinstance(op, Broadcast):
        return Broadcast(out_lens=tuple(op.out_lens[p] for p in perm))
    if op.name in NORMALIZATIONS:
        return dataclasses.replace(op, axis=perm.index(op.axis % len(perm)))
    if op.name in REDUCTIONS and op.name != "moments":  # moments gives a tuple
        return dataclasses.replace(op, axes=tuple(sorted(perm.index(a % len(perm)) for a in op.axes)))
    return op if op.kind is OpKind.POINTWISE else None


def _ops(body: Module, perm: list[int]) -> list[Op] | None:
    """The permuted op of each computing instruction of `body`, or None when one cannot be permuted."""
    nd, ops = len(perm), []
    for ins in body:
        if ins.is_param or ins.op.name == "@return":
            continue
        op = _permuted(ins.op, perm)
        if op is None or ins.module_args or not isinstance(ins.shape, Shape) or ins.shape.ndim not in (0, nd):
            return None
        if isinstance(op, Broadcast) and ins.inputs[0].shape.ndim not in (0, nd):
            return None  # numpy aligns a lower rank on the trailing dims: not where the permutation puts them
        ops.append(op)
    return ops


def _body(module: Module, body: Module, params: list[Shape], ops: list[Op]) -> Module:
    """`body` over permuted tensors: its parameters `params`, its instructions' ops `ops`."""
    new = module.program.create_module(f"{body.name}_last", module)
    mapped = {p.uid: new.add_parameter(p.op.param_name, s) for p, s in zip(body.parameters, params, strict=True)}
    todo = iter(ops)
    for ins in body:
        if ins.is_param:
            continue
        if ins.op.name == "@return":
            new.add_return(*[mapped[x.uid] for x in ins.inputs])
        else:
            mapped[ins.uid] = new.add(next(todo), *[mapped[x.uid] for x in ins.inputs])
    return new


def _plain(module: Module, ins: Instruction) -> bool:
    """A lone reduction (kernels/pointwise.plain_reduce) over leading axes: its input transposed and
    copied so they come last, its result transposed back. (An NHWC global average pool, reduce_mean
    over H and W, ran as numpy's mean, a Python step between native programs.)"""
    x = ins.inputs[0]
    if len(ins.inputs) != 1 or ins.shape.is_dynamic or not isinstance(x.shape, Shape) or x.shape.is_dynamic:
        return False
    nd, axes = x.shape.ndim, tuple(sorted(a % max(x.shape.ndim, 1) for a in ins.op.axes))
    if nd < 2 or _trailing(x.shape.lens, axes):
        return False
    perm = [a for a in range(nd) if a not in axes] + list(axes)
    moved = module.insert(ins, Contiguous(), module.insert(ins, Transpose(perm=tuple(perm)), x))
    new = module.insert(ins, _permuted(ins.op, perm), moved)
    module.replace(ins, module.insert(ins, Transpose(perm=tuple(perm.index(a) for a in range(nd))), new))
    return True


def _rewrite(module: Module, ins: Instruction) -> bool:
    if ins.op.name in PLAIN_REDUCTIONS:
        return _plain(module, ins)
    if ins.op.name != "fused_reduce":
        return False
    axes = ins.op.axes
    if ins.shape.is_dynamic or any(not isinstance(x.shape, Shape) or x.shape.is_dynamic for x in ins.inputs):
        return False
    ranked = [x.shape.lens for x in ins.inputs if x.shape.ndim]
    if not ranked:
        return False
    full = tuple(max(c) for c in zip(*ranked))  # the reduced lens: the inputs broadcast together
    nd = len(full)
    if nd < 2 or _trailing(full, axes) or any(len(r) != nd for r in ranked):
        return False
    perm = [a for a in range(nd) if a not in axes] + sorted(axes)
    ops = _ops(ins.module_args[0], perm)
    if ops is None:
        return False
    inputs = [x if x.shape.ndim == 0 else
              module.insert(ins, Contiguous(), module.insert(ins, Transpose(perm=tuple(perm)), x)) for x in ins.inputs]
    body = _body(module, ins.module_args[0], [x.shape for x in inputs], ops)
    new = module.insert(ins, FusedReduce(axes=tuple(range(nd - len(axes), nd))), *inputs, module_args=[body])
    inverse = tuple(perm.index(a) for a in range(nd))
    module.replace(ins, module.insert(ins, Transpose(perm=inverse), new))
    return True


def move_reduced_axes_last(module: Module) -> bool:
    if module.program is None:
        return False
    changed = False
    for ins in list(module):
        if ins.users:
            changed |= _rewrite(module, ins)
    return changed
