"""Subgraphs the gpu target runs as one library call, found on the optimized IR:

* attention: dot(Q, K^T) -> [scale, additive mask, Where with a constant fill] -> softmax(last axis)
  -> dot(., V) becomes one torch.nn.functional.scaled_dot_product_attention call (patterns_attention.py,
  lower_attention.py);
* gemm_bias: dot(A, W) [-> reshape that splits rows] -> add(., broadcast(bias over the last axis))
  becomes one torch.addmm (cuBLASLt's bias epilogue);
* conv_gemm: a 1x1 convolution (stride 1, unpadded, ungrouped, 2-D) is a matmul over the rows of its
  channels-last input, [N*H*W, C] x [C, M]; with its only reader's per-channel bias add (and a ReLU
  after it) it becomes one cuBLASLt call with the bias (ReLU) epilogue, as torch.compile does;
* gemm_epilogue / conv_gemm_epilogue: a matmul (dot, 2-D or batched over a 2-D weight, [+ row-split
  reshape]; or a 1x1 convolution as above) whose only reader is a pointwise instruction of the same
  lens that neither of the above takes (SiLU, GELU, residual adds...) absorbs that reader: one
  autotuned step, a Triton GEMM template with the reader's body as its epilogue or the library
  matmul followed by the pointwise kernel (gemm_runner.py, autotune.py);
* sparse_dot / sparse_gemm_bias / sparse_gemm_epilogue: the same, for a dot whose weight is a 2:4
  constant (sparse_patterns.py; cuSPARSELt or the dense kernel, timed: lower_sparse.py).
* resize: a Resize reads its input through the movement chain before it (a matmul's [B, H*W, C] rows
  transposed and reshaped to [B, C, H, W], SegFormer's decoder) as one strided view (view_chain.py):
  its kernel takes any strides, where the chain's `contiguous` copied the rows first; and its only
  reader's conversion to another float type (a segmenter's upsampled logits, an fp16 program's float32
  output) is its kernel's store: rounded to its own type first, then converted, the same bits;
* keep_strides: a `contiguous` whose value reaches only convolutions' and poolings' data inputs,
  through movement ops, is no copy: they take any strides (cuDNN reads a channels-last view as it
  reads a channels-last buffer), and the reshapes after it are views where the strides allow
  (SegFormer's Mix-FFN: [B, H*W, C] matmul rows transposed to [B, C, H, W] for a depthwise
  convolution were copied to NCHW, then converted back to channels-last for cuDNN);
* quant_gemm_epilogue / quant_conv_epilogue: the same for the int8 products rewrite_quantized.py
  makes (patterns_quant.py, lower_quant.py): int8 x int8 -> int32, then the dequantizing epilogue.

Each match is a `Group` keyed by the uid of the instruction whose value it produces; its members are
the instructions it replaces, its inputs the values it reads.
"""

from __future__ import annotations

from ...ir.module import Instruction, Module
from ...ir.shape import Shape
from ...ops.conv import window_attrs
from ...ops.scalar import Call, Const, Var, variables
from .matching import FLOATS, Group, constant_scalar, is_output, only_user, strip_convert
from .patterns_attention import match_attention
from .patterns_quant import quant_epilogue_source
from .view_chain import CHAIN_OPS, fold_chains

__all__ = ["FLOATS", "Group", "constant_scalar", "match_attention", "match_groups", "only_user"]

DOT_EPILOGUES = ("gemm_epilogue", "quant_gemm_epilogue")  # the rest take a convolution's N, C, H, W


def match_groups(module: Module) -> dict[int, Group]:
    groups: dict[int, Group] = {}
    for ins in module.instructions:
        g = PRE_MATCHERS[ins.op.name](ins) if ins.op.name in PRE_MATCHERS else None
        if g is not None:
            groups[g.root.uid] = g
    taken = {m.uid for g in groups.values() for m in g.members}
    for ins in module.instructions:
        if ins.uid in taken or ins.uid in groups:
            continue
        g = match_gemm_bias(ins) or match_conv_gemm(ins)
        if g is not None and not any(m.uid in taken for m in g.members):
            groups[g.root.uid] = g
            taken |= {m.uid for m in g.members}
    for ins in module.instructions:  # matmuls the library epilogues left alone take their reader
        plain = groups.get(ins.uid)
        if ins.uid in taken and not (plain is not None and plain.kind == "conv_gemm" and plain.root is ins):
            continue
        g = match_gemm_epilogue(ins)
        if g is not None and not any(m.uid in taken for m in g.members if m is not ins):
            groups.pop(ins.uid, None)
            groups[g.root.uid] = g
            taken |= {m.uid for m in g.members}
    from .sparse_patterns import mark_sparse  # 2:4 constant weights: the sparse kinds (lower_sparse.py)

    mark_sparse(module, groups)
    return groups


