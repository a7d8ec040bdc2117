"""`matmul_nbits` and `matmul_bnb4` (ops/nbits.py) on the gpu: one Triton kernel that reads the packed
4-bit codes and dequantizes each [BLOCK_K, BLOCK_N] tile of W^T in registers, (q - zp) * scale in
float32 (bnb4: table[q] * absmax, FP4/NF4's code book, high nibbles first), right before its tl.dot:
the weight never exists in float in device memory (the device holds its codes, an eighth of the
float32 bytes), and a decode step (a few rows) reads only those.

A float32 input multiplies in exact float32 (input_precision="ieee", never TF32, as the GEMM
template); a half-precision one multiplies its dequantized tile rounded to its own type (as ORT's
CUDA dequantize-then-GEMM path), accumulating in float32. Zero points are made one per block at
build: packed ones unpacked to uint8, absent ones 8, float ones kept float. 4-bit codes only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.provenance import describe
from ...ops.nbits import BNB4_TABLES, unpack_codes
from .lowering import lowering

SOURCE = '''import triton
import triton.language as tl


@triton.jit
def matmul_nbits4(a_ptr, b_ptr, s_ptr, z_ptr, t_ptr, y_ptr, M, N, s_am, s_ym, K: tl.constexpr, NB: tl.constexpr,
                  BS: tl.constexpr, TABLE: tl.constexpr, HIGH_FIRST: tl.constexpr, HALF: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # K and NB are constants of the op (a known trip count, as the GEMM template's K).
    # y [M, N] = a [M, K] @ W^T, W [N, K] as codes b [N, NB * BS / 2] (the even k in the low nibble,
    # or the high one when HIGH_FIRST), one scale s and zero point z per (n, block of BS columns);
    # a code's value is itself, or t[code] when TABLE
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    row_bytes = NB * (BS // 2)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :], mask=(rm < M)[:, None] & (kk < K)[None, :], other=0.0)
        inside = (kk < K)[:, None] & (rn < N)[None, :]  # the tile of W^T: [BLOCK_K, BLOCK_N]
        code = tl.load(b_ptr + rn[None, :] * row_bytes + (kk // 2)[:, None], mask=inside, other=0)
        odd = kk % 2
        if HIGH_FIRST:
            odd = 1 - odd
        q = (code >> (odd * 4).to(tl.uint8)[:, None]) & 15
        if TABLE:
            v = tl.load(t_ptr + q.to(tl.int32))
        else:
            v = q.to(tl.float32)
        at = rn[None, :] * NB + (kk // BS)[:, None]
        s = tl.load(s_ptr + at, mask=inside, other=0.0).to(tl.float32)
        z = tl.load(z_ptr + at, mask=inside, other=0).to(tl.float32)
        w = tl.where(inside, (v - z) * s, 0.0)  # padding codes are never multiplied
        if HALF:
            acc = tl.dot(a, w.to(a.dtype), acc)
        else:
            acc = tl.dot(a, w, acc, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * s_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm < M)[:, None] & (rn < N)[None, :])
'''


def block_zero_points(op, zps: np.ndarray | None) -> np.ndarray:
    """One zero point per (n, block): uint8 for packed or absent ones, float32 for float ones."""
    if zps is None:
        return np.full((op.n, op.blocks), 1 << (op.bits - 1), np.uint8)
    if zps.dtype == np.uint8:
        return np.ascontiguousarray(unpack_codes(zps.reshape(op.n, -1), op.bits)[:, :op.blocks])
    return np.ascontiguousarray(zps, np.float32).reshape(op.n, op.blocks)


def tiles(m: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): 16 rows (tl.dot's least) for decode-sized inputs."""
    return (16, 64, 64) if m <= 16 else (64, 64, 32)


def _runner(ctx, k: int, n: int, nb: int, block: int, zps: Any, table: np.ndarray | None, high_first: bool):
    """The step: y [..., n] = a [..., k] @ W^T with the kernel configured for these codes."""
    from .kernels import load_kernel

    t = ctx.torch
    kernel = load_kernel(SOURCE, "matmul_nbits4")
    tab = ctx.constant(table if table is not None else np.zeros(16, np.float32))

    def run(out: Any, a: Any, b: Any, scales: Any, *_zp: Any) -> None:
        a2 = a.reshape(-1, k)
        if a2.stride(1) != 1:
            a2 = a2.contiguous()
        m = a2.shape[0]
        y = out.view(-1, n) if out.is_contiguous() else t.empty((m, n), dtype=out.dtype, device=out.device)
        bm, bn, bk = tiles(m)
        if m:
            kernel[(-(-m // bm), -(-n // bn))](
                a2, b, scales, zps, tab, y, m, n, a2.stride(0), y.stride(0), K=k, NB=nb, BS=block,
                TABLE=table is not None, HIGH_FIRST=high_first, HALF=a2.dtype != t.float32,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
        if y.data_ptr() != out.data_ptr():
            out.copy_(y.view(out.shape))
    return run


@lowering("matmul_nbits", mode="into", note="Triton: 4-bit codes dequantized in registers into tl.dot")
def matmul_nbits(ctx, step):
    ins = step.ins
    op = ins.op
    where = f"gpu target: {op} (ONNX node {describe(ins.origin) or '?'})"
    if op.bits != 4:
        raise CompileError(f"{where}: {op.bits}-bit weights have no gpu kernel (4 bits only)")
    zp_ins = ins.inputs[3] if len(ins.inputs) > 3 else None
    if zp_ins is not None and not zp_ins.is_literal:
        raise CompileError(f"{where}: its zero points must be constants (computed at run time is not supported)")
    zps = ctx.constant(block_zero_points(op, None if zp_ins is None else zp_ins.literal))
    return _runner(ctx, op.k, op.n, op.blocks, op.block_size, zps, None, False)


@lowering("matmul_bnb4", mode="into", note="Triton: FP4/NF4 codes looked up and scaled in registers into tl.dot")
def matmul_bnb4(ctx, step):
    op = step.ins.op
    nb = op.k // op.block_size
    zeros = ctx.constant(np.zeros((op.n, nb), np.uint8))
    return _runner(ctx, op.k, op.n, nb, op.block_size, zeros, BNB4_TABLES[op.quant_type], True)
