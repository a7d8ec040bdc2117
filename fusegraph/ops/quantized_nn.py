"""Quantized layers that ONNX Runtime computes with its own algorithms, not as a chain of
dequantize -> float op -> quantize: `qlinear_softmax` and `dynamic_quantize_lstm`.

Both reproduce ORT's CPU kernels (onnxruntime/contrib_ops/cpu/quantization/qlinear_softmax.cc and
dynamic_quantize_lstm.cc with rnn_helpers.h' quantized ComputeGemm), since that is what the models
that use them were validated against:

    qlinear_softmax    a 256-entry float32 table exp((i - 255 + s/x_scale) * x_scale) (in float64,
                       s = ln(FLT_MAX / D) - 5, keeping the sum finite) indexed by x - max(x) + 255;
                       the row sum accumulated in float32 in order; y = nearbyint(e * floor(1 /
                       y_scale) / sum) + y_zero_point, saturated. The x zero point cancels out.
    dynamic_quantize_lstm  an LSTM whose two products each quantize their float operand (all of X
                       at once, then H at every step) to uint8 with DynamicQuantizeLinear's scale
                       and zero point, multiply exactly in integers by the quantized W / R, and
                       scale the int32 sums by a_scale * w_scale in float32. The gate functions are
                       ORT's MLAS approximations there, so results agree to float rounding only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape
from .rnn import LSTM


@register_op
class QLinearSoftmax(Op):
    """Softmax over the last axis of quantized x. Inputs: x, x_scale, y_scale, y_zero_point (one
    value each); the result has x's type."""

    name = "qlinear_softmax"
    kind = OpKind.OPAQUE

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x = inputs[0]
        if len(inputs) != 4 or x.dtype not in (DType.uint8, DType.int8) or x.ndim < 1:
            raise ShapeError(f"{self}: needs uint8/int8 x and three scalars, got {', '.join(map(str, inputs))}")
        return x

    def compute(self, args):
        x, x_scale, y_scale, y_zp = (np.asarray(a) for a in args)
        d = x.shape[-1]
        bit_shift = np.log(np.float64(np.finfo(np.float32).max) / d)
        if bit_shift > 5:  # ORT reserves 5 bits of headroom for the float32 sum
            bit_shift -= 5
        xs = np.float64(np.float32(x_scale))
        table = np.exp((np.arange(256, dtype=np.float64) - 255 + bit_shift / xs) * xs).astype(np.float32)
        wide = x.astype(np.int32)
        e = table[wide - wide.max(axis=-1, keepdims=True) + 255]
        total = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]  # sequential, as ORT's loop
        mult = np.float32(np.floor(np.float32(1) / np.float32(y_scale)))
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.rint((e * mult) / total) + np.int32(y_zp)
        info = np.iinfo(x.dtype)
        return np.clip(np.nan_to_num(q, nan=info.max), info.min, info.max).astype(x.dtype)


def dynamic_uint8(a: np.ndarray) -> tuple[np.ndarray, np.float32, np.int32]:
    """DynamicQuantizeLinear of float32 `a` (ORT's GetQuantizationParameter + MlasQuantizeLinear):
    the uint8 values, scale and zero point covering [min(a, 0), max(a, 0)]."""
    lo, hi = np.float32(min(a.min(initial=0), 0)), np.float32(max(a.max(initial=0), 0))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.int32(np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)))
    q = np.clip(np.rint(a / scale) + zp, 0, 255).astype(np.int32)
    return q, scale, zp


