"""Neural-network ops without windows or weights: local response normalization, the mean/variance
reduction that every normalization decomposes into, and training-mode dropout.

Normalizations (batch/instance/layer/group/RMS/mean-variance) are not ops: the frontend writes them as
`moments` plus pointwise math, so a fusion pass sees one reduction and one pointwise epilogue.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape, TupleShape
from .conv import compute_dtype


@register_op
class Lrn(Op):
    """Local response normalization across channels (ONNX LRN): x / (bias + alpha/size * sum of x^2 over
    the `size` neighbouring channels, floor((size-1)/2) before and ceil((size-1)/2) after) ** beta."""

    name = "lrn"
    kind = OpKind.OPAQUE
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0
    size: int = 1

    def compute_shape(self, inputs):
        (x,) = inputs
        if x.ndim < 2 or self.size < 1:
            raise ShapeError(f"{self}: input {x} has no channel axis")
        return x

    def compute(self, args):
        (x,) = args
        ct = compute_dtype(x.dtype)
        sq = x.astype(ct) ** 2
        before, after = (self.size - 1) // 2, self.size // 2
        padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
        c = x.shape[1]
        window = sum(padded[:, k:k + c] for k in range(self.size))
        return (x / (self.bias + self.alpha / self.size * window) ** self.beta).astype(x.dtype)


@register_op
class Moments(Op):
    """(mean, variance) of x over `axes`, both keeping the reduced axes as 1s. With `centered` False
    the second result is the raw second moment mean(x^2) instead (for RMS normalization)."""

    name = "moments"
    kind = OpKind.REDUCE
    axes: tuple[int, ...] = ()
    centered: bool = True

    def compute_shape(self, inputs):
        (x,) = inputs
        if not self.axes or sorted(set(self.axes)) != list(self.axes) or self.axes[-1] >= x.ndim or self.axes[0] < 0:
            raise ShapeError(f"{self}: axes must be sorted, unique and within rank {x.ndim}")
        if not x.dtype.is_float:
            raise ShapeError(f"{self}: input {x} must be floating point")
        out = Shape.of(x.dtype, [1 if i in self.axes else n for i, n in enumerate(x.lens)])
        return TupleShape((out, out))

    def compute(self, args):
        (x,) = args
        mean = x.mean(axis=self.axes, keepdims=True, dtype=compute_dtype(x.dtype))
        second = (x - mean) ** 2 if self.centered else x.astype(mean.dtype) ** 2
        return mean.astype(x.dtype), second.mean(axis=self.axes, keepdims=True).astype(x.dtype)


@register_op
class Dropout(Op):
    """ONNX Dropout with run-time inputs ratio (scalar) and training_mode (scalar bool) -> (y, mask).

    Inference (or ratio 0) is the identity with an all-true mask; training keeps each element with
    probability 1 - ratio and scales it by 1 / (1 - ratio). A seeded mask is drawn as the ONNX reference
    implementation draws it (numpy RandomState(seed).uniform >= ratio), so it is reproducible; an
    unseeded one is fresh on every run."""

    name = "dropout"
    kind = OpKind.OPAQUE
    seed: int | None = None

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        return self.seed is not None

    def compute_shape(self, inputs):
        x, ratio, training = inputs
        if ratio.ndim > 1 or training.ndim > 1 or training.dtype != DType.bool:
            raise ShapeError(f"{self}: ratio {ratio} and training_mode {training} must be scalars")
        return TupleShape((x, x.with_dtype(DType.bool)))

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs)

    def compute(self, args):
        x, ratio, training = args
        ratio = np.asarray(ratio, dtype=x.dtype).reshape(())
        if not bool(np.asarray(training).reshape(())) or ratio == 0:
            return x, np.ones(x.shape, dtype=bool)
        if not 0 < ratio < 1:
            raise ShapeError(f"{self}: ratio {ratio} must be in [0, 1)")
        mask = np.random.RandomState(self.seed).uniform(0.0, 1.0, x.shape) >= ratio
        return (mask * x * (1 / (1 - ratio))).astype(x.dtype), mask
