"""Which instructions a quantizer rewrites, and which of their inputs are weights.

An op is named by its IR name (`convolution`, `dot`) or by the ONNX op type it came from (`Conv`,
`MatMul`, `Gemm`), case-insensitively; `conv`, `matmul` and `gemm` are accepted too. A `Gemm` and a
`MatMul` are both `dot` in the IR: their ONNX origin tells them apart.

Sensitive heads stay float by default (`keep_heads`): an op whose every path to the program's
outputs passes no other quantized op is the last layer of its branch (a classifier's fc, a
detector's box and class convolutions, a recognizer's projection), whose error nothing downstream
averages out and whose output often spans very different ranges (box pixels next to class logits).
Every path, not some: a transformer layer's output projection reaches the outputs through the
residual adds alone, but also feeds the next layer's products, which average its error like any
hidden layer's (with "some path", every attention-output and FFN-down product of BERT was a head).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ArgumentError
from ..ir.module import Instruction, Module
from ..ir.shape import Shape

QUANTIZABLE = ("convolution", "deconvolution", "dot")
_ALIASES = {"conv": "convolution", "matmul": "dot", "convtranspose": "deconvolution", "conv_transpose": "deconvolution"}
DEFAULT_QUANTIZE_OPS = ("convolution", "dot")


def _norm(name: str) -> str:
    n = name.strip().lower()
    return _ALIASES.get(n, n)


def _names(ins: Instruction) -> set[str]:
    """The names an op answers to: its IR name and its ONNX op types."""
    return {ins.op.name} | {_norm(o.op_type) for o in ins.origin}


def check_op_names(names: Iterable[str], what: str) -> frozenset[str]:
    """`names` normalized; an ArgumentError for one that is neither an IR op nor an ONNX op type."""
    import onnx

    from ..ir.op import registered_ops

    out = frozenset(_norm(n) for n in names if n.strip())
    known = set(registered_ops()) | {s.name.lower() for s in onnx.defs.get_all_schemas()}
    unknown = sorted(out - known)
    if unknown:
        raise ArgumentError(f"{what}: no op named {', '.join(map(repr, unknown))} (IR names such as convolution, "
                            f"dot, sigmoid, or ONNX op types such as Conv, MatMul, Gemm)")
    return out


def select(module: Module, quantize_ops: Iterable[str], skip_ops: Iterable[str] = (), skip_names: Iterable[str] = (),
           keep_heads: bool = True) -> list[Instruction]:
    """The instructions of `module` to quantize, in program order."""
    wanted = check_op_names(quantize_ops, "quantize_ops")
    skipped = check_op_names(skip_ops, "skip_ops")
    names = {n.strip() for n in skip_names if n.strip()}
    picked = []
    for ins in module.instructions:
        if ins.op.name not in QUANTIZABLE or not _float32_inputs(ins):
            continue
        answers = _names(ins)
        if not answers & wanted or answers & skipped:
            continue
        if names & ({o.name for o in ins.origin} | {ins.tensor or ""}):
            continue
        picked.append(ins)
    if keep_heads:
        heads = {i.uid for i in heads_of(module, picked)}
        picked = [i for i in picked if i.uid not in heads]
    return picked


def _float32_inputs(ins: Instruction) -> bool:
    from ..ir.dtypes import DType

    return all(isinstance(x.shape, Shape) and x.shape.dtype == DType.float32 for x in ins.inputs)


def heads_of(module: Module, ops: list[Instruction]) -> list[Instruction]:
    """The `ops` that reach a program output, and reach no other of `ops`, whatever the path."""
    quantized = {i.uid for i in ops}
    outputs = {o.uid for o in module.outputs}
    # bottom-up (instructions are in order): free = no path from here meets a quantized op;
    # live = some path reaches an output (a reader in a submodule, not in these dicts, counts as both
    # meeting a quantized op and reaching an output: its op stays a hidden layer)
    free: dict[int, bool] = {}
    live: dict[int, bool] = {}
    for ins in reversed(module.instructions):
        free[ins.uid] = all(u.uid not in quantized and free.get(u.uid, False) for u in ins.users)
        live[ins.uid] = ins.uid in outputs or any(live.get(u.uid, True) for u in ins.users)
    return [i for i in ops if free.get(i.uid) and live.get(i.uid)]


def weight_axis(ins: Instruction, per_channel: bool) -> int | None:
    """The axis of the weight (input 1) that holds output channels, None for per-tensor."""
    if not per_channel:
        return None
    w = ins.inputs[1].shape
    if ins.op.name == "convolution":
        return 0
    if ins.op.name == "deconvolution":
        return 1 if getattr(ins.op, "group", 1) == 1 else None  # [C_in, C_out / group, ...]
    return w.ndim - 1  # dot: [..., K, N]
