"""NonMaxSuppression on the device, in torch ops (they run on CPU tensors too, which is how it is
tested without a GPU). Selections are ONNX Runtime's and the reference's (ops/select.py): per batch
and class, the boxes above the score threshold by descending score, equal scores by lower index,
each kept unless its IoU with a box its class kept before is above the IoU threshold, up to `limit`;
the IoU is computed with ORT's float32 operations, in its order.

Every (batch, class) row is handled at once. Its candidates are sorted (a stable descending sort:
ties keep the lower index first). On CUDA with a score threshold, Triton kernels gather, sort and
select each row's candidates and write the output, with one host read (nms_triton.py; rows with
more candidates than its in-register sort holds are sorted here). On CUDA the greedy pass is one Triton kernel;
otherwise (CPU tensors, other dtypes, limits past its lanes) candidates are looked at in blocks of
up to _BLOCK, in torch ops:
  1. a candidate overlapping a box its row kept in an earlier block is dropped (IoU against the
     kept boxes, in chunks of _BLOCK);
  2. within the block, greedy selection is the fixed point of
         keep = free & ~any_j<i (keep_j & overlaps_ji)
     (entry i depends only on entries before it, so iterating from keep = free makes the first t
     entries exact after t rounds, and the first repeat is the greedy answer; chains of
     suppression are short, so a few batched rounds replace a step per candidate);
  3. the row's first `limit` kept boxes are appended.
The host reads a few scalars (the longest row; per block, whether a round changed anything and,
when more blocks follow, whether any row still needs one and how many boxes rows hold) and the
output count; the boxes and scores never leave the device.
"""

from __future__ import annotations

from typing import Any

_BLOCK = 512   # candidates of every row looked at together ([rows, _BLOCK, _BLOCK] overlaps)
_ROUNDS = 4    # fixed-point rounds between checks for convergence (one host read per check)


def corners(t: Any, boxes: Any, center: bool) -> tuple[Any, Any, Any, Any, Any]:
    """[B, N, 4] boxes as (lo0, lo1, hi0, hi1, area), each [B, N]: axis 0 is y, axis 1 is x."""
    a, b, c, d = boxes.unbind(-1)
    if center:  # [x, y, w, h]: ORT's centre -/+ half the size
        hw, hh = c / 2, d / 2
        lo1, hi1, lo0, hi0 = a - hw, a + hw, b - hh, b + hh
    else:       # [y1, x1, y2, x2], either corner order
        lo0, hi0, lo1, hi1 = t.minimum(a, c), t.maximum(a, c), t.minimum(b, d), t.maximum(b, d)
    return lo0, lo1, hi0, hi1, (hi1 - lo1) * (hi0 - lo0)


def overlaps(t: Any, a: tuple, b: tuple, thr: float) -> Any:
    """Whether IoU(a, b) > thr as ORT's SuppressByIOU decides it (a: the kept box, b: the candidate),
    broadcasting a's and b's (lo0, lo1, hi0, hi1, area)."""
    ix = t.minimum(a[3], b[3]) - t.maximum(a[1], b[1])
    iy = t.minimum(a[2], b[2]) - t.maximum(a[0], b[0])
    inter = ix * iy
    union = a[4] + b[4] - inter
    ok = (ix > 0) & (iy > 0) & (inter > 0) & (a[4] > 0) & (b[4] > 0) & (union > 0)
    return ok & (inter / t.where(ok, union, t.ones_like(union)) > thr)


