"""Epilogues fused into a conv or matmul: oneDNN post-ops, applied in order to the accumulator.

`Eltwise` names follow ONNX where oneDNN differs (sigmoid, silu, relu6, hardswish with ONNX's
constants); `Binary` combines the result with a second tensor given at every call (a residual, a
per-channel scale), broadcast from size-1 dims; `Sum` adds the previous contents of the output buffer
(an in-place residual: the caller passes the residual as `out`).
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from ctypes import c_void_p

from ....errors import CompileError
from . import _lib
from .memory import MemDesc

# name -> (oneDNN algorithm, default alpha, default beta); alpha/beta mean what oneDNN's docs say
ELTWISE_KINDS: dict[str, tuple[str, float, float]] = {
    "relu": ("relu", 0.0, 0.0),
    "leaky_relu": ("relu", 0.01, 0.0),      # alpha: negative slope
    "relu6": ("clip", 0.0, 6.0),
    "clip": ("clip", 0.0, 6.0),             # alpha: low, beta: high
    "sigmoid": ("logistic", 0.0, 0.0),
    "silu": ("swish", 1.0, 0.0),            # x * sigmoid(alpha * x)
    "swish": ("swish", 1.0, 0.0),
    "hardswish": ("hardswish", 1 / 6, 0.5),  # x * clip(alpha * x + beta, 0, 1), ONNX's constants
    "hardsigmoid": ("hardsigmoid", 0.2, 0.5),
    "gelu_erf": ("gelu_erf", 0.0, 0.0),
    "gelu_tanh": ("gelu_tanh", 0.0, 0.0),
    "tanh": ("tanh", 0.0, 0.0),
    "elu": ("elu", 1.0, 0.0),
    "linear": ("linear", 1.0, 0.0),         # alpha * x + beta
    "softplus": ("soft_relu", 1.0, 0.0),
    "mish": ("mish", 0.0, 0.0),
    "exp": ("exp", 0.0, 0.0),
    "log": ("log", 0.0, 0.0),
    "abs": ("abs", 0.0, 0.0),
    "sqrt": ("sqrt", 0.0, 0.0),
    "square": ("square", 0.0, 0.0),
    "pow": ("pow", 1.0, 1.0),               # alpha * x ** beta
}


@dataclasses.dataclass(frozen=True)
class Eltwise:
    kind: str
    alpha: float | None = None  # None: the kind's default (ELTWISE_KINDS)
    beta: float | None = None

    def resolved(self) -> tuple[str, float, float]:
        if self.kind not in ELTWISE_KINDS:
            raise CompileError(f"oneDNN post-op: unknown eltwise {self.kind!r}; known: {sorted(ELTWISE_KINDS)}")
        alg, a, b = ELTWISE_KINDS[self.kind]
        return alg, a if self.alpha is None else self.alpha, b if self.beta is None else self.beta


@dataclasses.dataclass(frozen=True)
class Binary:
    """dst = dst <kind> src1, src1 given at every call. `src1` is a shape or an exact descriptor, with the
    destination's rank, each dim 1 or the destination's. A shape's layout is C-contiguous ("plain") or,
    with layout="dst", whatever layout the destination gets (a residual in a blocked or NHWC chain):
    oneDNN's optimized kernels take a full-size operand only in the destination's own layout."""

    kind: str
    src1: tuple[int, ...] | MemDesc
    layout: str = "plain"

    def desc(self) -> MemDesc:
        if isinstance(self.src1, MemDesc):
            return self.src1
        if self.layout not in ("plain", "dst"):
            raise CompileError(f"oneDNN post-op binary_{self.kind}: layout must be 'plain' or 'dst', not {self.layout!r}")
        return MemDesc.plain(self.src1) if self.layout == "plain" else MemDesc.any(self.src1)


@dataclasses.dataclass(frozen=True)
class Sum:
    """dst = result + scale * (what dst held before the call)."""

    scale: float = 1.0


PostOp = Eltwise | Binary | Sum


def binary_descs(post_ops: Sequence[PostOp], dst_shape: Sequence[int]) -> list[tuple[int, MemDesc]]:
    """(position in the chain, second-input descriptor) of each Binary post-op, checked against the
    destination. The position names the execution argument: DNNL_ARG_ATTR_MULTIPLE_POST_OP(position)."""
    out = []
    for i, p in enumerate(post_ops):
        if isinstance(p, Binary):
            d = p.desc()
            if len(d.shape) != len(dst_shape) or any(s not in (1, t) for s, t in zip(d.shape, dst_shape)):
                raise CompileError(f"oneDNN post-op binary_{p.kind}: {list(d.shape)} does not broadcast "
                                   f"to the output {list(dst_shape)}")
            out.append((i, d))
    return out


def binary_slots(src1: Sequence[tuple[int, MemDesc]]) -> list[tuple[int, MemDesc, str]]:
    """The per-call execution arguments of the Binary post-ops, in call order."""
    return [(_lib.arg_post_op_src1(i), d, f"binary operand {j}") for j, (i, d) in enumerate(src1)]


class Attr:
    """A primitive attribute: user scratchpad, fp math mode, int8 scales and zero points (`quant`, a
    quant.Quant; its values become `constants`) and post-ops. Owned; freed on close."""

    def __init__(self, post_ops: Sequence[PostOp], src1: Sequence[tuple[int, MemDesc]], fpmath: str = "strict",
                 quant=None, weights_channel_mask: int = 0):
        lib = self._lib = _lib.load()
        self.handle = c_void_p()
        _lib.check(lib.dnnl_primitive_attr_create(ctypes.byref(self.handle)), "creating an attribute")
        # The user scratchpad makes concurrent calls from several threads safe (each thread its own).
        _lib.check(lib.dnnl_primitive_attr_set_scratchpad_mode(self.handle, _lib.SCRATCHPAD_USER), "scratchpad mode")
        if fpmath not in _lib.FPMATH:
            raise CompileError(f"oneDNN: unknown fpmath mode {fpmath!r}; choose one of {list(_lib.FPMATH)}")
        _lib.check(lib.dnnl_primitive_attr_set_fpmath_mode(self.handle, _lib.FPMATH[fpmath]), "fpmath mode")
        self.constants = quant.configure(self.handle, weights_channel_mask) if quant is not None else []
        self.runtime = quant.runtime_slots() if quant is not None else []  # per-call scales / zero points
        if not post_ops:
            return
        ops = c_void_p()
        _lib.check(lib.dnnl_post_ops_create(ctypes.byref(ops)), "creating post-ops")
        try:
            descs = dict(src1)
            for i, p in enumerate(post_ops):
                if isinstance(p, Eltwise):
                    alg, a, b = p.resolved()
                    st = lib.dnnl_post_ops_append_eltwise(ops, _lib.ELTWISE[alg], a, b)
                elif isinstance(p, Sum):
                    st = lib.dnnl_post_ops_append_sum(ops, p.scale, 0, 0)  # 0: dst's own data type
                elif isinstance(p, Binary) and p.kind in _lib.BINARY:
                    st = lib.dnnl_post_ops_append_binary(ops, _lib.BINARY[p.kind], descs[i].handle)
                else:
                    raise CompileError(f"oneDNN: unsupported post-op {p!r}")
                _lib.check(st, f"appending post-op {p}")
            _lib.check(lib.dnnl_primitive_attr_set_post_ops(self.handle, ops), "setting post-ops")
        finally:
            lib.dnnl_post_ops_destroy(ops)

    def close(self) -> None:
        if self.handle is not None:
            self._lib.dnnl_primitive_attr_destroy(self.handle)
            self.handle = None

    def __enter__(self) -> Attr:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
