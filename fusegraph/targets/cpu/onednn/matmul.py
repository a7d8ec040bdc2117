"""Batched matrix multiplication: ONNX MatMul and Gemm, with bias and post-ops fused.

c[..., M, N] = a[..., M, K] @ b[..., K, N] (+ bias), batch dims broadcast numpy-style. `b` is either a
constant (a numpy array: packed once into oneDNN's preferred layout, BERT's weight matrices) or a
per-call input (attention's Q @ K^T), described by a shape (C-contiguous) or a plain `MemDesc` with any
strides (a transposed view costs nothing). Gemm's transposes are views; its alpha and beta are folded
into the constants by the caller (alpha into b, beta into bias). Bias is one value per output column;
other additive terms (attention masks, a Gemm C of shape (M, N)) are Binary post-ops.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....errors import CompileError
from . import _lib
from .base import Primitive, pack
from .memory import MemDesc, aligned_empty
from .postops import Attr, Binary, PostOp, Sum, binary_descs, binary_slots
from .quant import Quant


def _plain(spec: Sequence[int] | MemDesc, what: str, dtype: str = "f32") -> MemDesc:
    desc = spec if isinstance(spec, MemDesc) else MemDesc.plain(tuple(spec), dtype)
    if not desc.is_plain or desc.dtype != dtype:
        raise CompileError(f"oneDNN matmul: {what} must be a plain {dtype} tensor, got {desc}")
    return desc


def _with_rank(desc: MemDesc, rank: int) -> MemDesc:
    """The same tensor seen with leading 1-dims up to `rank` (oneDNN wants equal ranks)."""
    if len(desc.shape) == rank:
        return desc
    k = rank - len(desc.shape)
    outer = desc.strides[0] * desc.shape[0] if desc.shape else 1
    return MemDesc.plain((1,) * k + tuple(desc.shape), desc.dtype, (outer,) * k + tuple(desc.strides))


class MatMul(Primitive):
    """`MatMul(a, b, bias)(a_array[, weight_scales, src_zero_point][, b_array], *binary_operands, out=...)`:
    the run-time scales and zero point of a `runtime` quant (quant.Quant.runtime_slots) follow `a`."""

    def __init__(self, a: Sequence[int] | MemDesc, b: np.ndarray | Sequence[int] | MemDesc,
                 bias: np.ndarray | None = None, *, post_ops: Sequence[PostOp] = (),
                 dst: MemDesc | None = None, fpmath: str = "strict", threads: int | None = None,
                 allow_ref: bool = False, quant: Quant | None = None):
        super().__init__(threads, allow_ref)
        a_md = _plain(a, "a", quant.src if quant else "f32")
        const_b = isinstance(b, np.ndarray)
        b_md = MemDesc.of_array(b) if const_b else _plain(b, "b")
        want = np.int8 if quant else np.float32  # int8 arithmetic: constant s8 weights only
        if (quant and not const_b) or (const_b and b.dtype != want):
            raise CompileError(f"oneDNN matmul: b must be a {np.dtype(want)} constant, got {getattr(b, 'dtype', b)}")
        (*ab, m, k), (*bb, k2, n) = a_md.shape, b_md.shape
        if k != k2 or min(len(a_md.shape), len(b_md.shape)) < 2:
            raise CompileError(f"oneDNN matmul: shapes {list(a_md.shape)} @ {list(b_md.shape)} do not match")
        try:
            batch = np.broadcast_shapes(tuple(ab), tuple(bb))
        except ValueError:
            raise CompileError(f"oneDNN matmul: batch dims {ab} and {bb} do not broadcast") from None
        out_shape = (*batch, m, n)
        rank = len(out_shape)
        dst_md = _plain(dst if dst is not None else out_shape, "dst", quant.dst if quant else "f32")
        if tuple(dst_md.shape) != out_shape:
            raise CompileError(f"oneDNN matmul: dst {dst_md} is not {list(out_shape)}")
        dense = MemDesc.plain(out_shape, dst_md.dtype)
        if dst_md != dense and any(isinstance(p, Binary) for p in post_ops):
            # oneDNN 3.2's brgemm matmul reads binary operands as if dst were dense: it crashes
            raise CompileError("oneDNN matmul: binary post-ops need a C-contiguous dst, not "
                               f"{dst_md} (a crash in oneDNN 3.2)")
        a_r, b_r = _with_rank(a_md, rank), _with_rank(b_md, rank)
        bias_md, bias_arr = self._bias(bias, out_shape)
        binaries, binary_ndims = [], []
        for p in post_ops:
            if isinstance(p, Binary):
                d = _with_rank(p.desc(), rank)
                binary_ndims.append(len(p.desc().shape))
                p = Binary(p.kind, d)
            binaries.append(p)
        src1 = binary_descs(binaries, out_shape)
        lib = self._lib
        w_md = MemDesc.any(b_r.shape, "s8" if quant else "f32") if const_b else b_r
        # scales per output column: the last weights dim
        with Attr(binaries, src1, fpmath, quant, 1 << (rank - 1)) as attr:
            consts, runtime = list(attr.constants), list(attr.runtime)
            pd = self._create(f"matmul {list(a_md.shape)} @ {list(b_md.shape)}",
                              lib.dnnl_matmul_primitive_desc_create, lib.engine, a_r.handle, w_md.handle,
                              bias_md.handle if bias_md else None, dst_md.handle, attr.handle)
        slots = [(_lib.ARG_SRC, a_r, "a", len(a_md.shape)), *runtime]
        if const_b:
            packed = self.query_md(_lib.Q_WEIGHTS_MD)
            self.weights = pack(b.reshape(b_r.shape), packed, threads)
            consts.append((_lib.ARG_WEIGHTS, packed, self.weights))
        else:
            slots.append((_lib.ARG_WEIGHTS, b_r, "b", len(b_md.shape)))
        if bias_md is not None:
            consts.append((_lib.ARG_BIAS, bias_md, bias_arr))
        slots += [(*slot, nd) for slot, nd in zip(binary_slots(src1), binary_ndims)]
        slots.append((_lib.ARG_DST, dst_md, "dst"))
        self.n_inputs = (1 if const_b else 2) + len(runtime)
        self.out_shape = out_shape
        self._needs_out = any(isinstance(p, Sum) for p in post_ops)
        self._finish(pd, slots, consts)

    @staticmethod
    def _bias(bias: np.ndarray | None, out_shape: tuple[int, ...]):
        if bias is None:
            return None, None
        b = np.asarray(bias)
        if b.dtype != np.float32:
            raise CompileError(f"oneDNN matmul: bias must be float32, got {b.dtype}")
        shape = (1,) * (len(out_shape) - b.ndim) + b.shape
        # oneDNN's optimized kernels take one bias value per output column; anything else is a Binary add
        if len(shape) != len(out_shape) or any(s != 1 for s in shape[:-1]) or shape[-1] not in (1, out_shape[-1]):
            raise CompileError(f"oneDNN matmul: bias {list(b.shape)} is not per output column of {list(out_shape)}; "
                               "add it with a Binary('add', ...) post-op")
        packed = aligned_empty(b.nbytes, np.float32, shape)
        packed[...] = b.reshape(shape)
        return MemDesc.plain(shape), packed

    def _fresh_out(self) -> np.ndarray:
        if self._needs_out:
            raise CompileError("oneDNN matmul: a Sum post-op accumulates into `out`; pass it")
        return self.dst_desc.empty()
