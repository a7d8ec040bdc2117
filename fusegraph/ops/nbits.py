"""Weight-only low-bit products kept packed: `matmul_nbits` (ONNX Runtime's com.microsoft.MatMulNBits)
and `matmul_bnb4` (com.microsoft.MatMulBnb4, bitsandbytes' FP4/NF4).

    matmul_nbits(a [..., K], b uint8 [N, blocks, block * bits / 8], scales [N * blocks]
                 [, zero_points uint8 [N * ceil(blocks * bits / 8)] | float [N * blocks]]) -> [..., N]
    y = a @ W^T,  W[n, k] = (q[n, k] - zp[n, k // block]) * scale[n, k // block]

q are the `bits`-bit codes of b, packed low bits first; blocks = ceil(K / block) and the codes past K
in the last block are padding that is never read. A packed zero point holds the zero points of one
row of blocks in ceil(blocks * bits / 8) bytes, low bits first; a float one is one value per block;
absent, it is 2^(bits - 1). Scales and float zero points have a's dtype (ORT's T1).

The weights stay packed from the frontend to the kernels (a saved .fgx holds bits/32 of the float32
weight's bytes): the reference dequantizes W in float32 (a half-precision input computes in
float32 and rounds its result, as `dot`), which is ORT's CPU kernel at accuracy_level 0;
the kernels fuse the dequantization into their product and agree with it to float rounding.
ORT's bias input is a separate `add` after this op.

    matmul_bnb4(a [..., K], b uint8 [ceil(N * K / 2)], absmax [N * K / block]) -> [..., N]
    y = a @ W^T,  W[n, k] = TABLE[q(n * K + k)] * absmax[(n * K + k) // block]

the 4-bit codes q of the row-major [N, K] weight packed high nibble first (bitsandbytes' order),
TABLE the FP4 (quant_type 0) or NF4 (1) code book. Blocks run over the flat weight; this op takes
K a multiple of the block (every block inside one row of W, as the kernels read them: the frontend
dequantizes other shapes at compile).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape

_FLOATS = (DType.float32, DType.float16, DType.bfloat16)

# bitsandbytes' code books (ORT's fp4_qaunt_map / nf4_qaunt_map), indexed by the 4-bit code.
BNB4_TABLES = {
    0: np.array([0.0, 0.005208333333, 0.666666667, 1.0, 0.333333333, 0.5, 0.1666666667, 0.25,
                 -0.0, -0.005208333333, -0.666666667, -1.0, -0.333333333, -0.5, -0.1666666667, -0.25], np.float32),
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], np.float32),
}


def unpack_codes(packed: np.ndarray, bits: int, high_first: bool = False) -> np.ndarray:
    """uint8 [..., n] -> its codes [..., n * 8 / bits] as uint8, low bits first (or high first)."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    shifts = shifts[::-1].copy() if high_first else shifts
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * per)


def dequantize(op: MatmulNBits, b: np.ndarray, scales: np.ndarray, zps: np.ndarray | None) -> np.ndarray:
    """W [N, K] in float32: (q - zp) * scale, per block of `op.block_size` columns."""
    n, k, blocks = op.n, op.k, op.blocks
    q = unpack_codes(b.reshape(n, -1), op.bits)[:, :k].astype(np.float32)
    s = scales.reshape(n, blocks).astype(np.float32)
    if zps is None:
        zp = np.full((n, blocks), 1 << (op.bits - 1), np.float32)
    elif zps.dtype == np.uint8:
        zp = unpack_codes(zps.reshape(n, -1), op.bits)[:, :blocks].astype(np.float32)
    else:
        zp = zps.reshape(n, blocks).astype(np.float32)
    group = np.arange(k) // op.block_size
    return (q - zp[:, group]) * s[:, group]


