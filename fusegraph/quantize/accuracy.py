"""How far a quantized program's outputs are from the float program's, in the terms of its task.

Per output: the relative L2 error ||q - f|| / ||f|| over all held-out samples, and by the output's
shape (or the task named):
- classify ([N, C] logits): top-1 agreement, and how often the float top-1 is in the quantized top-5;
- detect (YOLO-style [N, 4 + C, A]: cx, cy, w, h, then class scores, per anchor): the float
  program's detections (score >= 0.25, per-class NMS at IoU 0.45) that a quantized detection of the
  same class matches at IoU >= 0.5, and the largest class score each program gives;
- ctc ([N, T, V] per-step class probabilities): greedy CTC decoding (argmax, repeats merged, blank 0
  dropped); the fraction of lines decoded identically;
- map ([N, 1, H, W] probabilities: a DB text detector's, a segmenter's): the IoU of the regions
  above MAP_THRESHOLD (PP-OCR's binarization threshold) in the two programs, and each one's largest
  probability (a map that dies under quantization keeps a tiny maximum and an IoU near 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError

TASKS = ("auto", "classify", "detect", "ctc", "map", "none")
SCORE_THRESHOLD, NMS_IOU, MATCH_IOU = 0.25, 0.45, 0.5
MAP_THRESHOLD = 0.3


@dataclasses.dataclass
class OutputAccuracy:
    name: str
    task: str
    rel_l2: float
    metrics: dict[str, float]

    def as_dict(self) -> dict:
        return {"name": self.name, "task": self.task, "rel_l2": self.rel_l2, **self.metrics}


def guess_task(out: np.ndarray) -> str:
    """The task an output's shape and values suggest (see the module docstring)."""
    if out.ndim == 2 and out.shape[1] >= 2:
        return "classify"
    if out.ndim == 3 and out.shape[2] >= 2:
        probs = np.all(out >= 0) and np.allclose(out.sum(axis=2), 1, atol=1e-2)
        if probs:
            return "ctc"
        if 5 <= out.shape[1] < out.shape[2]:
            return "detect"
    if out.ndim == 4 and out.shape[1] == 1 and out.size and 0 <= out.min() and out.max() <= 1:
        return "map"
    return "none"


def compare(names: Sequence[str], quantized: Sequence[list[np.ndarray]], reference: Sequence[list[np.ndarray]],
            task: str = "auto") -> list[OutputAccuracy]:
    """Per output: quantized vs reference over the samples (each sample a list of outputs)."""
    if task not in TASKS:
        raise ArgumentError(f"task {task!r}: expected one of {', '.join(TASKS)}")
    result = []
    for k, name in enumerate(names):
        q = [np.asarray(s[k], np.float64) for s in quantized]
        f = [np.asarray(s[k], np.float64) for s in reference]
        num = sum(float(np.sum((a - b) ** 2)) for a, b in zip(q, f, strict=True))
        den = sum(float(np.sum(b ** 2)) for b in f)
        rel = float(np.sqrt(num / den)) if den > 0 else float(np.sqrt(num))
        t = guess_task(f[0]) if task == "auto" else task
        metrics = _METRICS[t](q, f) if t in _METRICS and f[0].ndim == _NDIM[t] else {}
        result.append(OutputAccuracy(name, t if metrics else "none", rel, metrics))
    return result


def _classify(q: list[np.ndarray], f: list[np.ndarray]) -> dict[str, float]:
    qa, fa = np.concatenate(q), np.concatenate(f)
    top1 = fa.argmax(axis=1)
    top5 = np.argsort(-qa, axis=1)[:, :5]
    return {"top1_agreement": float(np.mean(qa.argmax(axis=1) == top1)),
            "top5_contains_top1": float(np.mean([t in row for t, row in zip(top1, top5, strict=True)])),
            "samples": float(len(top1))}


def _boxes(pred: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per image of a [N, 4 + C, A] output: (xyxy boxes, class, score) after per-class NMS."""
    out = []
    for p in pred:
        scores = p[4:].T                      # [A, C]
        cls = scores.argmax(axis=1)
        best = scores[np.arange(len(cls)), cls]
        keep = best >= SCORE_THRESHOLD
        cxcywh, cls, best = p[:4].T[keep], cls[keep], best[keep]
        xyxy = np.concatenate([cxcywh[:, :2] - cxcywh[:, 2:] / 2, cxcywh[:, :2] + cxcywh[:, 2:] / 2], axis=1)
        chosen = _nms(xyxy, best, cls)
        out.append((xyxy[chosen], cls[chosen], best[chosen]))
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each box of a [n, 4] with each of b [m, 4]."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _nms(boxes: np.ndarray, scores: np.ndarray, cls: np.ndarray) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    for i in order:
        if not kept:
            kept.append(i)
            continue
        k = np.array(kept)
        same = cls[k] == cls[i]
        if not np.any(_iou(boxes[i:i + 1], boxes[k[same]]) > NMS_IOU):
            kept.append(i)
    return np.array(kept, dtype=np.int64)


def _detect(q: list[np.ndarray], f: list[np.ndarray]) -> dict[str, float]:
    matched = total = 0
    qmax = fmax = 0.0
    for qs, fs in zip(q, f, strict=True):
        qmax, fmax = max(qmax, float(qs[:, 4:].max())), max(fmax, float(fs[:, 4:].max()))
        for (qb, qc, _), (fb, fc, _) in zip(_boxes(qs), _boxes(fs), strict=True):
            total += len(fb)
            if len(fb) and len(qb):
                iou = _iou(fb, qb) * (fc[:, None] == qc[None, :])
                matched += int(np.sum(iou.max(axis=1) >= MATCH_IOU))
    return {"box_agreement": matched / total if total else float("nan"), "reference_boxes": float(total),
            "max_score": qmax, "reference_max_score": fmax}


def ctc_decode(probs: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC decoding of [N, T, V]: argmax per step, repeats merged, blank (0) dropped."""
    best = probs.argmax(axis=2)
    out = []
    for row in best:
        merged = [int(c) for k, c in enumerate(row) if c != 0 and (k == 0 or c != row[k - 1])]
        out.append(tuple(merged))
    return out


def _ctc(q: list[np.ndarray], f: list[np.ndarray]) -> dict[str, float]:
    qd = [s for a in q for s in ctc_decode(a)]
    fd = [s for a in f for s in ctc_decode(a)]
    chars = [1.0 - _edit(a, b) / max(len(b), 1) for a, b in zip(qd, fd, strict=True)]
    return {"text_agreement": float(np.mean([a == b for a, b in zip(qd, fd, strict=True)])),
            "char_agreement": float(np.mean(chars)), "lines": float(len(fd))}


def _edit(a: Sequence[int], b: Sequence[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _map(q: list[np.ndarray], f: list[np.ndarray]) -> dict[str, float]:
    qa, fa = np.concatenate(q) > MAP_THRESHOLD, np.concatenate(f) > MAP_THRESHOLD
    union = int(np.sum(qa | fa))
    return {"region_iou": float(np.sum(qa & fa)) / union if union else float("nan"),
            "max_prob": float(max(a.max() for a in q)), "reference_max_prob": float(max(a.max() for a in f)),
            "reference_region_fraction": float(fa.mean())}


_METRICS = {"classify": _classify, "detect": _detect, "ctc": _ctc, "map": _map}
_NDIM = {"classify": 2, "detect": 3, "ctc": 3, "map": 4}
