"""Runs 2-D (de)convolutions and poolings on channels-last tensors (N, H, W, C), the layout of
oneDNN's fast kernels: on NCHW it falls back to gemm-based convolutions, 2-4x slower (see
benchmarks/results/onednn_vs_numpy-*.json).

Each float32 (de)convolution (with its epilogue or not) and pooling that oneDNN runs becomes its
channels-last form between two transposes (views, no copies): x -> transpose(N,H,W,C) -> op ->
transpose(N,C,H,W).
Transposes then sink through the ops between such layers that do not care about the order of axes
(pointwise math, concat, slice, resize: rewritten over the permuted axes), and back-to-back
transposes cancel (simplify_reshapes). Invariant: values stay the same; the channels-last regions
are joined without copies, and a consumer outside them reads a strided N,C,H,W view (it copies only
if it needs a standard layout, e.g. a reshape)."""

from __future__ import annotations

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.op import Op, OpKind
from ....ir.shape import Shape
from ....ops.movement import Contiguous, Transpose
from ....passes.memory_coloring import is_view
from ....passes.simplify_reshapes import simplify_reshapes
from ..ops import ConvEpilogue, DeconvEpilogue, PoolingChannelsLast, to_channels_first, to_channels_last

SPATIAL_RANKS = (4,)  # 2-D images; 1-D and 3-D convolutions keep N, C, *spatial
# A convolution with fewer output channels than a vector (YOLO's box decoding: 16 -> 1) gains
# nothing channels-last: its N, C, H, W gemm kernel is as fast, and its input comes from a
# softmax over N, C, H, W that would have to be copied.
MIN_CHANNELS = 8


# window ops oneDNN runs channels-last, and the epilogue form a plain one becomes
_EPILOGUE_OF = {"convolution": ConvEpilogue, "deconvolution": DeconvEpilogue}
_WINDOWS = ("convolution", "conv_epilogue", "deconvolution", "deconv_epilogue")


def _static_f32(ins: Instruction) -> bool:
    s = ins.shape
    return isinstance(s, Shape) and not s.is_dynamic and s.dtype == DType.float32 and s.ndim in SPATIAL_RANKS


def _channels_last_op(ins: Instruction) -> Op | None:
    """The channels-last form of `ins`, or None when it keeps its layout."""
    op = ins.op
    if op.name == "int8_conv":  # oneDNN's int8 convolutions are channels-last (or blocked) only
        s = ins.shape
        ok = not op.channels_last and not s.is_dynamic and s.ndim in SPATIAL_RANKS and s.lens[1] >= MIN_CHANNELS
        return _replace(op, channels_last=True) if ok else None
    if op.name not in (*_WINDOWS, "pooling") or not _static_f32(ins) or not _static_f32(ins.inputs[0]):
        return None
    if op.name in _WINDOWS and ins.inputs[1].is_literal and ins.shape.lens[1] >= MIN_CHANNELS:
        if op.name in _EPILOGUE_OF:
            return _EPILOGUE_OF[op.name](**op.attributes(), channels_last=True)
        return None if op.channels_last else _replace(op, channels_last=True)
    if op.name == "pooling" and op.mode in ("max", "average"):
        return PoolingChannelsLast(**op.attributes())
    return None


def _replace(op: Op, **changes) -> Op:
    return type(op)(**{**op.attributes(), **changes})


def _transpose(module: Module, before: Instruction, x: Instruction, perm: tuple[int, ...]) -> Instruction:
    return module.insert(before, Transpose(perm=perm), x)


def _picky(ins: Instruction) -> bool:
    """Whether `ins` needs its input's layout kept: a fused op with a body (fused_reduce, control
    flow) takes its inputs' layout as part of its type, and so does anything it reads through views
    (a transposed view of a convolution, reduced over H and W: TF-exported classifiers)."""
    return bool(ins.module_args) or (is_view(ins) and any(_picky(u) for u in ins.users))


