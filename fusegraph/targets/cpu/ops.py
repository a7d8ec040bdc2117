"""IR ops the cpu target introduces: a convolution with its epilogue fused (bias, residual adds, one
activation), the shape oneDNN's post-ops take. Each has a numpy reference, so a program the cpu
pipeline rewrote still runs on the reference target."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.op import OpKind, register_op
from ...ir.shape import Shape
from ...ops.conv import Convolution
from ...ops.scalar import evaluate, parse_expr

# activation name -> scalar body over x0 with the op's alpha/beta (the oneDNN eltwise it maps to)
ACTIVATIONS = {
    "": "x0",
    "relu": "max(x0, 0)",
    "leaky_relu": "where(ge(x0, 0), x0, mul(x0, {alpha}))",
    "clip": "min(max(x0, {alpha}), {beta})",
    "sigmoid": "sigmoid(x0)",
    "tanh": "tanh(x0)",
    "silu": "mul(x0, sigmoid(x0))",
    "hard_sigmoid": "max(min(add(mul(x0, {alpha}), {beta}), 1), 0)",
    "hard_swish": "mul(x0, max(min(add(mul(x0, 0.16666666666666666), 0.5), 1), 0))",
    "gelu_erf": "mul(mul(x0, 0.5), add(erf(mul(x0, 0.7071067811865476)), 1))",
}


def activation_expr(name: str, alpha: float, beta: float):
    return parse_expr(ACTIVATIONS[name].format(alpha=repr(float(alpha)), beta=repr(float(beta))))


@register_op
class ConvEpilogue(Convolution):
    """act(conv(x, w) + bias + residual_1 + ...): inputs x, w, then the bias (per output channel,
    shape [M]) if `has_bias`, then `n_residual` tensors of the output's shape."""

    name = "conv_epilogue"
    kind = OpKind.CONV
    has_bias: bool = False
    n_residual: int = 0
    activation: str = ""
    alpha: float = 0.0
    beta: float = 0.0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        out = super().compute_shape(inputs[:2])
        if self.activation not in ACTIVATIONS:
            raise ShapeError(f"{self}: unknown activation {self.activation!r}")
        if len(inputs) != 2 + self.has_bias + self.n_residual:
            raise ShapeError(f"{self}: expects {2 + self.has_bias + self.n_residual} inputs, got {len(inputs)}")
        if self.has_bias and inputs[2].lens != (out.lens[1],):
            raise ShapeError(f"{self}: bias {inputs[2]} must be [{out.lens[1]}]")
        for r in inputs[2 + self.has_bias:]:
            if r.lens != out.lens:
                raise ShapeError(f"{self}: residual {r} must match the output {out}")
        return out

    def compute(self, args):
        y = super().compute(args[:2])
        rest = args[2:]
        if self.has_bias:
            y = y + rest[0].reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype)
            rest = rest[1:]
        for r in rest:
            y = y + r
        y = evaluate(activation_expr(self.activation, self.alpha, self.beta), [y])
        return np.asarray(y, dtype=args[0].dtype)


