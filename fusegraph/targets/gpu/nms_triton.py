"""The greedy pass of NonMaxSuppression as one Triton kernel: one program per (batch, class) row
walks its candidates in score order (torch sorted them) and keeps each that overlaps no box kept
before, the kept boxes' corners in registers ([LANES] vectors carried through the loop: no global
memory written and read back within the program). One launch replaces the blocked torch pass's
hundred small kernels and its host reads; it serves limits up to _MAX_LANES (the others take
nms.py's torch pass).

The IoU is ORT's arithmetic in float32: corners as centre -/+ size * 0.5 (equal to ORT's / 2),
IEEE division (`div_rn`: Triton's `/` is approximate) and no fused multiply-adds (the launch turns
fp fusion off: `a + b - x * y` would round once where ORT rounds twice).
"""

from __future__ import annotations

from typing import Any

_MAX_LANES = 1024

SOURCE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def nms_greedy(order_ptr, count_ptr, boxes_ptr, kept_ptr, held_ptr, n, classes, limit, iou,
               CENTER: tl.constexpr, LANES: tl.constexpr):
    row = tl.program_id(0)
    batch = row // classes
    total = tl.load(count_ptr + row)
    lanes = tl.arange(0, LANES)
    k_lo0 = tl.zeros([LANES], dtype=tl.float32)
    k_lo1 = tl.zeros([LANES], dtype=tl.float32)
    k_hi0 = tl.zeros([LANES], dtype=tl.float32)
    k_hi1 = tl.zeros([LANES], dtype=tl.float32)
    k_area = tl.zeros([LANES], dtype=tl.float32)
    k_box = tl.zeros([LANES], dtype=tl.int64)
    held = total * 0  # (scalar tensors, as `total` is: the loop's types stay fixed)
    i = total * 0
    while (i < total) & (held < limit):
        box = tl.load(order_ptr + row * n + i)
        q = boxes_ptr + (batch * n + box) * 4
        a = tl.load(q)
        b = tl.load(q + 1)
        c = tl.load(q + 2)
        d = tl.load(q + 3)
        if CENTER:
            hw = c * 0.5
            hh = d * 0.5
            lo1 = a - hw
            hi1 = a + hw
            lo0 = b - hh
            hi0 = b + hh
        else:
            lo0 = tl.minimum(a, c)
            hi0 = tl.maximum(a, c)
            lo1 = tl.minimum(b, d)
            hi1 = tl.maximum(b, d)
        area = (hi1 - lo1) * (hi0 - lo0)
        # the candidate as [LANES] vectors (+ 0.0 changes no value that matters here: -0.0 -> +0.0),
        # so every mask below is a vector (the interpreter cannot `&` a vector with a scalar)
        zero = tl.zeros([LANES], dtype=tl.float32)
        lo0 = zero + lo0
        lo1 = zero + lo1
        hi0 = zero + hi0
        hi1 = zero + hi1
        area = zero + area
        ix = tl.minimum(k_hi1, hi1) - tl.maximum(k_lo1, lo1)
        iy = tl.minimum(k_hi0, hi0) - tl.maximum(k_lo0, lo0)
        inter = ix * iy
        union = k_area + area - inter
        ok = (lanes < (lanes * 0 + held)) & (ix > 0) & (iy > 0) & (inter > 0) & (k_area > 0) & (area > 0) & (union > 0)
        ratio = libdevice.div_rn(inter, tl.where(ok, union, 1.0))
        hit = tl.max((ok & (ratio > iou)).to(tl.int32), 0)
        if hit == 0:
            here = lanes == held
            k_lo0 = tl.where(here, lo0, k_lo0)
            k_lo1 = tl.where(here, lo1, k_lo1)
            k_hi0 = tl.where(here, hi0, k_hi0)
            k_hi1 = tl.where(here, hi1, k_hi1)
            k_area = tl.where(here, area, k_area)
            k_box = tl.where(here, box, k_box)
            held += 1
        i += 1
    tl.store(kept_ptr + row * limit + lanes, k_box, mask=lanes < held)
    tl.store(held_ptr + row, held)
'''


def lanes_for(limit: int) -> int | None:
    """The kernel's vector width for `limit` kept boxes a row, or None past _MAX_LANES."""
    lanes = 16
    while lanes < limit:
        lanes *= 2
    return lanes if lanes <= _MAX_LANES else None


def greedy(order: Any, count: Any, boxes: Any, classes: int, limit: int, iou: float, center: bool) -> tuple[Any, Any]:
    """(kept [rows, limit] box indices, held [rows]): each row's selection, in selection order."""
    import torch

    from .kernels import load_kernel

    rows, n = order.shape
    lanes = lanes_for(limit)
    kernel = load_kernel(SOURCE, "nms_greedy")
    kept = torch.empty((rows, limit), dtype=torch.int64, device=boxes.device)
    held = torch.empty(rows, dtype=torch.int32, device=boxes.device)
    fusion = {} if boxes.device.type == "cpu" else {"enable_fp_fusion": False}  # (the interpreter has no flag)
    kernel[(rows,)](order.contiguous(), count.contiguous(), boxes.contiguous(), kept, held, n, classes, limit,
                    float(iou), CENTER=bool(center), LANES=lanes, num_warps=4 if lanes <= 256 else 8, **fusion)
    return kept, held.to(torch.int64)