@register_op
class MatmulNBits(Op):
    """a @ W^T for W [n, k] held as `bits`-bit codes in blocks of `block_size` along k, with a
    scale (and zero point) per block."""

    name = "matmul_nbits"
    kind = OpKind.GEMM
    k: int = 0
    n: int = 0
    bits: int = 4
    block_size: int = 32

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block_size)

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) not in (3, 4):
            raise ShapeError(f"{self}: takes a, b, scales and an optional zero point, got {len(inputs)} inputs")
        if self.bits not in (2, 4, 8) or self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ShapeError(f"{self}: bits must be 2, 4 or 8 and block_size a power of 2 >= 16")
        a, b, scales, *zp = inputs
        if a.dtype not in _FLOATS or a.ndim < 1 or a.lens[-1] != self.k:
            raise ShapeError(f"{self}: a must be float [..., {self.k}], got {a}")
        row = self.block_size * self.bits // 8
        if b.dtype != DType.uint8 or b.elements != self.n * self.blocks * row:
            raise ShapeError(f"{self}: b must be uint8 holding {self.n} x {self.blocks} blocks of {row} bytes, got {b}")
        if scales.dtype != a.dtype or scales.elements != self.n * self.blocks:
            raise ShapeError(f"{self}: scales must be {a.dtype} [{self.n * self.blocks}], got {scales}")
        if zp:
            packed = self.n * -(-self.blocks * self.bits // 8)
            want = packed if zp[0].dtype == DType.uint8 else self.n * self.blocks
            if zp[0].dtype not in (DType.uint8, a.dtype) or zp[0].elements != want:
                raise ShapeError(f"{self}: zero points must be uint8 [{packed}] or {a.dtype} "
                                 f"[{self.n * self.blocks}], got {zp[0]}")
        return Shape.of(a.dtype, [*a.lens[:-1], self.n])

    def compute(self, args):
        a, b, scales, *zp = (np.asarray(x) for x in args)
        w = dequantize(self, b, scales, zp[0] if zp else None)
        y = np.matmul(a.astype(np.float32), w.T)
        return y.astype(a.dtype)


@register_op
class MatmulBnb4(Op):
    """a @ W^T for W [n, k] held as 4-bit codes into bitsandbytes' FP4 / NF4 table, with an absmax
    per block of `block_size` weights (k a multiple of it)."""

    name = "matmul_bnb4"
    kind = OpKind.GEMM
    k: int = 0
    n: int = 0
    block_size: int = 64
    quant_type: int = 1

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) != 3:
            raise ShapeError(f"{self}: takes a, b and absmax, got {len(inputs)} inputs")
        if self.quant_type not in BNB4_TABLES or self.block_size < 16 or self.k % self.block_size:
            raise ShapeError(f"{self}: quant_type must be 0 (FP4) or 1 (NF4) and k a multiple of block_size")
        a, b, absmax = inputs
        if a.dtype not in _FLOATS or a.ndim < 1 or a.lens[-1] != self.k:
            raise ShapeError(f"{self}: a must be float [..., {self.k}], got {a}")
        if b.dtype != DType.uint8 or b.elements != self.n * self.k // 2:
            raise ShapeError(f"{self}: b must be uint8 [{self.n * self.k // 2}], got {b}")
        if absmax.dtype != a.dtype or absmax.elements != self.n * self.k // self.block_size:
            raise ShapeError(f"{self}: absmax must be {a.dtype} [{self.n * self.k // self.block_size}], got {absmax}")
        return Shape.of(a.dtype, [*a.lens[:-1], self.n])

    def compute(self, args):
        a, b, absmax = (np.asarray(x) for x in args)
        codes = unpack_codes(b.reshape(-1), 4, high_first=True)
        per_block = np.repeat(absmax.reshape(-1).astype(np.float32), self.block_size)
        w = (BNB4_TABLES[self.quant_type][codes] * per_block).reshape(self.n, self.k)
        return np.matmul(a.astype(np.float32), w.T).astype(a.dtype)
