"""Lowerings of the quantized products (rewrite_quantized.py, patterns_quant.py): int8 x int8 summed
exactly in int32 by cuBLASLt (torch._int_mm) or by the Triton GEMM template's int8 dot, float8
e4m3fn x e4m3fn in float32 by cuBLASLt's fp8 GEMM (torch._scaled_mm, unit scales) or Triton's fp8
dot; with the dequantizing epilogue (per-channel zero-point correction and scale, bias, activation, the next
quantize) fused: the template runs it on its tile, the library path runs it as one pointwise
kernel over the int32 product. Autotuned between the two as the float GEMM epilogues are.

Layouts, fixed at the first (warm-up) call, before graph capture:
- weights packed once into the column-major [K, N] matrix cuBLASLt's int8 GEMM takes (its "TN"
  form; a convolution's as [kh, kw, C] x M, the order of its patches, K zero-padded to a multiple
  of 8 (fp8: 16), as its patches are: ResNet's 7x7 stem has K = 147);
- a convolution's rows: the channels-last input itself for a 1x1, stride-1, unpadded one; else its
  patches [N, Ho, Wo, kh*kw*C], padded with the zero point (a fresh tensor each run: allocations
  in a captured graph come from its pool).
Shapes torch._int_mm does not take (16 rows or fewer, K or N not a multiple of 8) sum in float64,
exactly (|sums| < 2**53); float8 ones _scaled_mm does not take (M, K or N not a multiple of 16) in
float32.
"""

from __future__ import annotations

from typing import Any

from ...ops.conv import window_attrs
from .device import torch
from .gemm_runner import EpilogueGemm, epilogue_runner, nhwc
from .lowering import lowering
from .patterns_quant import quant_product


def int_mm_fits(m: int, k: int, n: int) -> bool:
    """torch._int_mm's shape rule (cuBLASLt's): more than 16 rows, K and N multiples of 8."""
    return m > 16 and k % 8 == 0 and n % 8 == 0


def scaled_mm_fits(m: int, k: int, n: int) -> bool:
    """torch._scaled_mm's shape rule (K and N multiples of 16), rows too: cuBLASLt's fp8 tiles."""
    return m % 16 == 0 and k % 16 == 0 and n % 16 == 0


def quant_matmul(a: Any, b: Any, out: Any) -> None:
    """out (contiguous [M, N]) = a [M, K] @ b [K, N] (b column-major): int8 operands into int32,
    exactly; float8 e4m3fn into float32 (the products exact, summed in float32)."""
    t = torch()
    (m, k), n = a.shape, b.shape[1]
    if a.dtype == t.int8:
        if int_mm_fits(m, k, n):
            t._int_mm(a.contiguous(), b, out=out)
        else:
            out.copy_(t.mm(a.to(t.float64), b.to(t.float64)))
    elif a.dtype == t.float8_e4m3fn and scaled_mm_fits(m, k, n):
        one = _unit_scale(a.device)  # tensor-wise scales of 1: the epilogue applies the real ones
        t._scaled_mm(a.contiguous(), b, one, one, out_dtype=t.float32, out=out)
    else:  # float32 products of float8 values are exact; matmuls run without TF32 by default
        t.mm(a.to(t.float32), b.to(t.float32), out=out)


_units: dict[Any, Any] = {}


def _unit_scale(device: Any) -> Any:
    """A float32 1 on `device`, made once (before graph capture: the warm-up runs first)."""
    if device not in _units:
        _units[device] = torch().ones((), dtype=torch().float32, device=device)
    return _units[device]


