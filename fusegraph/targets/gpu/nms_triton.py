"""NonMaxSuppression in Triton kernels, one program per (batch, class) row:
- `nms_candidates` gathers the row's boxes above the score threshold (up to CANDIDATES of them) and
  sorts them in registers by (score descending, index ascending): the order of ORT's stable sort,
  one 64-bit key per candidate, so no torch sort over all N boxes of every row;
- `nms_greedy` walks the row's candidates in that order and keeps each that overlaps no box kept
  before, the kept boxes' corners in registers ([LANES] vectors carried through the loop: no global
  memory written and read back within the program);
- `nms_emit` writes the selected (batch, class, box) triples at each row's offset in the output.
A detector's NMS is then a handful of launches and one host read (the output's size) in place of
the blocked torch pass's hundred small kernels and host reads. The greedy kernel serves limits up
to _MAX_LANES; rows with more candidates than CANDIDATES take torch's sort (nms.py).

The IoU is ORT's arithmetic in float32: corners as centre -/+ size * 0.5 (equal to ORT's / 2),
IEEE division (`div_rn`: Triton's `/` is approximate) and no fused multiply-adds (the launch turns
fp fusion off: `a + b - x * y` would round once where ORT rounds twice).
"""

from __future__ import annotations

from typing import Any

_MAX_LANES = 1024
CANDIDATES = 2048  # boxes above the threshold a row may have for the in-register sort
_SCAN = 1024        # scores read at once while gathering candidates

SOURCE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def nms_candidates(scores_ptr, order_ptr, count_ptr, n, threshold, CAP: tl.constexpr, SCAN: tl.constexpr):
    # order[row, :count] = the row's box indices with score > threshold, by descending score and
    # ascending index (count > CAP: only the count is right; the caller sorts those rows in torch)
    row = tl.program_id(0)
    scan = tl.arange(0, SCAN)
    held = row * 0  # a scalar tensor: the loop's types stay fixed
    start = n * 0
    while start < n:
        at = start + scan
        s = tl.load(scores_ptr + row * n + at, mask=at < n, other=0.0)
        ok = (at < n) & (s > threshold)  # (NaN never passes)
        bits = tl.where(s == 0.0, 0, s.to(tl.int32, bitcast=True))  # -0.0 and +0.0 are one score
        bits = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # ordered as the floats are
        key = (bits.to(tl.int64) << 32) | (4294967295 - at.to(tl.int64))  # ties: the lower index first
        slot = held + tl.cumsum(ok.to(tl.int32), 0) - 1
        tl.store(order_ptr + row * CAP + slot, key, mask=ok & (slot < CAP))
        held += tl.sum(ok.to(tl.int32), 0)
        start += SCAN
    tl.store(count_ptr + row, held)
    tl.debug_barrier()  # the row's keys, stored by all its threads, are read back below
    # the sort's width follows the row's count (a detector's rows hold a few boxes; CAP is for crowds)
    base = order_ptr + row * CAP
    keys = tl.minimum(held, CAP)
    if keys <= 32:
        _sort_keys(base, keys, 32)
    elif keys <= 256:
        _sort_keys(base, keys, 256)
    else:
        _sort_keys(base, keys, CAP)


@triton.jit
def _sort_keys(base, keys, WIDTH: tl.constexpr):
    # base[:keys] = the box indices of the keys there, by descending key (keys <= WIDTH, the row's CAP)
    lanes = tl.arange(0, WIDTH)
    key = tl.load(base + lanes, mask=lanes < keys, other=-9223372036854775808)
    key = tl.sort(key, descending=True)
    tl.debug_barrier()
    tl.store(base + lanes, 4294967295 - (key & 4294967295), mask=lanes < keys)


