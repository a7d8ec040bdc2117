"""Picks Winograd's minimal filtering (codegen/winograd.py) for the 3 x 3 convolutions where its fewer
multiply-adds run about as fast each as the direct convolution's: F(4 x 4, 3 x 3) does 36 products for 16
outputs where the direct convolution does 144, F(2 x 2, 3 x 3) 16 for 4 against 36. Its products are
a^2 matrix products [T, C] @ [C, K] over the T output tiles, so it pays where T gives oneDNN's GEMM
enough rows to run near its peak and to reuse the transformed weights (a^2 C K floats: 4x the direct
convolution's at m = 4), which inside a network come from memory, not the cache. On the 2-core VM,
ResNet-50's 3 x 3 shapes at batch 1 against oneDNN's direct convolution with the same epilogue (each
alone, 25th percentile of 40 runs; four runs on a noisy VM, so ranges): 56^2 x 64, 196 tiles of 4 x 4:
0.45-1.03 ms against 1.1-2.0; 28^2 x 128, 49 tiles: 0.61-0.64 against 1.0-2.4; 14^2 x 256, 16 tiles
of 4 x 4 0.46-1.70 and 49 of 2 x 2 0.54-0.99 against 0.99-2.6 alone, but in the network (their 9.4 MB
of weights from memory) 1.0-1.1 ms a step against 0.8-1.0; 7^2 x 512, 16 tiles of 2 x 2: 0.82-1.56
against 0.99-2.16, not reliably faster. The whole network (isolated processes, alternating): batch 1
44.8 -> 39.4 ms, batch 8 378 -> 307 ms (in passes of tiles, kernels/winograd.py).

Legality: a channels-last float32 conv_epilogue (choose_layout) of static shape, constant finite
weights [K, C, 3, 3], stride 1, dilation 1, one group, its input and output dense. Each output is a
sum of the same products reassociated: within float32 rounding of the direct convolution (F(4, 3)
6-8x its largest error in those runs, F(2, 3) a third to a half of it), never in another order of the
epilogue. An input holding a NaN or an infinity spreads over whole tiles in the transforms, so such a run takes the
direct convolution (kernels/winograd.py checks, as the relu post-ops' guards do).

Runs after choose_layout; `disabled_passes=("choose_winograd",)` keeps every convolution direct.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ops.conv import window_attrs
from ....passes.manager import rewrite_each

MIN_TILES = 32  # output tiles (rows of each product) from which either tile size pays
MIN_CHANNELS = 16  # fewer input or output channels: products too thin for the GEMM's peak
MAX_WEIGHT = 1e15  # |w| past this: the weight transform's sums could leave float32's range


def tile_size(ins: Instruction) -> int:
    """The output tile m Winograd computes `ins` with (4 or 2), or 0: the direct convolution."""
    op, s = ins.op, ins.shape
    if (op.name != "conv_epilogue" or not op.channels_last or s.is_dynamic or s.dtype != DType.float32
            or s.ndim != 4 or op.group != 1 or not s.standard or not ins.inputs[0].shape.standard):
        return 0
    w = ins.inputs[1]
    if not w.is_literal or w.shape.lens[2:] != (3, 3) or (op.has_bias and not ins.inputs[2].is_literal):
        return 0
    _, _, strides, dilations = window_attrs(op, 2)
    k, c = w.shape.lens[:2]
    if tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) or min(k, c) < MIN_CHANNELS:
        return 0
    values = w.literal
    if not np.isfinite(values).all() or np.abs(values).max(initial=0) > MAX_WEIGHT:
        return 0
    n, ho, wo, _ = s.lens
    for m in (4, 2):
        if n * math.ceil(ho / m) * math.ceil(wo / m) >= MIN_TILES:
            return m
    return 0


def _choose(module: Module, ins: Instruction) -> bool:
    if getattr(ins.op, "winograd", 0):
        return False
    m = tile_size(ins)
    if not m:
        return False
    module.replace(ins, module.insert(ins, dataclasses.replace(ins.op, winograd=m), *ins.inputs))
    return True


def choose_winograd(module: Module) -> bool:
    return rewrite_each(module, _choose)
