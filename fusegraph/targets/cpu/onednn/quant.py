"""int8 arithmetic of a convolution or matmul: oneDNN v3's runtime scales and zero points.

oneDNN v3 computes, in this order (its "quantization" attribute semantics):

    acc = sum (src - src_zp) * weights                      exactly, in int32
    y   = acc * src_scale * weight_scale[oc] + bias          float32
    y   = post_ops(y)
    dst = saturate(round_nearest_even(y / dst_scale) + dst_zp)    u8 / s8, or y itself as f32

which is ONNX's DequantizeLinear -> Conv/MatMul (+ float bias) -> QuantizeLinear, except that the
products are summed exactly instead of in float32 (the float reference rounds each partial sum: the
two can differ by one step of the output's quantization where a value lies near a rounding edge).

Exactness limit: on x86 without VNNI, oneDNN (like ONNX Runtime's MLAS) multiplies u8 x s8 with
vpmaddubsw, which adds two neighbouring products in int16 and SATURATES. `pairs_cannot_saturate`
is the test a caller applies before choosing this path there: 255 * (|w_a| + |w_b|) <= 32767 for every
two weights, which holds for 7-bit weights (ORT's reduce_range). s8 sources are fed as u8 (x + 128
with zero point + 128: the same real values), because oneDNN's own s8 x s8 path on such machines halves
the weights (a rounding that changes results).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

import numpy as np

from ....errors import CompileError
from . import _lib
from .memory import MemDesc, aligned_empty

INT8 = ("u8", "s8")
DST_TYPES = ("u8", "s8", "f32", "s32")  # s32: the integer sum itself (scales 1)
INT16_MAX = 32767


@functools.cache
def has_vnni() -> bool:
    """Whether oneDNN's int8 kernels here accumulate u8 x s8 products in int32 (VNNI) rather than
    pairwise in saturating int16 (plain AVX2 / AVX-512)."""
    lib = _lib.load()
    return bool(lib.dnnl_get_effective_cpu_isa() & _lib.ISA_VNNI_BITS)


def pairs_cannot_saturate(weights: np.ndarray) -> bool:
    """Whether no two s8 weights can overflow vpmaddubsw's int16 pair sum against u8 inputs. Which
    two weights a kernel pairs depends on its blocking, so the bound takes the two largest anywhere."""
    w = np.abs(weights.astype(np.int32)).ravel()
    if w.size < 2:
        return True
    top = np.partition(w, w.size - 2)[-2:]
    return 255 * int(top.sum()) <= INT16_MAX


def exact_here(weights: np.ndarray) -> bool:
    """Whether this machine's oneDNN int8 kernels compute the integer sums of `weights` exactly."""
    return has_vnni() or pairs_cannot_saturate(weights)


@dataclasses.dataclass(frozen=True, eq=False)
class Quant:
    """One int8 primitive's numbers. `weight_scales`: one float32 per output channel, or one value.
    `dst`: "u8"/"s8" (requantized with dst_scale/dst_zero_point), "f32" (the dequantized result) or
    "s32" (the integer sum: exact while it stays below 2**24, as oneDNN converts it through float32).
    `runtime`: the source zero point and the weight scales are arguments of every call (`runtime_slots`),
    not constants: DynamicQuantizeLinear's, known only then; `weight_scales` then only says how many
    (one, or one per output channel) and the destination is f32."""

    src: str
    src_scale: float
    src_zero_point: int
    weight_scales: np.ndarray
    dst: str = "f32"
    dst_scale: float = 1.0
    dst_zero_point: int = 0
    runtime: bool = False

    def __post_init__(self):
        if self.src not in INT8 or self.dst not in DST_TYPES:
            raise CompileError(f"oneDNN int8: src {self.src!r} must be one of {INT8}, dst {self.dst!r} of {DST_TYPES}")
        if self.runtime and self.dst != "f32":
            raise CompileError(f"oneDNN int8: run-time scales and zero points need an f32 dst, not {self.dst!r}")

    @property
    def per_channel(self) -> bool:
        return np.asarray(self.weight_scales).size > 1

    def configure(self, attr: ctypes.c_void_p, weights_channel_mask: int) -> list[tuple[int, MemDesc, np.ndarray]]:
        """Set the masks on `attr` (a dnnl_primitive_attr_t) and return the constant arguments that
        carry the values: (argument id, descriptor, array), bound once to the primitive."""
        lib = _lib.load()
        consts = []

        def scales(arg: int, values, mask: int) -> None:
            _lib.check(lib.dnnl_primitive_attr_set_scales_mask(attr, arg, mask), f"scales of argument {arg}")
            consts.append(_const(_lib.ARG_ATTR_SCALES | arg, np.asarray(values, np.float32).reshape(-1)))

        def zero_point(arg: int, value: int) -> None:
            if value:
                _lib.check(lib.dnnl_primitive_attr_set_zero_points_mask(attr, arg, 0), f"zero point of {arg}")
                consts.append(_const(_lib.ARG_ATTR_ZERO_POINTS | arg, np.asarray([value], np.int32)))

        if self.runtime:  # the values come with every call (runtime_slots); src scale 1
            mask = weights_channel_mask if self.per_channel else 0
            _lib.check(lib.dnnl_primitive_attr_set_scales_mask(attr, _lib.ARG_WEIGHTS, mask), "run-time scales")
            _lib.check(lib.dnnl_primitive_attr_set_zero_points_mask(attr, _lib.ARG_SRC, 0), "run-time zero point")
            return consts
        scales(_lib.ARG_SRC, [self.src_scale], 0)
        scales(_lib.ARG_WEIGHTS, self.weight_scales, weights_channel_mask if self.per_channel else 0)
        zero_point(_lib.ARG_SRC, self.src_zero_point)
        if self.dst in INT8:
            scales(_lib.ARG_DST, [self.dst_scale], 0)
            zero_point(_lib.ARG_DST, self.dst_zero_point)
        return consts

    def runtime_slots(self) -> list[tuple[int, MemDesc, str]]:
        """The per-call arguments of a `runtime` Quant, in call order after the source: the weight
        scales (float32, as many as `weight_scales`) and the source zero point (int32, one)."""
        if not self.runtime:
            return []
        n = np.asarray(self.weight_scales).size
        return [(_lib.ARG_ATTR_SCALES | _lib.ARG_WEIGHTS, MemDesc.plain((n,), "f32"), "weight scales"),
                (_lib.ARG_ATTR_ZERO_POINTS | _lib.ARG_SRC, MemDesc.plain((1,), "s32"), "source zero point")]


def _const(arg: int, values: np.ndarray) -> tuple[int, MemDesc, np.ndarray]:
    a = aligned_empty(values.nbytes, values.dtype, values.shape)
    a[...] = values
    return arg, MemDesc.of_array(a), a