@triton.jit
def nms_emit(kept_ptr, held_ptr, out_ptr, classes, limit, LANES: tl.constexpr, SUM: tl.constexpr):
    # out[first + j] = (batch, class, kept[row, j]) for j < held[row], first = held[0] + ... + held[row - 1]
    row = tl.program_id(0)
    held = tl.load(held_ptr + row)
    first = held * 0
    start = row * 0
    while start < row:  # (a while loop: the interpreter cannot bound a range by a program id)
        at = start + tl.arange(0, SUM)
        first += tl.sum(tl.load(held_ptr + at, mask=at < row, other=0), 0)
        start += SUM
    lanes = tl.arange(0, LANES)
    mine = lanes < held
    box = tl.load(kept_ptr + row * limit + lanes, mask=mine, other=0)
    q = out_ptr + (first + lanes) * 3
    tl.store(q, (lanes * 0 + row // classes).to(tl.int64), mask=mine)
    tl.store(q + 1, (lanes * 0 + row % classes).to(tl.int64), mask=mine)
    tl.store(q + 2, box, mask=mine)


@triton.jit
def nms_greedy(order_ptr, count_ptr, boxes_ptr, kept_ptr, held_ptr, sums_ptr, n, stride, classes, limit, iou,
               CENTER: tl.constexpr, LANES: tl.constexpr):
    # sums[0] += the row's kept boxes, sums[1] = max(sums[1], its candidates): the host's one read
    row = tl.program_id(0)
    batch = row // classes
    count = tl.load(count_ptr + row)
    total = tl.minimum(count, stride)
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
        box = tl.load(order_ptr + row * stride + i)
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
    tl.store(held_ptr + row, held.to(tl.int64))
    tl.atomic_add(sums_ptr, held.to(tl.int64))
    tl.atomic_max(sums_ptr + 1, count.to(tl.int64))
'''


def lanes_for(limit: int) -> int | None:
    """The kernel's vector width for `limit` kept boxes a row, or None past _MAX_LANES."""
    lanes = 16
    while lanes < limit:
        lanes *= 2
    return lanes if lanes <= _MAX_LANES else None


def _launch_options(device: Any) -> dict:
    return {} if device.type == "cpu" else {"enable_fp_fusion": False}  # (the interpreter has no flag)


def candidates(scores: Any, threshold: float) -> tuple[Any, Any]:
    """(order [rows, CANDIDATES], count [rows]) for [rows, N] float32 scores: each row's boxes above
    `threshold` by descending score, ties by index (rows whose count passes CANDIDATES: only the
    count is right)."""
    import torch

    from .kernels import load_kernel

    rows, n = scores.shape
    order = torch.empty((rows, CANDIDATES), dtype=torch.int64, device=scores.device)
    count = torch.empty(rows, dtype=torch.int32, device=scores.device)
    load_kernel(SOURCE, "nms_candidates")[(rows,)](scores.contiguous(), order, count, n, float(threshold),
                                                   CAP=CANDIDATES, SCAN=_SCAN, num_warps=8)
    return order, count


def greedy(order: Any, count: Any, boxes: Any, classes: int, limit: int, iou: float,
           center: bool) -> tuple[Any, Any, Any]:
    """(kept [rows, limit] box indices, held [rows] int64, sums): each row's selection, in selection
    order, from its first count[row] candidates in `order` ([rows, any width]); sums (int64 [2],
    on the device) = (the boxes kept in all, the most candidates a row had)."""
    import torch

    from .kernels import load_kernel

    rows, stride = order.shape
    lanes = lanes_for(limit)
    kernel = load_kernel(SOURCE, "nms_greedy")
    kept = torch.empty((rows, limit), dtype=torch.int64, device=boxes.device)
    held = torch.empty(rows, dtype=torch.int64, device=boxes.device)
    sums = torch.zeros(2, dtype=torch.int64, device=boxes.device)
    kernel[(rows,)](order.contiguous(), count.contiguous(), boxes.contiguous(), kept, held, sums, boxes.shape[1],
                    stride, classes, limit, float(iou), CENTER=bool(center), LANES=lanes,
                    num_warps=4 if lanes <= 256 else 8, **_launch_options(boxes.device))
    return kept, held, sums


def emit(kept: Any, held: Any, total: int, classes: int) -> Any:
    """The int64 [total, 3] (batch, class, box) triples of every row's selection, rows in order
    (`total`: the sum of `held`, read by the caller)."""
    import torch

    out = torch.empty((total, 3), dtype=torch.int64, device=kept.device)
    if total:
        emit_into(kept, held, out, classes)
    return out


def emit_into(kept: Any, held: Any, out: Any, classes: int) -> None:
    """emit's triples written to the first rows of `out` (int64 [at least the sum of held, 3])."""
    from .kernels import load_kernel

    rows, limit = kept.shape
    load_kernel(SOURCE, "nms_emit")[(rows,)](kept, held, out, classes, limit, LANES=lanes_for(limit), SUM=256)