def quantized_product(a: np.ndarray, w: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """a @ W in ORT's dynamic-quantized GEMM: a to uint8, an exact integer product with W - zp,
    times float32(a_scale * w_scale) (per tensor, or per column of W)."""
    wq, ws, wz = w
    q, scale, zp = dynamic_uint8(a)
    acc = (q - zp).astype(np.int64) @ (wq.astype(np.int64) - wz.astype(np.int64))
    return acc.astype(np.float32) * (scale * ws.astype(np.float32))


@register_op
class DynamicQuantizeLSTM(LSTM):
    """com.microsoft.DynamicQuantizeLSTM. Inputs: X, W[dirs, in, 4H], R[dirs, H, 4H] (quantized,
    transposed against `lstm`'s), B, P (float), W_scale, W_zero_point, R_scale, R_zero_point
    ([dirs] or [dirs, 4H]), then sequence_lens / initial_h / initial_c as the flags say."""

    name = "dynamic_quantize_lstm"
    n_weights = 9

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w, r = inputs[:3]
        params = inputs[5:9]
        if not (w.dtype in (DType.int8, DType.uint8) and r.dtype in (DType.int8, DType.uint8)
                and w.ndim == 3 and r.ndim == 3):
            raise self._fail("W and R must be int8/uint8 [dirs, in, 4H] and [dirs, H, 4H]", inputs)
        for p in params:
            if p.ndim not in (1, 2) or p.lens[0] != w.lens[0]:
                raise self._fail("scales and zero points must be [dirs] or [dirs, 4H]", inputs)
        # the float lstm's shape rule over W and R as it lays them out
        as_float = [x, Shape.of(x.dtype, (w.lens[0], w.lens[2], w.lens[1])),
                    Shape.of(x.dtype, (r.lens[0], r.lens[2], r.lens[1])), *inputs[3:5], *inputs[9:]]
        return LSTM(**self.attributes()).compute_shape(as_float)

    def recurrent_product(self, state, r):
        return quantized_product(state, r)

    def compute(self, args):
        x, w, r, b, p, ws, wz, rs, rz = args[:9]
        rest = list(args[9:])
        seq_lens = np.asarray(rest.pop(0)) if self.has_sequence_lens else None
        d, batch, h = self.num_directions, x.shape[1], self.hidden_size
        zeros = np.zeros((d, batch, h), x.dtype)
        init = [rest.pop(0) if self.has_initial_h else zeros, rest.pop(0) if self.has_initial_c else zeros]
        ys, finals = [], []
        for k in range(d):
            acts = [self._activation(3 * k + j, j not in self.unclipped) for j in range(3)]
            t_len, _, size = x.shape
            lens = np.full(batch, t_len) if seq_lens is None else seq_lens
            xk = _reverse_within(x, lens) if self.direction == "reverse" or k == 1 else x
            xw = quantized_product(xk.reshape(t_len * batch, size), (w[k], ws[k], wz[k])).reshape(t_len, batch, 4 * h)
            # ORT adds Wb + Rb once, after both products
            step = self.make_step(xw, (r[k], rs[k], rz[k]), b[k][:4 * h] + b[k][4 * h:], [p[k]], acts)
            y, state = _run_as_ort(xw, seq_lens, [s[k] for s in init], step, self.direction == "reverse" or k == 1)
            ys.append(y)
            finals.append(state)
        y = np.stack(ys, axis=1).astype(x.dtype, copy=False)
        return (y,) + tuple(np.stack([f[j] for f in finals]).astype(x.dtype, copy=False) for j in range(2))


def _reverse_within(x: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Each batch item's first lens[b] steps reversed (ReverseSequence), the rest left."""
    t = np.arange(x.shape[0])[:, None]
    src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)
    return np.take_along_axis(x, src[:, :, None], axis=0)


def _run_as_ort(xw: np.ndarray, seq_lens: np.ndarray | None, state: list[np.ndarray], step,
                reverse: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """One direction as ORT's quantized LSTM runs it: a reverse direction runs forward over each
    item's reversed sequence (xw is already reversed), and an item whose sequence has ended has
    zero H and C from then on, since ORT quantizes the whole [batch, H] of every step with one
    scale and those rows take part. Returns Y[T, batch, H] (zeros past each length) and the states
    at each item's last step."""
    t_len, batch = xw.shape[:2]
    lens = np.full(batch, t_len) if seq_lens is None else np.asarray(seq_lens)
    ys = np.zeros((t_len,) + state[0].shape, state[0].dtype)
    finals = [s.copy() for s in state]
    for t in range(t_len):
        live = (t < lens)[:, None]
        new = step(t, state)
        state = [np.where(live, n, 0).astype(n.dtype) for n in new]
        finals = [np.where(live, n, f) for n, f in zip(new, finals, strict=True)]
        ys[t] = state[0]
    if reverse:
        ys = _reverse_within(ys, lens)
    return ys, finals
