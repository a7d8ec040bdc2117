"""Range collection for calibration: per tensor, its min and max and (for entropy and percentile) a
histogram, merged over every calibration batch; then the [rmin, rmax] each method picks.

- minmax: the smallest and largest value seen (ORT's MinMaxCalibrater without moving average).
- percentile: the histogram cut so that (100 - p) / 2 percent of the values fall outside on each side.
- entropy: the symmetric threshold whose clipped, `num_quantized_bins`-level distribution is closest
  in KL divergence to the observed one (TensorRT's calibration; ORT's EntropyCalibrater).
The histogram spans [-T, T] with T the largest |value| so far; a larger one later grows it by whole
bins of the same width on both sides, so earlier counts stay where they were.
Entropy and percentile ranges are clipped to the observed [min, max] (a ReLU output keeps rmin = 0).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ArgumentError

METHODS = ("minmax", "entropy", "percentile")


@dataclasses.dataclass
class TensorRange:
    """What calibration saw of one tensor."""

    num_bins: int = 0               # 0: no histogram (minmax)
    lo: float = np.inf
    hi: float = -np.inf
    hist: np.ndarray | None = None  # counts over [-threshold, threshold]
    threshold: float = 0.0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).ravel()
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        if self.num_bins:
            self._add_histogram(x, max(abs(lo), abs(hi)))

    def _add_histogram(self, x: np.ndarray, amax: float) -> None:
        if self.hist is None or self.threshold == 0.0:
            old = self.hist
            self.threshold = amax
            self.hist, _ = np.histogram(x, self.num_bins, range=(-amax, amax)) if amax > 0 else (
                np.zeros(self.num_bins, np.int64), None)
            if amax == 0:
                self.hist[self.num_bins // 2] += x.size
            if old is not None:
                self.hist[self.num_bins // 2] += int(old.sum())  # every earlier value was 0
            return
        if amax > self.threshold:  # grow by whole bins of the same width on both sides
            width = 2 * self.threshold / self.hist.size
            extra = int((amax - self.threshold) // width) + 1
            self.hist = np.concatenate([np.zeros(extra, np.int64), self.hist, np.zeros(extra, np.int64)])
            self.threshold += extra * width
        counts, _ = np.histogram(x, self.hist.size, range=(-self.threshold, self.threshold))
        self.hist += counts

    def edges(self) -> np.ndarray:
        return np.linspace(-self.threshold, self.threshold, self.hist.size + 1)

    def seen(self) -> bool:
        return self.lo <= self.hi


def select_range(r: TensorRange, method: str, percentile: float = 99.99,
                 num_quantized_bins: int = 128) -> tuple[float, float]:
    """[rmin, rmax] for `r` by `method` (float32 values, as the scales are computed from)."""
    if not r.seen():
        return 0.0, 0.0
    if method == "minmax" or r.hist is None or r.threshold == 0.0:
        return r.lo, r.hi
    if method == "percentile":
        lo, hi = _percentile_range(r, percentile)
    elif method == "entropy":
        t = entropy_threshold(r.hist, r.threshold, num_quantized_bins)
        lo, hi = -t, t
    else:
        raise ArgumentError(f"calibration method {method!r}: expected one of {', '.join(METHODS)}")
    return max(lo, r.lo), min(hi, r.hi)


def _percentile_range(r: TensorRange, percentile: float) -> tuple[float, float]:
    if not 0 < percentile <= 100:
        raise ArgumentError(f"percentile {percentile}: expected a value in (0, 100]")
    cdf = np.cumsum(r.hist) / r.hist.sum()
    cut = (100.0 - percentile) / 200.0
    edges = r.edges()
    return float(edges[np.searchsorted(cdf, cut)]), float(edges[min(np.searchsorted(cdf, 1.0 - cut) + 1, r.hist.size)])


def entropy_threshold(hist: np.ndarray, threshold: float, num_quantized_bins: int = 128) -> float:
    """The |x| clip point minimizing KL(P || Q): P is the histogram folded to [-t, t] (the outliers
    added to its end bins), Q is P merged into `num_quantized_bins` levels and spread back evenly
    over the bins of each level that P uses. Candidates t grow one bin per side from the quantized
    width around zero to the whole histogram."""
    n = hist.size
    zero = n // 2
    half_q = num_quantized_bins // 2
    width = 2 * threshold / n
    hist = hist.astype(np.float64)
    csum = np.concatenate([[0.0], np.cumsum(hist)])
    best, best_div = threshold, np.inf
    for i in range(half_q, zero + 1):
        start, end = zero - i, min(zero + i + 1, n)
        p = hist[start:end].copy()
        p[0] += csum[start]
        p[-1] += csum[n] - csum[end]
        q = _expand(p, hist[start:end], num_quantized_bins)
        div = _kl(p, q)
        if div < best_div:
            best_div, best = div, (end - zero) * width
    return float(best)


def _expand(p: np.ndarray, sliced: np.ndarray, levels: int) -> np.ndarray:
    """The slice merged into `levels` bins (the remainder joins the last), each level's mass spread
    over the bins where p is non-zero."""
    m = sliced.size // levels
    starts = np.arange(levels) * m
    owner = np.minimum(np.arange(sliced.size) // m, levels - 1)
    mass = np.add.reduceat(sliced, starts)
    used = np.add.reduceat((p != 0).astype(np.float64), starts)
    per = np.divide(mass, used, out=np.zeros_like(mass), where=used != 0)
    return np.where(p != 0, per[owner], 0.0)


def _kl(p: np.ndarray, q: np.ndarray, eps: float = 1e-4) -> float:
    """KL(p || q) after both are smoothed: zero bins take eps from the non-zero ones (as TensorRT
    and ORT smooth), so a q that drops mass p has is penalized, not infinite."""
    ps, qs = _smooth(p, eps), _smooth(q, eps)
    if ps is None or qs is None:
        return np.inf
    return float(np.sum(ps * np.log(ps / qs)))


def _smooth(d: np.ndarray, eps: float) -> np.ndarray | None:
    zeros = d == 0
    nz = d.size - int(zeros.sum())
    if nz == 0:
        return None
    d = d / d.sum()
    take = eps * zeros.sum() / nz
    out = np.where(zeros, eps, d - take)
    return out if (out > 0).all() else None