def match_resize(resize: Instruction) -> Group | None:
    """A resize whose input is reached through movement ops: the chain folded into the step; and a
    resize whose only reader converts it to another float type (an fp16 program's float32 output):
    the conversion folded into its store, so the half result needs no buffer of its own."""
    bases, chains, folded = fold_chains([resize.inputs[0]], {resize.uid})
    convert = resize.users[0] if len(resize.users) == 1 and not is_output(resize) else None
    if convert is None or convert.op.name != "convert" or not (
            resize.shape.dtype.value in FLOATS and convert.shape.dtype.value in FLOATS):
        convert = None
    if not folded and convert is None:
        return None
    root, members = (convert, [convert, resize, *folded]) if convert is not None else (resize, folded)
    return Group("resize", root, members, bases, {"chain": chains[0], "resize": resize})


STRIDED_READERS = ("convolution", "pooling")  # ops whose lowering takes a data input of any strides


def match_keep_strides(contiguous: Instruction) -> Group | None:
    """A contiguous read, through movement ops alone, only as STRIDED_READERS' data input."""
    pending, seen = [contiguous], set()
    while pending:
        x = pending.pop()
        if is_output(x) or not x.users:
            return None
        for u in x.users:
            if u.op.name in CHAIN_OPS and u.uid not in seen:
                seen.add(u.uid)
                pending.append(u)
            elif u.op.name not in STRIDED_READERS or any(v is x for v in u.inputs[1:]):
                return None
    return Group("keep_strides", contiguous, [], [contiguous.inputs[0]], {})


PRE_MATCHERS = {"dot": match_attention, "resize": match_resize, "contiguous": match_keep_strides}


# -- gemm + bias -------------------------------------------------------------------------------------
def match_gemm_bias(add: Instruction) -> Group | None:
    """add(dot(A, W) [viewed], broadcast(bias[N])) with A [M, K] -> one addmm."""
    if add.op.kind.value != "pointwise" or not hasattr(add.op, "expr") or len(add.inputs) != 2:
        return None
    e = add.op.expr
    if not (isinstance(e, Call) and e.fn == "add" and all(isinstance(a, Var) for a in e.args)):
        return None
    if add.shape.dtype.value not in FLOATS:
        return None
    for k in (0, 1):
        y, b = add.inputs[k], add.inputs[1 - k]
        members = [add]
        if y.op.name == "reshape" and only_user(y, add):
            members.append(y)
            y2 = y.inputs[0]
            if not (isinstance(y2.shape, Shape) and y2.shape.ndim == 2 and y.shape.lens[-1] == y2.shape.lens[-1]):
                continue
            if not only_user(y2, y):
                continue
            y = y2
        elif not only_user(y, add):
            continue
        if y.op.name != "dot" or y.shape.ndim != 2:
            continue
        bias = _row_vector(b, y.shape.lens[-1])
        if bias is None:
            continue
        members.append(y)
        a, w = y.inputs
        return Group("gemm_bias", add, members, [a, w, bias], {})
    return None


def _row_vector(b: Instruction, n: int) -> Instruction | None:
    """The [n] (or [1.., n]) value `b` broadcasts along the last axis, else None."""
    if b.op.name != "broadcast":
        return None
    src = b.inputs[0]
    if not isinstance(src.shape, Shape) or src.shape.lens[-1:] != (n,) or any(d != 1 for d in src.shape.lens[:-1]):
        return None
    return src


# -- 1x1 convolution as a matmul ----------------------------------------------------------------------
def match_conv_gemm(conv: Instruction) -> Group | None:
    """A pointwise 2-D convolution in a float type, with the bias epilogue of its only reader."""
    if conv.op.name != "convolution" or not isinstance(conv.shape, Shape) or conv.shape.dtype.value not in FLOATS:
        return None
    x, w = conv.inputs
    if x.shape.ndim != 4 or w.shape.lens[2:] != (1, 1) or conv.op.group != 1:
        return None
    pb, pe, strides, dils = window_attrs(conv.op, 2)
    if any(pb) or any(pe) or strides != (1, 1) or dils != (1, 1):
        return None
    user = conv.users[0] if len(conv.users) == 1 and not is_output(conv) else None
    epilogue = _bias_epilogue(user, conv) if user is not None else None
    if epilogue is None:
        return Group("conv_gemm", conv, [conv], [x, w], {"relu": False})
    bias, relu = epilogue
    return Group("conv_gemm", user, [user, conv], [x, w, bias], {"relu": relu})


