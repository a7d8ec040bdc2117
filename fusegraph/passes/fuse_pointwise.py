"""Fuses connected pointwise instructions into one `fused_pointwise` whose scalar body is the
composition of theirs.

Invariant afterwards: no pointwise instruction has a pointwise producer whose every user is that
instruction's fused group (such producers were absorbed). A group has one root (its only result).
The fused body computes what the group computed, roundings included: a half-precision op rounds its
result to float16/bfloat16 before its consumers read it (ONNX defines those intermediate types), so
an absorbed half value is rounded in the body and read back as float32, as the unfused op would be.
Except in a program that `quantize_fp16`/`quantize_bf16` made half (HALF_COMPUTE_KEY in its metadata):
there half is a storage format the compiler chose, not the model's arithmetic, so values that never
leave the kernel stay float32 and only the group's result is rounded — as PyTorch's Inductor and
autocast compute (1 + |x| rounded to half before a log loses x; a speech front-end was off by 1.2e-2).
"""

from __future__ import annotations

from ..ir.dtypes import DType
from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.shape import Shape
from ..ops.pointwise import FusedPointwise
from ..ops.scalar import Call, Expr, Var, convert, converts_to

HALF = (DType.float16, DType.bfloat16)
HALF_COMPUTE_KEY = "half_compute"  # program metadata set by quantize/fp16.py: the half type it chose
MAX_BODY_NODES = 256  # keeps bodies (and generated kernels) small when a DAG would unroll into a big tree


def fusible(ins: Instruction) -> bool:
    """Whether fuse_pointwise may take `ins` into a group (sink_concat asks it of the pieces it makes)."""
    return (ins.op.kind is OpKind.POINTWISE and not ins.module_args and isinstance(ins.shape, Shape)
            and not ins.shape.is_dynamic)


def _size(e: Expr) -> int:
    return 1 + sum(_size(a) for a in e.args) if isinstance(e, Call) else 1


def _substitute(e: Expr, mapping: dict[int, Expr]) -> Expr:
    if isinstance(e, Var):
        return mapping[e.index]
    if isinstance(e, Call):
        args = tuple(_substitute(a, mapping) for a in e.args)
        to, x = converts_to(e.fn), args[0] if args else None
        if to is not None and isinstance(x, Call):
            if x.fn == e.fn:
                return x  # convert_T(convert_T(y)) -> convert_T(y)
            if to in HALF and converts_to(x.fn) == DType.float32 and isinstance(x.args[0], Call) \
                    and x.args[0].fn == e.fn:
                return x.args[0]  # convert_h(convert_float32(convert_h(y))) -> convert_h(y): float32 holds h
        return Call(e.fn, args)
    return e


def _rounded(e: Expr, dtype: DType) -> Expr:
    """`e` rounded to `dtype` where a half op stores it, then read as float32 by the next op (every
    pointwise op computes half inputs in float32, PointwiseOp.compute). Other dtypes pass as they are."""
    if dtype not in HALF:
        return e
    if not (isinstance(e, Call) and converts_to(e.fn) == dtype):
        e = convert(e, dtype)
    return convert(e, DType.float32)


def _group(root: Instruction, done: set[int]) -> set[int]:
    """Grow the group upwards from `root` through producers used only inside the group."""
    group = {root.uid}
    frontier = [root]
    while frontier:
        ins = frontier.pop()
        for x in ins.inputs:
            if (x.uid in group or x.uid in done or not fusible(x) or x.module is not root.module
                    or x.shape.lens != root.shape.lens):
                continue
            if all(u.uid in group for u in x.users):
                group.add(x.uid)
                frontier.append(x)
    return group


def _body(root: Instruction, group: set[int], round_half: bool = True) -> tuple[Expr, list[Instruction]]:
    externals: list[Instruction] = []
    index: dict[int, int] = {}

    def build(ins: Instruction) -> Expr:
        if ins.uid not in group:
            if ins.uid not in index:
                index[ins.uid] = len(externals)
                externals.append(ins)
            return Var(index[ins.uid])
        value = _substitute(ins.op.expr, {k: build(x) for k, x in enumerate(ins.inputs)})
        return value if ins is root or not round_half else _rounded(value, ins.shape.dtype)

    return build(root), externals


def fuse_pointwise(module: Module) -> bool:
    changed = False
    done: set[int] = set()
    round_half = not (module.program is not None and module.program.metadata.get(HALF_COMPUTE_KEY))
    for root in reversed(module.instructions[:]):
        if root.uid in done or not fusible(root) or not root.users:
            continue
        group = _group(root, done)
        done |= group
        if len(group) < 2:
            continue
        body, externals = _body(root, group, round_half)
        if _size(body) > MAX_BODY_NODES:
            continue
        op = FusedPointwise(body_text=str(body), n_inputs=len(externals), out_type=root.shape.dtype)
        fused = module.insert(root, op, *externals)
        module.replace(root, fused)
        changed = True
    return changed
