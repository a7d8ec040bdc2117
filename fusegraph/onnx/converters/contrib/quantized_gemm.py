"""ONNX Runtime's quantized matmuls and convolution: QGemm (int8 GEMM), MatMulIntegerToFloat and
DynamicQuantizeMatMul (what ORT fuses dynamic quantization into), MatMulNBits (2/4/8-bit blocked
weights), MatMulBnb4 (bitsandbytes FP4/NF4 weights) and the channels-last com.microsoft QLinearConv.

    QGemm        acc = C + (A - za) @ (B - zb) exactly in int32 (C is an int32 bias); with y_scale
                 y = sat(round(acc * (alpha * sa * sb / sy)) + zy), the multiplier formed in float32
                 in that order and rounded half to even, as ORT's requantizing output processor;
                 without y_scale the float32 acc * (alpha * sa * sb)
    MatMulNBits  Y = A @ W^T + bias, W[n, k] = (q[n, k] - zp[n, g(k)]) * scale[n, g(k)] with
                 g(k) = k // block_size (or g_idx[k]); q packed low bits first, zp packed the same
                 way per row of blocks (or float, the scales' type), 2^(bits-1) when absent.
                 4 bits with blocks in order (no g_idx, or the trivial one) stay packed as the
                 `matmul_nbits` op (ops/nbits.py), which the cpu and gpu targets run with the
                 dequantization fused into their product; 2 and 8 bits and a reordering g_idx
                 are dequantized here, at compile (no kernel reads them packed yet)
    MatMulBnb4   Y = A @ W^T, W the [N, K] row-major weight whose 4-bit codes (high nibble first,
                 as bitsandbytes packs them) index the FP4 or NF4 table, times absmax per block;
                 with K a multiple of the block it stays packed as `matmul_bnb4` (ops/nbits.py,
                 the same kernels as matmul_nbits with a code table), else dequantized here

The weight-only formats dequantize in float32 as ORT's CPU kernel does (accuracy_level 0: float
compute); the matmul itself is a float matmul, so results agree with ORT to float rounding only.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ops.nbits import BNB4_TABLES
from ...registry import converter
from ..conv import arg, qlinear_conv
from ..gemm import matmul
from ..quantize import centered, dynamic_quantize_linear
from .quantized import scalar_scale

MS = "com.microsoft"
F32 = DType.float32

def _transposed(ctx, x: Instruction, trans: bool) -> Instruction:
    return ctx.add("transpose", x, perm=(1, 0)) if trans else x


@converter("QGemm", domain=MS)
def qgemm(ctx, node, args):
    a, sa, za, b, sb, zb, c, sy, zy = (arg(args, k) for k in range(9))
    if a.shape.ndim != 2 or b.shape.ndim != 2:
        raise ctx.error(f"A {a.shape} and B {b.shape} must be matrices")
    a = _transposed(ctx, a, bool(node.attr("transA", 0)))
    b = _transposed(ctx, b, bool(node.attr("transB", 0)))
    acc = ctx.add("quant_dot", centered(ctx, a, za), centered(ctx, b, zb))
    if c is not None:
        acc = ctx.pointwise("add", acc, ctx.convert(c, DType.int32))
    alpha = ctx.literal(np.float32(node.attr("alpha", 1.0)))
    # b_scale (and b_zero_point) hold one value or one per column of B; either broadcasts over rows
    scale = ctx.pointwise("mul", ctx.add("mul", alpha, scalar_scale(ctx, sa, "A scale")), ctx.convert(sb, F32))
    if sy is None:
        return ctx.pointwise("mul", ctx.convert(acc, F32), scale)
    scale = ctx.pointwise("div", scale, scalar_scale(ctx, sy, "Y scale"))
    to = zy.shape.dtype if zy is not None else a.shape.dtype
    zp = ctx.literal(np.zeros((), to.np)) if zy is None else ctx.reshape(zy, [])
    return ctx.pointwise("quantize_linear", ctx.pointwise("mul", ctx.convert(acc, F32), scale),
                         ctx.literal(np.float32(1)), zp, to=to)


def _unpack(ctx, packed: Instruction, bits: int, high_first: bool) -> Instruction:
    """uint8 [..., n] -> its codes [..., n * 8/bits], in the order the format packs them."""
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    shifts = ctx.literal(shifts[::-1].copy() if high_first else shifts)
    lens = list(packed.shape.lens)
    wide = ctx.pointwise("shr", ctx.reshape(packed, lens + [1]), shifts)
    codes = ctx.pointwise("bitand", wide, ctx.literal(np.uint8((1 << bits) - 1)))
    return ctx.reshape(codes, lens[:-1] + [lens[-1] * per])


def _take_columns(ctx, x: Instruction, n: int) -> Instruction:
    if x.shape.lens[-1] == n:
        return x
    axis = x.shape.ndim - 1
    return ctx.add("slice", x, axes=(axis,), starts=(0,), ends=(n,), steps=(1,))


@converter("MatMulNBits", domain=MS)
def matmul_nbits(ctx, node, args):
    a, b, scales, zps, g_idx, bias = (arg(args, k) for k in range(6))
    k, n, bits, block = (int(node.attr(name)) for name in ("K", "N", "bits", "block_size"))
    if bits not in (2, 4, 8) or block < 16 or block & (block - 1):
        raise ctx.error(f"bits={bits}, block_size={block}: bits must be 2, 4 or 8, block_size a power of 2 >= 16")
    blocks = -(-k // block)
    if b.shape.is_dynamic or b.shape.elements != n * blocks * block * bits // 8:
        raise ctx.error(f"B {b.shape} does not hold N={n} x {blocks} blocks of {block} {bits}-bit codes")
    group = ctx.require_const(g_idx, "g_idx").astype(np.int64) if g_idx is not None else np.arange(k) // block
    if bits == 4 and np.array_equal(group, np.arange(k) // block):
        y = ctx.add("matmul_nbits", a, b, scales, *([] if zps is None else [zps]), k=k, n=n, bits=bits,
                    block_size=block)
        return y if bias is None else ctx.pointwise("add", y, ctx.convert(bias, y.shape.dtype))
    q = _take_columns(ctx, _unpack(ctx, ctx.reshape(b, [n, blocks * block * bits // 8]), bits, False), k)
    group = ctx.literal(group.astype(np.int64))
    scale = ctx.add("gather", ctx.convert(ctx.reshape(scales, [n, blocks]), F32), group, axis=1)
    if zps is None:
        zp = ctx.literal(np.float32(1 << (bits - 1)))
    elif zps.shape.dtype == DType.uint8:
        per_row = zps.shape.elements // n
        zp = _take_columns(ctx, _unpack(ctx, ctx.reshape(zps, [n, per_row]), bits, False), blocks)
        zp = ctx.add("gather", ctx.convert(zp, F32), group, axis=1)
    else:
        zp = ctx.add("gather", ctx.convert(ctx.reshape(zps, [n, blocks]), F32), group, axis=1)
    w = ctx.pointwise("mul", ctx.pointwise("sub", ctx.convert(q, F32), zp), scale)
    y = matmul(ctx, a, ctx.convert(ctx.add("transpose", w, perm=(1, 0)), a.shape.dtype))
    return y if bias is None else ctx.pointwise("add", y, ctx.convert(bias, y.shape.dtype))


@converter("MatMulBnb4", domain=MS)
def matmul_bnb4(ctx, node, args):
    a, b, absmax = args[0], args[1], args[2]
    k, n, block = (int(node.attr(name)) for name in ("K", "N", "block_size"))
    quant_type = int(node.attr("quant_type", 1))
    if quant_type not in BNB4_TABLES:
        raise ctx.error(f"quant_type {quant_type} is neither 0 (FP4) nor 1 (NF4)")
    total = n * k
    if b.shape.is_dynamic or b.shape.elements != (total + 1) // 2:
        raise ctx.error(f"B {b.shape} does not hold N*K = {total} 4-bit codes")
    if k % block == 0:  # every block inside one row of W: the packed op its kernels run
        return ctx.add("matmul_bnb4", a, b, absmax, k=k, n=n, block_size=block, quant_type=quant_type)
    codes = _take_columns(ctx, _unpack(ctx, ctx.reshape(b, [(total + 1) // 2]), 4, True), total)
    values = ctx.add("gather", ctx.literal(BNB4_TABLES[quant_type]), ctx.convert(codes, DType.int64), axis=0)
    per_block = ctx.add("gather", ctx.convert(ctx.reshape(absmax, [-(-total // block)]), F32),
                        ctx.literal(np.arange(total, dtype=np.int64) // block), axis=0)
    w = ctx.reshape(ctx.pointwise("mul", values, per_block), [n, k])
    return matmul(ctx, a, ctx.convert(ctx.add("transpose", w, perm=(1, 0)), a.shape.dtype))


def _scaled(ctx, acc: Instruction, a_scale: Instruction, b_scale: Instruction, bias: Instruction | None):
    """ORT's scale-and-bias output processor: float32(acc) * (a_scale * b_scale) (+ bias), the
    scale per tensor or per column of B."""
    y = ctx.pointwise("mul", ctx.convert(acc, F32), ctx.pointwise("mul", a_scale, ctx.convert(b_scale, F32)))
    return y if bias is None else ctx.pointwise("add", y, ctx.convert(bias, F32))


@converter("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(ctx, node, args):
    a, b, sa, sb, za, zb, bias = (arg(args, k) for k in range(7))
    acc = matmul(ctx, centered(ctx, a, za), centered(ctx, b, zb), op="quant_dot")
    return _scaled(ctx, acc, scalar_scale(ctx, sa, "A scale"), sb, bias)


@converter("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(ctx, node, args):
    """A quantized to uint8 as DynamicQuantizeLinear does, then MatMulIntegerToFloat."""
    a, b, sb, zb, bias = (arg(args, k) for k in range(5))
    qa, sa, za = dynamic_quantize_linear(ctx, node, [a])
    acc = matmul(ctx, centered(ctx, qa, za), centered(ctx, b, zb), op="quant_dot")
    return _scaled(ctx, acc, sa, sb, bias)


@converter("QLinearConv", domain=MS)
def qlinear_conv_ms(ctx, node, args):
    """QLinearConv, its input and output channels-last when `channels_last` (ORT's NHWC form);
    the weight stays [M, C/group, k...]."""
    if not node.attr("channels_last", 0):
        return qlinear_conv(ctx, node, args)
    x = args[0]
    rank = x.shape.ndim
    to_first = (0, rank - 1) + tuple(range(1, rank - 1))
    y = qlinear_conv(ctx, node, [ctx.add("transpose", x, perm=to_first), *args[1:]])
    return ctx.add("transpose", y, perm=(0,) + tuple(range(2, rank)) + (1,))