def _bias_epilogue(add: Instruction, conv: Instruction) -> tuple[Instruction, bool] | None:
    """(bias [M] value, relu?) when `add` is conv + broadcast(bias over the channels) [then max(., 0)]."""
    if add.op.kind.value != "pointwise" or not hasattr(add.op, "expr") or len(add.inputs) != 2:
        return None
    if add.shape != conv.shape:
        return None
    e = strip_convert(add.op.expr)
    relu = isinstance(e, Call) and e.fn == "max" and len(e.args) == 2 and e.args[1] == Const(0)
    if relu:
        e = strip_convert(e.args[0])
    if not (isinstance(e, Call) and e.fn == "add" and all(isinstance(a, Var) for a in e.args)):
        return None
    k = add.inputs.index(conv)
    if {a.index for a in e.args} != {0, 1}:
        return None
    bias = _channel_vector(add.inputs[1 - k], conv.shape.lens[1])
    return None if bias is None else (bias, relu)


def _channel_vector(b: Instruction, m: int) -> Instruction | None:
    """The value of m elements that `b` broadcasts along axis 1 of an N-C-H-W tensor, else None."""
    if b.op.name != "broadcast":
        return None
    src = b.inputs[0]
    if not isinstance(src.shape, Shape) or src.shape.elements != m:
        return None
    lens = src.shape.lens
    if lens in ((m,), (m, 1, 1), (1, m, 1, 1)):
        return src
    return None


# -- a matmul with its reader as the epilogue ----------------------------------------------------------
def match_gemm_epilogue(mm: Instruction) -> Group | None:
    """A float matmul whose only reader (through a row-split reshape, for a 2-D dot) is a pointwise
    instruction of the same lens, with an expression body Triton can render."""
    from .triton_expr import expr_types, triton_types_ok

    kind = _epilogue_source(mm) or quant_epilogue_source(mm)
    if kind is None or len(mm.users) != 1 or is_output(mm):
        return None
    y, members, split = mm, [mm], False
    user = mm.users[0]
    if kind in DOT_EPILOGUES and user.op.name == "reshape" and mm.shape.ndim == 2 and only_user(mm, user):
        if user.shape.ndim < 2 or user.shape.lens[-1] != mm.shape.lens[-1] or len(user.users) != 1 \
                or is_output(user):
            return None
        y, split = user, True
        members.append(user)
        user = user.users[0]
    if user.op.kind.value != "pointwise" or not hasattr(user.op, "expr") or user.shape.lens != y.shape.lens:
        return None
    expr = user.op.expr
    acc = tuple(k for k, x in enumerate(user.inputs) if x is y)
    var_types = [x.shape.dtype for x in user.inputs]
    if not set(acc) & variables(expr) or not triton_types_ok([*var_types, user.shape.dtype,
                                                                *expr_types(expr, var_types)]):
        return None
    others = [x for x in user.inputs if x is not y]
    roles = tuple("acc" if x is y else "col" if _last_axis_vector(x, kind) else "full" for x in user.inputs)
    data = {"body": expr, "acc": acc, "roles": roles, "split": split}
    return Group(kind, user, [user, *reversed(members)], [*mm.inputs, *others], data)


def _epilogue_source(mm: Instruction) -> str | None:
    """The step kind of a matmul the epilogue template takes, else None."""
    if not isinstance(mm.shape, Shape) or mm.shape.dtype.value not in FLOATS:
        return None
    if mm.op.name == "dot":
        a, w = mm.inputs
        if a.shape.dtype != w.shape.dtype or w.shape.ndim != 2 or a.shape.ndim < 2:
            return None
        return "gemm_epilogue"
    g = match_conv_gemm(mm) if mm.op.name == "convolution" else None
    return "conv_gemm_epilogue" if g is not None and g.root is mm else None


def _last_axis_vector(x: Instruction, kind: str) -> bool:
    """Whether `x` broadcasts one vector along the output's columns (channels, for a convolution)."""
    if x.op.name != "broadcast":
        return False
    if kind not in DOT_EPILOGUES:
        return _channel_vector(x, x.shape.lens[1]) is not None
    return _row_vector(x, x.shape.lens[-1]) is not None
