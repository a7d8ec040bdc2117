"""Recurrent layers: `rnn`, `gru` and `lstm` (ONNX semantics, sequence-major layout).

Inputs: X[T, batch, in], W[dirs, gates*H, in], R[dirs, gates*H, H], B[dirs, 2*gates*H] (always
present: the frontend supplies zeros), for `lstm` P[dirs, 3*H] (likewise), then the optional
sequence_lens[batch], initial_h[dirs, batch, H] (and for `lstm` initial_c) as the `has_*` flags say.
Results: Y[T, dirs, batch, H], Y_h[dirs, batch, H] (and for `lstm` Y_c). Positions past an item's
sequence length give zeros in Y and leave its state unchanged.

`activations` lists the gate functions of each direction in turn (forward first), lower-case ONNX
names, with one alpha and beta each (the frontend resolves ONNX's defaults).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape, TupleShape

DIRECTIONS = ("forward", "reverse", "bidirectional")


def _sigmoid(x, a, b):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _elu(x, a, b):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1))


ACTIVATIONS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "relu": lambda x, a, b: np.maximum(x, 0),
    "tanh": lambda x, a, b: np.tanh(x),
    "sigmoid": _sigmoid,
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": _elu,
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}


@dataclasses.dataclass(frozen=True)
class RecurrentOp(Op):
    kind = OpKind.OPAQUE
    gates: ClassVar[int] = 1  # gate blocks in W and R
    n_activations: ClassVar[int] = 1  # activation functions per direction
    n_states: ClassVar[int] = 1  # Y_h (and Y_c)
    n_weights: ClassVar[int] = 4  # X, W, R, B (and P)
    unclipped: ClassVar[tuple[int, ...]] = ()  # activations whose input `clip` leaves alone

    hidden_size: int = 0
    direction: str = "forward"
    activations: tuple[str, ...] = ()
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    clip: float | None = None
    has_sequence_lens: bool = False
    has_initial_h: bool = False
    has_initial_c: bool = False

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def _fail(self, msg: str, inputs: Sequence[Shape]) -> ShapeError:
        return ShapeError(f"{self.name}: {msg} (inputs {', '.join(map(str, inputs))})")

    def compute_shape(self, inputs: Sequence[Shape]) -> TupleShape:
        d, h, g = self.num_directions, self.hidden_size, self.gates
        n_opt = self.has_sequence_lens + self.has_initial_h + self.has_initial_c
        if self.direction not in DIRECTIONS or len(inputs) != self.n_weights + n_opt:
            raise self._fail(f"direction {self.direction!r} with {len(inputs)} inputs", inputs)
        if self.has_initial_c and self.n_states < 2:
            raise self._fail("only an lstm has a cell state", inputs)
        n = d * self.n_activations
        if not (len(self.activations) == len(self.activation_alpha) == len(self.activation_beta) == n) \
                or any(a not in ACTIVATIONS for a in self.activations):
            raise self._fail(f"needs {n} known activations with an alpha and beta each, got {self.activations}", inputs)
        x, w, r, b = inputs[:4]
        if x.ndim != 3 or any(s.dtype != x.dtype for s in inputs[1:self.n_weights]):
            raise self._fail("X must be [seq, batch, input] and the weights of its type", inputs)
        t, batch, size = x.lens
        expect = {"W": (w, (d, g * h, size)), "R": (r, (d, g * h, h)), "B": (b, (d, 2 * g * h))}
        if self.n_weights > 4:
            expect["P"] = (inputs[4], (d, 3 * h))
        k = self.n_weights
        if self.has_sequence_lens:
            lens = inputs[k]
            if lens.lens != (batch,) or not lens.dtype.is_int:
                raise self._fail(f"sequence_lens must be integers [{batch}]", inputs)
            k += 1
        for name, flag in (("initial_h", self.has_initial_h), ("initial_c", self.has_initial_c)):
            if flag:
                expect[name] = (inputs[k], (d, batch, h))
                k += 1
        for name, (s, lens) in expect.items():
            if s.lens != lens or s.dtype != x.dtype:
                raise self._fail(f"{name} must be {x.dtype}{list(lens)}, got {s}", inputs)
        y = Shape.of(x.dtype, (t, d, batch, h))
        state = Shape.of(x.dtype, (d, batch, h))
        return TupleShape((y,) + (state,) * self.n_states)

    # -- reference --------------------------------------------------------------------------------
    def compute(self, args):
        x, w, r, b = args[:4]
        extra = list(args[4:self.n_weights])
        rest = list(args[self.n_weights:])
        seq_lens = np.asarray(rest.pop(0)) if self.has_sequence_lens else None
        d, batch, h = self.num_directions, x.shape[1], self.hidden_size
        zeros = np.zeros((d, batch, h), x.dtype)
        init = [rest.pop(0) if self.has_initial_h else zeros]
        if self.n_states > 1:
            init.append(rest.pop(0) if self.has_initial_c else zeros)
        ys, finals = [], []
        for k in range(d):
            na = self.n_activations
            acts = [self._activation(k * na + j, j not in self.unclipped) for j in range(na)]
            gh = self.gates * h
            xw = x @ w[k].T + b[k][:gh]  # every time step's input projection at once
            step = self.make_step(xw, r[k], b[k][gh:], [e[k] for e in extra], acts)
            y, state = _run(x, seq_lens, [s[k] for s in init], step, reverse=self.direction == "reverse" or k == 1)
            ys.append(y)
            finals.append(state)
        y = np.stack(ys, axis=1).astype(x.dtype, copy=False)
        return (y,) + tuple(np.stack([f[j] for f in finals]).astype(x.dtype, copy=False) for j in range(self.n_states))

    def _activation(self, i: int, clipped: bool) -> Callable[[np.ndarray], np.ndarray]:
        fn, a, b = ACTIVATIONS[self.activations[i]], self.activation_alpha[i], self.activation_beta[i]
        if self.clip is None or not clipped:
            return lambda v: fn(v, a, b)
        c = self.clip
        return lambda v: fn(np.clip(v, -c, c), a, b)  # the clip bounds the activations' inputs

    def recurrent_product(self, state: np.ndarray, r) -> np.ndarray:
        """H R^T of one step (a quantized op computes it in integers)."""
        return state @ r.T

    def make_step(self, xw: np.ndarray, r: np.ndarray, rb: np.ndarray, extra: list[np.ndarray],
                  acts: list[Callable]) -> Callable:
        """One direction's step (t, states) -> new states, given X W^T + Wb for every step, R and Rb."""
        raise NotImplementedError