def _redirect(module: Module, old: Instruction, new: Instruction) -> None:
    """Users of `old` read `new` (the same values, strided). Picky users (see _picky) read a
    standard copy, so the views between it and a fused op's body see the layout they saw before."""
    picky = [u for u in old.users if _picky(u)]
    if picky:
        copy = module.insert_after(new, Contiguous(), new)  # before every reader of `old`
        copy.origin = old.origin  # old's value, for profiles
        for u in picky:
            module.replace_inputs(u, [copy if i is old else i for i in u.inputs])
    module.replace(old, new)


def _convert(module: Module, ins: Instruction, op: Op) -> None:
    nd = ins.shape.ndim
    last = to_channels_last(nd)
    # activations (x, residuals) turn channels-last; weights and bias keep their layout
    acts = {0} | ({k for k in range(2 + op.has_bias, len(ins.inputs))} if hasattr(op, "n_residual") else set())
    inputs = [_transpose(module, ins, x, last) if k in acts else x for k, x in enumerate(ins.inputs)]
    new = module.insert(ins, op, *inputs)
    _redirect(module, ins, module.insert(ins, Transpose(perm=to_channels_first(nd)), new))


# -- sinking transposes through layout-agnostic ops --------------------------------------------------
def _permuted_attrs(op: Op, perm: tuple[int, ...]) -> Op | None:
    """`op` rewritten for inputs whose axis i is axis perm[i] of the original; None if not known."""
    if op.kind is OpKind.POINTWISE:
        return op
    if op.name == "concat":
        return _replace(op, axis=perm[op.axis])
    if op.name == "slice":
        return _replace(op, axes=tuple(perm[a] for a in op.axes))
    if op.name == "resize":
        def permute(values):
            out = [None] * len(perm)
            for i, v in enumerate(values):
                out[perm[i]] = v
            return tuple(out)

        n = len(perm)
        roi = permute(op.roi[:n]) + permute(op.roi[n:]) if op.roi else ()
        return _replace(op, scales=permute(op.scales), out_lens=permute(op.out_lens) if op.out_lens else (), roi=roi)
    return None


def _sink(module: Module, ins: Instruction) -> bool:
    """op(..., transpose(a, p), ...) -> transpose(op'(..., a, ...), p) when op does not care about
    the axes' order. Inputs that are not such transposes are read through the inverse transpose."""
    if not ins.users or not isinstance(ins.shape, Shape) or ins.shape.is_dynamic or ins.module_args:
        return False
    perm = to_channels_first(ins.shape.ndim)
    if not any(i.op.name == "transpose" and i.op.perm == perm for i in ins.inputs):
        return False
    new_op = _permuted_attrs(ins.op, perm)
    if new_op is None:
        return False
    inv = to_channels_last(len(perm))
    inputs = [i.inputs[0] if i.op.name == "transpose" and i.op.perm == perm else _transpose(module, ins, i, inv)
              for i in ins.inputs]
    new = module.insert(ins, new_op, *inputs)
    _redirect(module, ins, module.insert(ins, Transpose(perm=perm), new))
    return True


def choose_layout(module: Module) -> bool:
    changed = False
    for ins in module:
        op = _channels_last_op(ins)
        if op is not None:
            _convert(module, ins, op)
            changed = True
    if not changed:
        return False
    for ins in module:  # in order: a transpose sinks through a whole chain in one sweep
        _sink(module, ins)
    simplify_reshapes(module)  # transpose(transpose(x)) -> x at the joins
    copies: dict[tuple, Instruction] = {}
    for ins in module:
        # oneDNN has no fast kernel reading a strided N, C, H, W view as N, H, W, C (the network's
        # input, a tensor from outside a channels-last region): it is copied once into the layout
        x = ins.inputs[0] if ins.inputs else None
        if getattr(ins.op, "channels_last", False) or ins.op.name == "pooling_channels_last":
            if not x.shape.standard:
                key = (x.inputs[0].uid, x.op.perm) if x.op.name == "transpose" else (x.uid,)
                if key not in copies:  # one copy for every reader of the same view
                    copies[key] = module.insert(ins, Contiguous(), x)
                    copies[key].origin = ins.origin  # the copy works for its reader's node
                module.replace_inputs(ins, [copies[key], *ins.inputs[1:]])
    return True
