"""IR ops the cpu target introduces, in the shapes oneDNN runs in one primitive: a convolution or a
matrix product with its epilogue fused (bias, residual adds, a chain of activations: oneDNN's
post-ops), and pooling over channels-last tensors (N, *spatial, C: the layout of oneDNN's fast
kernels). Each has a numpy reference, so a program the cpu pipeline rewrote still runs on the
reference target."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.op import Op, OpKind, register_op
from ...ir.shape import Shape
from ...ops.conv import Convolution, Deconvolution
from ...ops.gemm import Dot
from ...ops.pool import Pooling
from ...ops.scalar import evaluate, parse_expr

# activation name -> scalar body over x0 with its alpha/beta (each is one oneDNN eltwise post-op)
ACTIVATIONS = {
    "relu": "max(x0, 0)",
    "leaky_relu": "where(ge(x0, 0), x0, mul(x0, {alpha}))",
    "clip": "min(max(x0, {alpha}), {beta})",
    "sigmoid": "sigmoid(x0)",
    "tanh": "tanh(x0)",
    "silu": "mul(x0, sigmoid(x0))",
    "hard_sigmoid": "max(min(add(mul(x0, {alpha}), {beta}), 1), 0)",
    "hard_swish": "mul(x0, max(min(add(mul(x0, 0.16666666666666666), 0.5), 1), 0))",
    "gelu_erf": "mul(mul(x0, 0.5), add(erf(mul(x0, 0.7071067811865476)), 1))",
    "linear": "add(mul(x0, {alpha}), {beta})",
}

# (name, alpha, beta): one step of an epilogue's chain: an activation, or RESIDUAL, where the next
# residual input is added (oneDNN's sum post-op, wherever it sits in the chain)
Activation = tuple[str, float, float]
RESIDUAL = "residual"


@functools.cache
def activation_expr(name: str, alpha: float, beta: float):
    return parse_expr(ACTIVATIONS[name].format(alpha=repr(float(alpha)), beta=repr(float(beta))))


def _check_chain(op: Op, chain: Sequence[Activation], n_residual: int) -> None:
    for step in chain:
        if len(step) != 3 or (step[0] not in ACTIVATIONS and step[0] != RESIDUAL):
            raise ShapeError(f"{op}: bad step {step!r}; each is (name, alpha, beta) with a name of "
                             f"{sorted(ACTIVATIONS)} or {RESIDUAL!r}")
    if sum(step[0] == RESIDUAL for step in chain) != n_residual:
        raise ShapeError(f"{op}: {n_residual} residual inputs need as many {RESIDUAL!r} steps")


def apply_chain(y: np.ndarray, chain: Sequence[Activation], residuals: Sequence[np.ndarray], dtype) -> np.ndarray:
    pending = list(residuals)
    for name, alpha, beta in chain:
        y = y + pending.pop(0) if name == RESIDUAL else evaluate(activation_expr(name, alpha, beta), [y])
    return np.asarray(y, dtype=dtype)


def to_channels_last(ndim: int) -> tuple[int, ...]:
    """The transpose perm N, C, *sp -> N, *sp, C."""
    return (0, *range(2, ndim), 1)


def to_channels_first(ndim: int) -> tuple[int, ...]:
    """The transpose perm N, *sp, C -> N, C, *sp."""
    return (0, ndim - 1, *range(1, ndim - 1))


def _first(s: Shape) -> Shape:
    return Shape.of(s.dtype, [s.lens[p] for p in to_channels_first(s.ndim)])


def _last(s: Shape) -> Shape:
    return Shape.of(s.dtype, [s.lens[p] for p in to_channels_last(s.ndim)])


@dataclasses.dataclass(frozen=True)
class _WindowEpilogue(Op):
    """A window op (the next base class: convolution or deconvolution) + bias, then the steps of
    `activations` in order (a RESIDUAL step adds the next residual): inputs x, w, then the bias (per
    output channel, shape [M]) if `has_bias`, then `n_residual` tensors of the output's shape. With
    `channels_last`, x, the residuals and the result are N, *spatial, C (w keeps its layout)."""

    kind = OpKind.CONV
    has_bias: bool = False
    n_residual: int = 0
    activations: tuple[Activation, ...] = ()
    channels_last: bool = False

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if self.channels_last:
            if inputs[0].ndim < 3:
                raise ShapeError(f"{self}: input {inputs[0]} must be N-spatial-C")
            k = 2 + self.has_bias
            firsts = [_first(inputs[0]), *inputs[1:k], *[_first(r) for r in inputs[k:]]]
            return _last(self._shape(firsts))
        return self._shape(inputs)

    def _shape(self, inputs: Sequence[Shape]) -> Shape:
        out = super().compute_shape(inputs[:2])
        _check_chain(self, self.activations, self.n_residual)
        if len(inputs) != 2 + self.has_bias + self.n_residual:
            raise ShapeError(f"{self}: expects {2 + self.has_bias + self.n_residual} inputs, got {len(inputs)}")
        if self.has_bias and inputs[2].lens != (out.lens[1],):
            raise ShapeError(f"{self}: bias {inputs[2]} must be [{out.lens[1]}]")
        for r in inputs[2 + self.has_bias:]:
            if r.lens != out.lens:
                raise ShapeError(f"{self}: residual {r} must match the output {out}")
        return out

    def compute(self, args):
        if self.channels_last:
            k, nd = 2 + self.has_bias, args[0].ndim
            first = to_channels_first(nd)
            args = [args[0].transpose(first), *args[1:k], *[r.transpose(first) for r in args[k:]]]
            return np.ascontiguousarray(self._compute(args).transpose(to_channels_last(nd)))
        return self._compute(args)

    def _compute(self, args):
        y = super().compute(args[:2])
        if self.has_bias:
            y = y + args[2].reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype)
        return apply_chain(y, self.activations, args[2 + self.has_bias:], args[0].dtype)


@register_op
class ConvEpilogue(_WindowEpilogue, Convolution):
    """`convolution` (w: M, C/group, *k) with its epilogue: see _WindowEpilogue. `winograd`: the
    output tile m of Winograd's F(m x m, 3 x 3) that computes it (passes/choose_winograd.py), 0: the
    direct convolution."""

    name = "conv_epilogue"
    winograd: int = 0


@register_op
class DeconvEpilogue(_WindowEpilogue, Deconvolution):
    """`deconvolution` (w: C, M/group, *k) with its epilogue: see _WindowEpilogue."""

    name = "deconv_epilogue"


@register_op
class DotEpilogue(Dot):
    """reshape(a @ b, out_lens) + bias, then the steps of `activations` in order (a RESIDUAL step adds
    the next residual): inputs a, b, then the bias (one value per output column, shape [N]) if
    `has_bias`, then `n_residual` tensors of the output's shape. `out_lens` (empty: a @ b's own lens)
    must keep the last dim: it is the reshape the frontend puts between a 2-D product and its bias
    when it flattens a 3-D MatMul."""

    name = "dot_epilogue"
    kind = OpKind.GEMM
    out_lens: tuple[int, ...] = ()
    has_bias: bool = False
    n_residual: int = 0
    activations: tuple[Activation, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        prod = super().compute_shape(inputs[:2])
        _check_chain(self, self.activations, self.n_residual)
        out = prod.with_lens(self.out_lens) if self.out_lens else prod
        if out.elements != prod.elements or out.lens[-1:] != prod.lens[-1:]:
            raise ShapeError(f"{self}: out_lens {list(self.out_lens)} must hold {prod} with its last dim")
        if len(inputs) != 2 + self.has_bias + self.n_residual:
            raise ShapeError(f"{self}: expects {2 + self.has_bias + self.n_residual} inputs, got {len(inputs)}")
        if self.has_bias and inputs[2].lens != prod.lens[-1:]:
            raise ShapeError(f"{self}: bias {inputs[2]} must be [{prod.lens[-1]}]")
        for r in inputs[2 + self.has_bias:]:
            if r.lens != out.lens:
                raise ShapeError(f"{self}: residual {r} must match the output {out}")
        return out

    def compute(self, args):
        y = super().compute(args[:2])
        if self.out_lens:
            y = y.reshape(self.out_lens)
        if self.has_bias:
            y = y + args[2].astype(y.dtype)
        return apply_chain(y, self.activations, args[2 + self.has_bias:], args[0].dtype)


@register_op
class PoolingChannelsLast(Pooling):
    """`pooling` over a channels-last tensor: N, *spatial, C in and out."""

    name = "pooling_channels_last"

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if x.ndim < 3:
            raise ShapeError(f"{self}: input {x} must be N-spatial-C")
        return _last(super().compute_shape([_first(x)]))

    def compute(self, args):
        (x,) = args
        y = super().compute([x.transpose(to_channels_first(x.ndim))])
        return np.ascontiguousarray(y.transpose(to_channels_last(x.ndim)))