def non_max_suppression(boxes: Any, scores: Any, limit: int, iou: float, score: float | None,
                        center: bool, kernel: str = "auto", graphs: Any = None) -> Any:
    """The selected [batch, class, box] triples (int64 [K, 3]) of ONNX NonMaxSuppression. `kernel`:
    the greedy pass as one Triton kernel (nms_triton.py) or in torch ops (below); "auto": Triton on
    CUDA for float32 boxes and limits it serves. `graphs` (nms_graph.GraphCache): the all-Triton
    path replayed as a CUDA graph per input shape (a compiled step's), instead of launched."""
    import torch as t

    from .nms_triton import CANDIDATES, candidates, emit, greedy, lanes_for

    dev = boxes.device
    batches, n = boxes.shape[:2]
    classes = scores.shape[1]
    rows = batches * classes
    limit = min(max(int(limit), 0), n)
    if not limit or not rows or not n:
        return t.zeros((0, 3), dtype=t.int64, device=dev)
    flat = scores.reshape(rows, n)
    if kernel == "auto":
        kernel = "triton" if boxes.is_cuda and boxes.dtype == t.float32 and lanes_for(limit) else "torch"
    if kernel == "triton" and score is not None and flat.dtype == t.float32:
        graphed = graphs.get(boxes, flat, classes, limit, iou, score, center) if graphs is not None else None
        if graphed is not None:
            total, longest, out = graphed(boxes, flat)
            if longest <= CANDIDATES:
                return out
        else:
            order, count = candidates(flat, score)  # sorted in registers, rows of up to CANDIDATES boxes
            kept, held, sums = greedy(order, count, boxes, classes, limit, iou, center)
            total, longest = sums.tolist()  # the one host read
            if longest <= CANDIDATES:
                return emit(kept, held, total, classes)
    valid = flat > score if score is not None else t.ones_like(flat, dtype=t.bool)
    # kept scores are > score >= -inf; + 0 makes -0.0 +0.0 (a radix sort on the bits would order them)
    key = t.where(valid, flat + 0.0, t.full_like(flat, float("-inf")))
    order = t.sort(key, dim=1, descending=True, stable=True).indices
    count = valid.sum(1)
    if kernel == "triton":
        kept, held, _ = greedy(order, count, boxes, classes, limit, iou, center)
        r, k = (t.arange(limit, device=dev) < held[:, None]).nonzero(as_tuple=True)  # by row, in order
        return t.stack([r // classes, r % classes, kept[r, k]], 1)
    longest = int(count.max())  # host read
    box = corners(t, boxes, center)
    batch_of = t.arange(rows, device=dev) // classes
    # one column past `limit`: where candidates not kept are scattered (no host read of which are)
    kept = t.zeros((rows, limit + 1), dtype=t.int64, device=dev)
    kept_box = tuple(t.zeros((rows, limit + 1), dtype=x.dtype, device=dev) for x in box)
    held = t.zeros(rows, dtype=t.int64, device=dev)
    for start in range(0, longest, _BLOCK):
        width = min(_BLOCK, longest - start)
        cand = order[:, start:start + width]
        free = (t.arange(start, start + width, device=dev) < count[:, None]) & (held < limit)[:, None]
        mine = tuple(x[batch_of[:, None], cand] for x in box)  # [rows, width]
        most = int(held.max()) if start else 0  # host read
        for k0 in range(0, most, _BLOCK):  # 1. against the boxes kept before
            k1 = min(k0 + _BLOCK, most)
            theirs = tuple(x[:, None, k0:k1] for x in kept_box)
            hit = overlaps(t, theirs, tuple(x[:, :, None] for x in mine), iou)
            hit &= (t.arange(k0, k1, device=dev) < held[:, None])[:, None, :]
            free &= ~hit.any(2)
        # 2. within the block: hits[r, j, i] = candidate j (before i) suppresses i
        hits = overlaps(t, tuple(x[:, :, None] for x in mine), tuple(x[:, None, :] for x in mine), iou)
        hits &= t.ones(width, width, dtype=t.bool, device=dev).triu(1)
        hits_f = hits.to(t.float32)
        keep = free
        while True:
            before = keep
            for _ in range(_ROUNDS):
                keep = free & ~(t.bmm(keep.to(t.float32)[:, None, :], hits_f)[:, 0, :] > 0)
            if bool(t.equal(keep, before)):  # (a repeat after _ROUNDS rounds is a fixed point: no cycles)
                break
        # 3. the first (limit - held) of each row's kept candidates
        rank = keep.cumsum(1)
        keep &= held[:, None] + rank <= limit
        at = t.where(keep, held[:, None] + rank - 1, t.full_like(rank, limit))
        kept.scatter_(1, at, cand)
        for dst, src in zip(kept_box, mine):
            dst.scatter_(1, at, src)
        held += keep.sum(1)
        if start + width < longest and not bool(((held < limit) & (count > start + width)).any()):
            break
    r, k = (t.arange(limit, device=dev) < held[:, None]).nonzero(as_tuple=True)  # by row, in order
    return t.stack([r // classes, r % classes, kept[r, k]], 1)