def _run(x: np.ndarray, seq_lens: np.ndarray | None, state: list[np.ndarray], step: Callable,
         reverse: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """Run one direction over time (vectorized over the batch); returns Y[T, batch, H] and the final states."""
    t_len = x.shape[0]
    ys = np.zeros((t_len,) + state[0].shape, x.dtype)
    for t in (range(t_len - 1, -1, -1) if reverse else range(t_len)):
        new = step(t, state)
        if seq_lens is None:
            state = new
            ys[t] = new[0]
        else:  # items whose sequence has ended keep their state and output zeros
            live = (t < seq_lens)[:, None]
            state = [np.where(live, n, s) for n, s in zip(new, state, strict=True)]
            ys[t] = np.where(live, new[0], 0)
    return ys, state


@register_op
class RNN(RecurrentOp):
    """H = f(X Wi^T + H Ri^T + Wbi + Rbi)."""

    name = "rnn"

    def make_step(self, xw, r, rb, extra, acts):
        (f,) = acts
        return lambda t, s: [f(xw[t] + s[0] @ r.T + rb)]


@register_op
class GRU(RecurrentOp):
    """Gates z, r, h: z = f(..), r = f(..), h~ = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh) (or, with
    `linear_before_reset`, g(X Wh^T + r * (H Rh^T + Rbh) + Wbh)); H = (1 - z) * h~ + z * H."""

    name = "gru"
    gates = 3
    n_activations = 2
    linear_before_reset: bool = False

    def make_step(self, xw, r, rb, extra, acts):
        f, g = acts
        h = self.hidden_size
        r_zr, r_h, rb_zr, rb_h = r[:2 * h], r[2 * h:], rb[:2 * h], rb[2 * h:]

        def step(t, s):
            (state,) = s
            zr = xw[t, :, :2 * h] + state @ r_zr.T + rb_zr
            z, reset = f(zr[:, :h]), f(zr[:, h:])
            if self.linear_before_reset:
                cand = g(xw[t, :, 2 * h:] + reset * (state @ r_h.T + rb_h))
            else:
                cand = g(xw[t, :, 2 * h:] + (reset * state) @ r_h.T + rb_h)
            return [(1 - z) * cand + z * state]

        return step


@register_op
class LSTM(RecurrentOp):
    """Gates i, o, f, c with peepholes P (i, o, f): C = f * C + i * g(..), H = o * h(C). With
    `input_forget` the forget gate is 1 - i."""

    name = "lstm"
    gates = 4
    n_activations = 3
    n_states = 2
    n_weights = 5
    unclipped = (2,)  # as in ONNX Runtime, clip bounds the gates' inputs, not the cell state fed to h
    input_forget: bool = False

    def make_step(self, xw, r, rb, extra, acts):
        f, g, hf = acts
        h = self.hidden_size
        (p,) = extra
        p_i, p_o, p_f = p[:h], p[h:2 * h], p[2 * h:]

        def step(t, s):
            state, cell = s
            gates = xw[t] + self.recurrent_product(state, r) + rb
            i = f(gates[:, :h] + p_i * cell)
            forget = 1 - i if self.input_forget else f(gates[:, 2 * h:3 * h] + p_f * cell)
            cell = forget * cell + i * g(gates[:, 3 * h:])
            o = f(gates[:, h:2 * h] + p_o * cell)
            return [o * hf(cell), cell]

        return step
