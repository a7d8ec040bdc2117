"""`matmul_nbits` and `matmul_bnb4` (ops/nbits.py) on the cpu target: the 4-bit weights stay packed in
memory and are dequantized inside the product (codegen/nbits.py), which reads an eighth of a float32
weight's bytes: the decode-sized products (a few rows), bound by reading the weight, run that much less.

Both are one kernel: W[n, k] = (table[q] - zp) * scale per block, the table 0..15 for MatMulNBits
(zero points: one uint8 per block, packed ones unpacked and absent ones 8, or one float) and the
FP4 / NF4 code book for MatMulBnb4 (zero points 0, absmax the scale, high nibbles first). Packed at
compile: the codes as given, scales in float32. A float32 product; a half-precision input is
computed in float32 and its result rounded back, as the ops' references do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ....errors import CompileError
from ....ir.provenance import describe
from ....ops.nbits import BNB4_TABLES, unpack_codes
from ..codegen.nbits import library
from ..lowering import lowering

_ALIGN = 64  # bytes: the permuted rows are read as whole vectors
# From this many rows a panel of W dequantized once, then oneDNN's register-blocked float32 GEMM,
# beats dequantizing inside the product loop (whose rows of x, KP floats each, stop fitting in L1/L2).
# Measured, 4096 x 4096, one thread, process CPU time (minimum of 15; the VM was loaded): in the
# loop / by panels, 8 rows 2.3 / 5.0 ms, 16 rows 5.0 / 5.3, 24 rows 8.8 / 9.1, 32 rows 11.5 / 7.3,
# 64 rows 21.4 / 12.4 (oneDNN's float32 GEMM of the dequantized weight: 11.4). A panel is at most
# PANEL_BYTES of float32: 128, 256 and 512 rows of K = 4096 measured alike (10.8-11.4 ms for the GEMMs
# alone) and 4 MiB beat 16 and 64 MiB by 20-30 % with the dequantization (the panel stays in L2/L3).
PANEL_ROWS = 32
PANEL_BYTES = 1 << 22


def _aligned(count: int) -> np.ndarray:
    raw = np.empty(count + _ALIGN // 4, np.float32)
    start = (-raw.ctypes.data % _ALIGN) // 4
    return raw[start:start + count]


LINEAR = np.arange(16, dtype=np.float32)  # MatMulNBits' codes are their own values


_local = threading.local()


def _scratch(name: str, count: int) -> np.ndarray:
    """This thread's buffer `name` of at least `count` floats (64-byte aligned), kept between calls
    and shared by every product the thread runs: fresh buffers were mapped and page-faulted in at
    every call, and with two threads on a loaded machine that made 64 rows of 4096 x 4096 take
    450 ms instead of 16-20 (oneDNN's float32 GEMM: 10-16)."""
    buf = getattr(_local, name, None)
    if buf is None or buf.size < count:
        buf = _aligned(count)
        setattr(_local, name, buf)
    return buf[:count]


class NibbleWeights:
    """W [n, k] as 4-bit codes q, W[n, k] = (table[q] - zp) * scale with a scale and zero point per
    block of `block` columns; the even column's code in bits [even_shift, even_shift + 4) of its
    byte. `__call__(x, out)` computes x @ W^T for x [..., k] in float32."""

    def __init__(self, codes: np.ndarray, scales: np.ndarray, zps: np.ndarray, k: int, block: int,
                 table: np.ndarray, even_shift: int, threads: int):
        self.n, self.k, self.block = codes.shape[0], k, block
        blocks = -(-k // block)
        self.codes = np.ascontiguousarray(codes, np.uint8).reshape(self.n, blocks * block // 2)
        self.scales = np.ascontiguousarray(scales, np.float32).reshape(self.n, blocks)
        self.float_zp = int(zps.dtype != np.uint8)
        self.zps = np.ascontiguousarray(zps).reshape(self.n, blocks)
        self.table = _aligned(16)  # read as whole vectors
        self.table[:] = table
        self.even_shift = even_shift
        self.padded_k = blocks * block
        self.threads = threads
        self._fn, self._dequant, self._permute = library()
        # panel rows: a panel of at most PANEL_BYTES, in whole multiples of 16
        self.panel = min(max(16, PANEL_BYTES // (4 * self.padded_k) // 16 * 16), self.n)
        self._gemms: dict[tuple[int, int], object] = {}  # oneDNN products of panels, by (rows, width)

    @classmethod
    def nbits(cls, op, b: np.ndarray, scales: np.ndarray, zps: np.ndarray | None, threads: int) -> NibbleWeights:
        """matmul_nbits' operands: zero points made one uint8 (packed or absent: 8) or float per block."""
        blocks = op.blocks
        if zps is None:
            zps = np.full((op.n, blocks), 8, np.uint8)
        elif zps.dtype == np.uint8:
            zps = unpack_codes(zps.reshape(op.n, -1), 4)[:, :blocks]
        else:
            zps = np.asarray(zps, np.float32)
        return cls(np.asarray(b).reshape(op.n, -1), scales, zps, op.k, op.block_size, LINEAR, 0, threads)

    @classmethod
    def bnb4(cls, op, b: np.ndarray, absmax: np.ndarray, threads: int) -> NibbleWeights:
        """matmul_bnb4's operands: its code book as the table, zero points 0 (table[q] - 0 is
        table[q] exactly), the even column's code in the high nibble."""
        blocks = op.k // op.block_size
        zeros = np.zeros((op.n, blocks), np.uint8)
        return cls(np.asarray(b).reshape(op.n, op.k // 2), absmax, zeros, op.k, op.block_size,
                   BNB4_TABLES[op.quant_type], 4, threads)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        lead = x.shape[:-1]
        m = int(np.prod(lead)) if lead else 1
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(m, self.k)
        direct = out is not None and out.dtype == np.float32 and out.flags.c_contiguous
        target = out if direct else np.empty((*lead, self.n), np.float32)
        if m >= PANEL_ROWS:
            self._panels(x2, target.reshape(m, self.n))  # (a view: target is C-contiguous)
        else:
            xp = _scratch("xp", m * self.padded_k)  # x permuted to the nibble order, zero-padded to whole blocks
            self._fn(x2.ctypes.data, target.ctypes.data, xp.ctypes.data, m, self.k, self.n, self.block,
                     self.codes.ctypes.data, self.scales.ctypes.data, self.zps.ctypes.data, self.float_zp,
                     self.table.ctypes.data, self.even_shift, self.threads)
        if out is not None and not direct:
            out[...] = target
            return out
        return target if x.dtype == np.float32 else target.astype(x.dtype)

    def _panels(self, x2: np.ndarray, y: np.ndarray) -> None:
        """y = x2 @ W^T by panels of W's rows dequantized (in xp's permuted column order) into a
        scratch panel, each the A of oneDNN's float32 GEMM: y^T's rows [n0, n1) = panel @ xp^T.
        (W^T as oneDNN's B, a transposed runtime operand, ran 1.5x slower: it is reordered first.)"""
        m = x2.shape[0]
        xp = _scratch("xp", m * self.padded_k).reshape(m, self.padded_k)
        self._permute(x2.ctypes.data, xp.ctypes.data, m, self.k, self.block, self.even_shift)
        xp_t = _scratch("xp_t", m * self.padded_k).reshape(self.padded_k, m)
        xp_t[...] = xp.T
        y_t = _scratch("y_t", self.n * m).reshape(self.n, m)
        panel = _scratch("panel", self.panel * self.padded_k).reshape(self.panel, self.padded_k)
        for n0 in range(0, self.n, self.panel):
            n1 = min(n0 + self.panel, self.n)
            self._dequant(panel.ctypes.data, n0, n1, self.k, self.block, self.codes.ctypes.data,
                          self.scales.ctypes.data, self.zps.ctypes.data, self.float_zp, self.table.ctypes.data,
                          self.even_shift, self.threads)
            self._gemm(n1 - n0, m)(panel[:n1 - n0], xp_t, out=y_t[n0:n1])
        y[...] = y_t.T

    def _gemm(self, rows: int, m: int):
        """oneDNN's panel [rows, KP] @ xp^T [KP, m], made once per (rows, m): a program of static
        shape uses two (full panels and the last one)."""
        key = (rows, m)
        if key not in self._gemms:
            from ..onednn.matmul import MatMul
            from ..onednn.memory import MemDesc

            self._gemms[key] = MatMul((rows, self.padded_k), MemDesc.plain((self.padded_k, m)), threads=self.threads)
        return self._gemms[key]


def _constants(ins, ctx) -> list[np.ndarray]:
    """The op's weight operands (every input but a), which must be constants: the model's initializers."""
    consts = [ctx.const(w) for w in ins.inputs[1:]]
    if any(c is None for c in consts):
        raise CompileError(f"cpu target: {ins.op} (ONNX node {describe(ins.origin) or '?'}): its weights, scales "
                           "and zero points must be constants (computed at run time is not supported)")
    return consts


def _threads(ins, ctx) -> int:
    # a dynamic row count may be large: every thread
    return ctx.threads if ins.shape.is_dynamic else ctx.threads_for(2.0 * ins.shape.elements * ins.op.k)


@lowering("matmul_nbits")
def matmul_nbits(ins, ctx) -> Callable:
    """The fused nibble kernel over MatMulNBits' 4-bit codes."""
    if ins.op.bits != 4:
        raise CompileError(f"cpu target: {ins.op} (ONNX node {describe(ins.origin) or '?'}): {ins.op.bits}-bit "
                           "weights have no cpu kernel (4 bits only)")
    b, scales, *zps = _constants(ins, ctx)
    kernel = NibbleWeights.nbits(ins.op, b, scales, zps[0] if zps else None, _threads(ins, ctx))
    return lambda args, out: kernel(args[0], out)


@lowering("matmul_bnb4")
def matmul_bnb4(ins, ctx) -> Callable:
    """The same kernel over bitsandbytes' codes: a code book for a table, high nibbles first."""
    b, absmax = _constants(ins, ctx)
    kernel = NibbleWeights.bnb4(ins.op, b, absmax, _threads(ins, ctx))
    return lambda args, out: kernel(args[0], out)
