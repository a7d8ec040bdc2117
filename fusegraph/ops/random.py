"""Random ops: uniform and normal samples, Bernoulli draws and multinomial sampling.

They draw from numpy's legacy `RandomState` as ONNX's reference does: a fresh generator per run,
seeded with int(seed) when a seed is given (so a seeded op repeats its values run after run), from
OS entropy otherwise. They are not `deterministic`: constant propagation never folds them and
common-subexpression elimination never merges two of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape


def generator(seed: float | None) -> np.random.RandomState:
    return np.random.RandomState() if seed is None else np.random.RandomState(int(seed))


class RandomOp(Op):
    kind = OpKind.OPAQUE
    deterministic = False


@dataclasses.dataclass(frozen=True)
class _Sampler(RandomOp):
    """Samples of `dtype`, shaped like the one input (the *Like ops) or as `lens` (no input)."""

    dtype: DType = DType.float32
    seed: float | None = None
    lens: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if not self.dtype.is_float:
            raise ShapeError(f"{self.name}: dtype must be a float type, got {self.dtype}")
        if len(inputs) > 1:
            raise ShapeError(f"{self.name}: takes at most one input, got {len(inputs)}")
        return Shape(self.dtype, inputs[0].dims) if inputs else Shape.of(self.dtype, self.lens)

    compute_dynamic_shape = compute_shape

    def _lens(self, args) -> tuple[int, ...]:
        return tuple(np.shape(args[0])) if args else self.lens


@register_op
class RandomUniform(_Sampler):
    """Uniform samples in [low, high)."""

    name = "random_uniform"
    low: float = 0.0
    high: float = 1.0

    def compute(self, args):
        r = generator(self.seed).rand(*self._lens(args)).astype(self.dtype.np)
        return (r * (self.high - self.low) + self.low).astype(self.dtype.np)  # scaled in dtype


@register_op
class RandomNormal(_Sampler):
    """Normal samples of mean `mean` and standard deviation `scale`."""

    name = "random_normal"
    mean: float = 0.0
    scale: float = 1.0

    def compute(self, args):
        r = generator(self.seed).randn(*self._lens(args)).astype(self.dtype.np)
        return (r * self.scale + self.mean).astype(self.dtype.np)


@register_op
class Bernoulli(RandomOp):
    """1 with probability p (the input, in [0, 1]), else 0, as `dtype`."""

    name = "bernoulli"
    dtype: DType = DType.float32
    seed: float | None = None

    def compute_shape(self, inputs):
        (p,) = inputs
        if not p.dtype.is_float:
            raise ShapeError(f"{self.name}: probabilities must be floats, got {p}")
        return Shape(self.dtype, p.dims)

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        return generator(self.seed).binomial(1, p=args[0]).astype(self.dtype.np)


@register_op
class Multinomial(RandomOp):
    """`sample_size` class indices per row of unnormalized log-probabilities [batch, classes],
    drawn with probabilities softmax(row): [batch, sample_size] of `dtype` (int32 or int64)."""

    name = "multinomial"
    sample_size: int = 1
    dtype: DType = DType.int32
    seed: float | None = None

    def compute_shape(self, inputs):
        (x,) = inputs
        if x.ndim != 2 or not x.dtype.is_float or self.dtype not in (DType.int32, DType.int64):
            raise ShapeError(f"{self.name}: needs float [batch, classes] and an int32/int64 dtype, got {x}")
        return Shape(self.dtype, (x.dims[0], Dim.fixed(self.sample_size)))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        x = np.asarray(args[0], dtype=np.float64)
        p = np.exp(x - x.max(axis=1, keepdims=True))
        cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
        u = generator(self.seed).rand(x.shape[0], self.sample_size)
        idx = np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)]) if len(x) else u
        return np.minimum(idx, x.shape[1] - 1).astype(self.dtype.np).reshape(x.shape[0], self.sample_size)