def padded_k(k: int, dtype: Any) -> int:
    """A convolution's K rounded up to what cuBLASLt's int8 (8) / fp8 (16) GEMM takes: its patches
    and weights are zero-padded to it (a zero weight row adds nothing), not summed in float64."""
    step = 8 if dtype == torch().int8 else 16
    return -(-k // step) * step


def packed_weights(w: Any, conv: bool) -> Any:
    """The weights as the GEMM's [K, N] operand, column-major: a dot's [K, N]; a convolution's
    [M, C, kh, kw] as [kh * kw * C, M], K zero-padded to padded_k."""
    if not conv:
        return w.t().contiguous().t()
    rows = w.permute(0, 2, 3, 1).reshape(w.shape[0], -1)
    k = rows.shape[1]
    if padded_k(k, w.dtype) != k:  # float8 padded as its bytes: the bits 0 are 0.0
        raw = rows.view(torch().uint8) if w.dtype.is_floating_point else rows
        rows = torch().nn.functional.pad(raw, (0, padded_k(k, w.dtype) - k)).view(w.dtype)
    return rows.contiguous().t()


def conv_rows(x: Any, op: Any, kernel: tuple[int, ...], out_sp: tuple[int, ...]) -> Any:
    """The GEMM's left operand of convolution `op` (window `kernel`) over x (N, C, H, W):
    [N, Ho, Wo, K] with K = kh * kw * C zero-padded to padded_k; a view of x for a pointwise
    convolution whose K needs no padding."""
    t = torch()
    pb, pe, strides, dils = window_attrs(op, 2)
    kh, kw = kernel
    xh = nhwc(x)
    k = kh * kw * x.shape[1]
    kp = padded_k(k, x.dtype)
    if (kh, kw) == (1, 1) and strides == (1, 1) and not any(pb) and not any(pe) and kp == k:
        return xh
    if x.dtype.is_floating_point:  # float8 gathered as its bytes (pad_value 0 is the bits 0), a copy all dtypes take
        return _patches(x.view(t.uint8), op, kernel, out_sp, kp).view(x.dtype)
    return _patches(x, op, kernel, out_sp, kp)


def _patches(x: Any, op: Any, kernel: tuple[int, ...], out_sp: tuple[int, ...], kp: int) -> Any:
    """x's patches [N, Ho, Wo, kh * kw * C], padded with the zero point, zero columns up to kp."""
    t = torch()
    pb, pe, strides, dils = window_attrs(op, 2)
    kh, kw = kernel
    xh = nhwc(x)
    if any(pb) or any(pe):  # padded taps read the zero point: they dequantize to 0
        xh = t.nn.functional.pad(xh, (0, 0, pb[1], pe[1], pb[0], pe[0]), value=op.pad_value)
    xh = xh.contiguous()
    n, _, _, c = xh.shape
    sn, sh, sw, sc = xh.stride()
    ho, wo = out_sp
    taps = xh.as_strided((n, ho, wo, kh, kw, c), (sn, sh * strides[0], sw * strides[1], sh * dils[0], sw * dils[1], sc))
    rows = taps.reshape(n, ho, wo, kh * kw * c)
    return t.nn.functional.pad(rows, (0, kp - kh * kw * c)) if kp != kh * kw * c else rows


class QuantEpilogueGemm(EpilogueGemm):
    """EpilogueGemm over int8 / float8 operands: the rows and packed weights above, the library
    path through quant_matmul into an int32 (float32) scratch matrix."""

    def __init__(self, ctx, step):
        super().__init__(ctx, step)
        self.conv = step.kind == "quant_conv_epilogue"
        mm = step.members[-1]
        self.op, self.kernel, self.out_sp = mm.op, tuple(mm.inputs[1].shape.lens[2:]), tuple(mm.shape.lens[2:])
        self.packed: tuple[int, Any] | None = None

    def weights(self, w: Any) -> Any:
        if self.packed is None or self.packed[0] != w.data_ptr():
            self.packed = (w.data_ptr(), packed_weights(w, self.conv))
        return self.packed[1]

    def rows(self, out, a, w, ops):
        if self.conv:
            return nhwc(out), conv_rows(a, self.op, self.kernel, self.out_sp), self.weights(w), [nhwc(x) for x in ops]
        ro, ra, _, rops = super().rows(out, a, w, ops)
        return ro, ra, self.weights(w), rops

    def _library(self, launchers):
        """quant_matmul into a scratch matrix, then the epilogue's pointwise kernel."""
        from .autotune import LIBRARY
        from .device import torch_dtype
        from .launch import PointwiseLauncher

        pw = PointwiseLauncher(self.body, self.var_types, self.out_type)
        acc_type = torch_dtype(self.var_types[self.acc[0]])  # int32, float32 for float8
        launchers[LIBRARY] = pw

        def run(out, a, w, *ops):
            ro, ra, rb, _ = self.rows(out, a, w, ())
            a2 = ra.reshape(-1, ra.shape[-1])
            acc = self.ctx.scratch((a2.shape[0], rb.shape[1]), acc_type)
            quant_matmul(a2, rb, acc)
            y = acc.view(ro.shape)
            y = y.permute(0, 3, 1, 2) if self.conv else y
            it = iter(ops)
            pw(out, *[y if r == "acc" else next(it) for r in self.roles])
        return run


@lowering("quant_gemm_epilogue", "quant_conv_epilogue", mode="into", cublas=True,
          note="int8 / fp8 GEMM (cuBLASLt _int_mm / _scaled_mm or the Triton template's int8 / fp8 dot) "
               "with the dequantizing epilogue: autotuned")
def quant_gemm_epilogue(ctx, step):
    return epilogue_runner(ctx, step, QuantEpilogueGemm)


@lowering("quant_convolution", mode="into", cublas=True, note="int8 / fp8 GEMM over channels-last patches (cuBLASLt)")
def quant_convolution(ctx, step):
    op, out_sp = step.ins.op, tuple(step.ins.shape.lens[2:])
    kernel = tuple(step.inputs[1].shape.lens[2:])
    if not quant_product(step.ins):
        return _wide_convolution(op)
    packed: list[Any] = []

    def run(out, x, w):
        if not packed:
            packed.append(packed_weights(w, True))
        rows = conv_rows(x, op, kernel, out_sp)
        a2 = rows.reshape(-1, rows.shape[-1])
        acc = ctx.scratch((a2.shape[0], out.shape[1]), out.dtype)
        quant_matmul(a2, packed[0], acc)
        nhwc(out).copy_(acc.view(*rows.shape[:-1], out.shape[1]))
    return run


def _wide_convolution(op):
    """Other operand types (grouped too): in float64 through cuDNN (exact for integers: rounded)."""
    t = torch()
    pb, pe, strides, dils = window_attrs(op, 2)

    def run(out, x, w):
        xp = t.nn.functional.pad(x.to(t.float64), (pb[1], pe[1], pb[0], pe[0]), value=float(op.pad_value))
        y = t.nn.functional.conv2d(xp, w.to(t.float64), None, strides, 0, dils, op.group)
        out.copy_(y if out.dtype.is_floating_point else y.round())
    return run


def packed_dot(ctx, step):
    """A quant_dot / float8_dot of a GEMM's operands (2-D, constant weights) with no fused reader."""
    packed: list[Any] = []

    def run(out, a, b):
        if not packed:
            packed.append(packed_weights(b, False))
        quant_matmul(a, packed[0], out)
    return run


@lowering("float8_dot", mode="into", cublas=True, note="cuBLASLt fp8 GEMM (torch._scaled_mm), else float32")
def float8_dot(ctx, step):
    if quant_product(step.ins):
        return packed_dot(ctx, step)  # the same packing and call, by the operands' type
    t = torch()

    def run(out, a, b):
        t.matmul(a.to(t.float32), b.to(t.float32), out=out)
    return run
