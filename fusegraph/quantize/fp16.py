"""Half-precision conversion of a program: `quantize_fp16` and `quantize_bf16`, generic IR passes that
every target runs.

Constant subexpressions are folded first, in float32; then float32 weights become half literals
for the ops that read them in half (clipped to the format's finite range, so -FLT_MAX masks stay
finite), float32 inputs are converted on entry and outputs converted back on exit: callers keep
feeding and reading float32. Ops named in `keep_fp32` (by default the reductions, softmax and the
layer-norm moments: everything that accumulates) read float32, their weights unrounded, and their
results are converted back, so accumulation stays in float32 while the tensors between ops are
half. Ops whose shape rule refuses half inputs are kept in float32 the same way. Run it before
fusion: the converts then fuse into the neighbouring kernels (a layer norm stays one fused_reduce
that accumulates in float32), and the program's metadata tells fuse_pointwise that half is storage
here, so a fused chain computes in float32 and rounds once, at its end.

An output's last pointwise op computes in float32 from its half inputs, so the result is not
rounded to half on its way out. Invariant afterwards: no float32 value remains in the main module
except inputs, outputs and the inputs of their last pointwise ops, the inputs and results of kept
ops, and results of ops whose attributes ask for float32 explicitly.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Iterable

import ml_dtypes
import numpy as np

from ..errors import CompileError, FusegraphError
from ..ir.builtin import Param
from ..ir.dtypes import DType
from ..ir.limits import cores
from ..ir.module import Instruction, Module
from ..ir.op import OpKind
from ..ir.program import Program
from ..ir.shape import Shape
from ..ops.pointwise import Convert, FusedPointwise
from ..passes.fuse_pointwise import HALF_COMPUTE_KEY
from ..passes.propagate_constant import propagate_constant

DEFAULT_KEEP_FP32 = frozenset({
    "reduce_sum", "reduce_mean", "reduce_prod", "reduce_dynamic", "moments", "softmax", "log_softmax",
    "fused_reduce",
})
F32 = DType.float32


def quantize_fp16(program: Program, keep_fp32: Iterable[str] = DEFAULT_KEEP_FP32) -> Program:
    """Convert `program` (in place) to float16 compute; returns it."""
    _quantize_module(program.main, DType.float16, frozenset(keep_fp32))
    return program


def quantize_bf16(program: Program, keep_fp32: Iterable[str] = DEFAULT_KEEP_FP32) -> Program:
    """Convert `program` (in place) to bfloat16 compute; returns it."""
    _quantize_module(program.main, DType.bfloat16, frozenset(keep_fp32))
    return program


def half_io(program: Program, half: DType = DType.float16) -> Program:
    """The program's float32 inputs and outputs (main module) made `half`, in place: each such input
    a `half` parameter of its name read through a convert to float32, each such output converted to
    `half` on its way out (ONNX Runtime's float16 conversion with keep_io_types=False, TensorRT's
    half I/O formats): callers pass and receive `half` arrays, and the outputs and the copies between
    host and device take half the memory. The converts are undone by the half conversion that follows
    (`quantize_fp16`: a same-type convert is dropped); alone, the program computes as before. Inputs
    and outputs of other types, and an already `half` program, stay as they are."""
    module = program.main
    body = next(i for i in module.instructions if not (i.is_param or i.is_literal))  # the return at least
    for p in list(module.parameters):
        if not _is_f32(p):
            continue
        readers, shape = list(p.users), p.shape.with_dtype(half)
        p.op, p.shape = Param(p.op.param_name, shape), shape
        wide = module.insert(body, Convert(to=F32), p)
        wide.tensor = p.tensor
        for u in readers:
            u.inputs = [wide if x is p else x for x in u.inputs]
            wide.users.append(u)
        p.users = [wide]
    ret = module.return_ins
    module.replace_inputs(ret, [module.insert(ret, Convert(to=half), o) if _is_f32(o) else o for o in ret.inputs])
    return program


@dataclasses.dataclass(frozen=True)
class QuantizePass:
    """The half conversion as a pipeline pass (the main module only; it reports a change if any),
    keeping the ops named in `keep` in float32."""

    half: DType
    keep: frozenset[str] = DEFAULT_KEEP_FP32

    @property
    def pass_name(self) -> str:
        return f"quantize_{'fp16' if self.half == DType.float16 else 'bf16'}_pass"

    def __call__(self, module: Module) -> bool:
        return module.parent is None and _quantize_module(module, self.half, self.keep)


quantize_fp16_pass = QuantizePass(DType.float16)
quantize_bf16_pass = QuantizePass(DType.bfloat16)


def fp16_pass(keep_fp32: Iterable[str] = ()) -> QuantizePass:
    """The fp16 pass keeping the ops named in `keep_fp32` in float32 besides the defaults (reductions,
    softmax, layer norms): a CompileError for a name that is no op."""
    from ..ir.op import registered_ops

    known = registered_ops()
    unknown = sorted(set(keep_fp32) - set(known))
    if unknown:
        raise CompileError(f"keep_fp32: no op named {', '.join(map(repr, unknown))} (the names "
                           f"`fusegraph ops` lists, e.g. div, convolution)")
    return QuantizePass(DType.float16, DEFAULT_KEEP_FP32 | frozenset(keep_fp32))


def _is_f32(ins: Instruction) -> bool:
    return isinstance(ins.shape, Shape) and ins.shape.dtype == F32


_CHUNK = 1 << 18  # elements of a weight one thread rounds at a time


def _half_literal(value: np.ndarray, half: DType, pool: concurrent.futures.Executor) -> np.ndarray:
    """`value` clipped to half's finite range and rounded to it; a large weight in chunks, in `pool`'s
    threads (numpy's loops release the GIL; one pool for the pass: a pool per weight cost GPT-2 60 ms):
    on the 2-core VM the fp16 pass over GPT-2 (124M weights) took 0.25 s instead of 0.49, over
    ViT-B/16 0.23 s instead of 0.35 (benchmarks/compile_time.py --gpu-fp16)."""
    top = float(ml_dtypes.finfo(half.np).max)
    if value.size < 2 * _CHUNK:
        return np.clip(value, -top, top).astype(half.np)
    out = np.empty(value.shape, half.np)
    src, dst = np.ascontiguousarray(value).reshape(-1), out.reshape(-1)

    def part(lo: int) -> None:
        dst[lo:lo + _CHUNK] = np.clip(src[lo:lo + _CHUNK], -top, top)  # (the assignment rounds)

    list(pool.map(part, range(0, src.size, _CHUNK)))
    return out


def _quantize_module(module: Module, half: DType, keep: frozenset[str]) -> bool:
    if not any(_is_f32(i) for i in module.instructions):
        return False
    # constant subexpressions first, in float32: only their results are rounded to half. A batch
    # norm's variance can exceed half's range (PP-OCRv4 det: 9.8e7) where its folded scale
    # gamma / sqrt(var + eps) does not; clipped to 65504 first, it made the model's output garbage.
    propagate_constant(module)
    if module.program is not None:  # fusion then keeps the values inside a kernel in float32
        module.program.metadata[HALF_COMPUTE_KEY] = half.name
    with concurrent.futures.ThreadPoolExecutor(cores()) as pool:  # (its threads start at the first large weight)
        _rewrite(module, half, keep, pool)
    return True


def _rewrite(module: Module, half: DType, keep: frozenset[str], pool: concurrent.futures.Executor) -> None:
    """Every instruction of `module` computing in half (see the module docstring); `pool` rounds the
    large weights."""
    new: dict[int, Instruction] = {}       # old uid -> its replacement
    converted: dict[tuple[int, DType], Instruction] = {}

    def as_type(x: Instruction, dt: DType, before: Instruction) -> Instruction:
        """`x` (a new instruction) as `dt` (one convert per value and type). A float32 constant is
        rounded here, for the ops that read it in half: one kept in float32 reads it unrounded."""
        if not isinstance(x.shape, Shape) or x.shape.dtype == dt or not x.shape.dtype.is_float:
            return x
        key = (x.uid, dt)
        if key not in converted:
            if x.is_literal and dt == half:
                converted[key] = module.insert(before, type(x.op)(_half_literal(x.literal, half, pool)))
            else:
                converted[key] = module.insert(before, Convert(to=dt), x)
        return converted[key]

    old = list(module.instructions)
    watermark = max(i.uid for i in old)  # instructions made from here on have larger uids
    ret = module.return_ins
    outputs = {o.uid for o in ret.inputs}
    for ins in old:
        if ins is ret:
            continue
        if ins.is_param or ins.is_literal:  # (constants are rounded for their half readers: as_type)
            new[ins.uid] = ins
            continue
        inputs = [new.get(x.uid, x) for x in ins.inputs]
        if ins.uid in outputs and ins.op.kind is OpKind.POINTWISE and _is_f32(ins):
            # an output's last pointwise op computes in float32 from the half tensors, so its result
            # is not rounded to half on the way out (a sigmoid's 1e-6 is a half subnormal)
            new[ins.uid] = module.insert(ins, ins.op, *[as_type(x, F32, ins) for x in inputs])
            continue
        if ins.op.name in keep or ins.module_args and ins.op.kind is OpKind.CONTROL:
            new[ins.uid] = _rebuild(module, ins, [as_type(x, F32, ins) for x in inputs], as_type, half)
            continue
        half_inputs = [as_type(x, half, ins) if _is_f32(x) else x for x in inputs]
        try:
            new[ins.uid] = module.insert(ins, retyped(ins.op, (F32,), half), *half_inputs, module_args=ins.module_args)
        except FusegraphError:  # the op refuses half inputs: keep it in float32
            new[ins.uid] = _rebuild(module, ins, [as_type(x, F32, ins) for x in inputs], as_type, half)
    _keep_provenance(old, new, watermark)
    outs = []
    for o in ret.inputs:
        x = new.get(o.uid, o)
        outs.append(as_type(x, o.shape.dtype, ret) if isinstance(o.shape, Shape) and x.shape.dtype != o.shape.dtype else x)
    module.replace_inputs(ret, outs)
    for ins in reversed(old):  # the old instructions are now unused
        if ins is not ret and not ins.users and not ins.is_param and ins.module is module:
            module.remove(ins)


def _keep_provenance(old: list[Instruction], new: dict[int, Instruction], watermark: int) -> None:
    """Each replacement computes its old instruction's ONNX nodes and tensor, and so do the converts
    made for it to read (profiles, traces and `verify --per-layer` name nodes through them)."""
    for ins in old:
        r = new.get(ins.uid)
        if r is None or r is ins or ins.op.kind is OpKind.BUILTIN:
            continue
        r.origin = r.origin or ins.origin
        r.tensor = r.tensor or ins.tensor
        stack = list(r.inputs)
        while stack:  # the converts made for r to read: new, computing, not yet stamped
            x = stack.pop()
            if x.uid > watermark and x.op.kind is not OpKind.BUILTIN and not x.origin:
                x.origin = ins.origin
                stack.extend(x.inputs)


def _rebuild(module: Module, ins: Instruction, inputs: list[Instruction], as_type, half: DType) -> Instruction:
    """`ins` over `inputs` as it was (float32 inside); a float32 result is handed on as half."""
    x = module.insert(ins, ins.op, *inputs, module_args=ins.module_args)
    return as_type(x, half, ins) if _is_f32(x) else x


def retyped(op, old: tuple[DType, ...], new: DType):
    """The op with the attributes that name its result type (a conversion's target, a fused chain's
    out_type) turned from one of `old` to `new`; other ops as they are. (Half conversions both ways:
    here, and the cpu target's widen_half.)"""
    if isinstance(op, Convert) and op.to in old:
        return Convert(to=new, saturate=op.saturate)
    if isinstance(op, FusedPointwise) and op.out_type in old:
        return FusedPointwise(body_text=op.body_text, n_inputs=op.n_inputs, out_type=new)
    return op
