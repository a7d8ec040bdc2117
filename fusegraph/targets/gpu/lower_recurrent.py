"""Lowerings of the recurrent layers (`rnn`, `gru`, `lstm`: ops/rnn.py) as torch ops on the device.

One direction at a time: every time step's input projection X W^T + Wb in one product, then per
time step the recurrent product H R^T and the gates, exactly as the reference's `make_step` writes
them (same gate order, peepholes, clip on the gates' inputs, `linear_before_reset`, `input_forget`),
with items past their sequence length keeping their state and giving zeros. The time loop is a
Python loop over the static sequence length, so a CUDA graph captures it whole (silero-vad's decoder
is one step of one LSTM cell): no host round trip. float16/bfloat16 layers compute in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ops.rnn import RecurrentOp
from .device import torch
from .lowering import lowering

# ONNX activation name -> fn(torch, x, alpha, beta), as ops/rnn.ACTIVATIONS computes it
_ACTIVATIONS: dict[str, Callable[[Any, Any, float, float], Any]] = {
    "relu": lambda t, x, a, b: t.relu(x),
    "tanh": lambda t, x, a, b: t.tanh(x),
    "sigmoid": lambda t, x, a, b: t.sigmoid(x),
    "affine": lambda t, x, a, b: a * x + b,
    "leakyrelu": lambda t, x, a, b: t.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda t, x, a, b: t.where(x > a, x, t.zeros_like(x)),
    "scaledtanh": lambda t, x, a, b: a * t.tanh(b * x),
    "hardsigmoid": lambda t, x, a, b: t.clamp(a * x + b, 0, 1),
    "elu": lambda t, x, a, b: t.where(x >= 0, x, a * (t.exp(t.clamp(x, max=0)) - 1)),
    "softsign": lambda t, x, a, b: x / (1 + t.abs(x)),
    "softplus": lambda t, x, a, b: t.logaddexp(t.zeros_like(x), x),
}


def _activation(t: Any, op: RecurrentOp, i: int, clipped: bool) -> Callable[[Any], Any]:
    fn, a, b = _ACTIVATIONS[op.activations[i]], op.activation_alpha[i], op.activation_beta[i]
    c = op.clip
    if c is None or not clipped:
        return lambda v: fn(t, v, a, b)
    return lambda v: fn(t, t.clamp(v, -c, c), a, b)


def _cell(op: RecurrentOp, acts: list[Callable], r: Any, rb: Any, extra: list[Any]) -> Callable:
    """(x W^T + Wb of one time step, states) -> new states: the op's reference step, on tensors."""
    h = op.hidden_size
    if op.name == "rnn":
        (f,) = acts
        return lambda xw, s: [f(xw + s[0] @ r.T + rb)]
    if op.name == "gru":
        f, g = acts
        r_zr, r_h, rb_zr, rb_h = r[:2 * h], r[2 * h:], rb[:2 * h], rb[2 * h:]

        def gru(xw, s):
            (state,) = s
            zr = xw[:, :2 * h] + state @ r_zr.T + rb_zr
            z, reset = f(zr[:, :h]), f(zr[:, h:])
            if op.linear_before_reset:  # type: ignore[attr-defined]
                cand = g(xw[:, 2 * h:] + reset * (state @ r_h.T + rb_h))
            else:
                cand = g(xw[:, 2 * h:] + (reset * state) @ r_h.T + rb_h)
            return [(1 - z) * cand + z * state]
        return gru
    f, g, hf = acts
    (p,) = extra
    p_i, p_o, p_f = p[:h], p[h:2 * h], p[2 * h:]

    def lstm(xw, s):
        state, cell = s
        gates = xw + state @ r.T + rb
        i = f(gates[:, :h] + p_i * cell)
        forget = 1 - i if op.input_forget else f(gates[:, 2 * h:3 * h] + p_f * cell)  # type: ignore[attr-defined]
        cell = forget * cell + i * g(gates[:, 3 * h:])
        o = f(gates[:, h:2 * h] + p_o * cell)
        return [o * hf(cell), cell]
    return lstm


@lowering("rnn", "gru", "lstm", mode="value", note="torch: one product for the inputs, one per time step", cublas=True)
def recurrent(ctx, step):
    op: RecurrentOp = step.ins.op
    t = torch()
    na, gh, h = op.n_activations, op.gates * op.hidden_size, op.hidden_size

    def run(x, w, r, b, *rest):
        dtype = x.dtype
        wide = t.float32 if dtype in (t.float16, t.bfloat16) else dtype
        x, w, r, b = (v.to(wide) for v in (x, w, r, b))
        extra = [v.to(wide) for v in rest[:op.n_weights - 4]]
        opt = list(rest[op.n_weights - 4:])
        lens = opt.pop(0) if op.has_sequence_lens else None
        steps, batch = x.shape[0], x.shape[1]
        zeros = t.zeros((op.num_directions, batch, h), dtype=wide, device=x.device)
        init = [opt.pop(0).to(wide) if op.has_initial_h else zeros]
        if op.n_states > 1:
            init.append(opt.pop(0).to(wide) if op.has_initial_c else zeros)
        ys, finals = [], []
        for k in range(op.num_directions):
            acts = [_activation(t, op, k * na + j, j not in op.unclipped) for j in range(na)]
            cell = _cell(op, acts, r[k], b[k][gh:], [e[k] for e in extra])
            xw = x @ w[k].T + b[k][:gh]  # every time step's input projection at once
            state = [s[k] for s in init]
            y = t.zeros((steps, batch, h), dtype=wide, device=x.device)
            reverse = op.direction == "reverse" or k == 1
            for i in (range(steps - 1, -1, -1) if reverse else range(steps)):
                new = cell(xw[i], state)
                if lens is None:
                    state = new
                    y[i] = new[0]
                else:  # items whose sequence has ended keep their state and give zeros
                    live = (lens > i)[:, None]
                    state = [t.where(live, n, s) for n, s in zip(new, state, strict=True)]
                    y[i] = t.where(live, new[0], t.zeros_like(new[0]))
            ys.append(y)
            finals.append(state)
        out = [t.stack(ys, dim=1)] + [t.stack([f[j] for f in finals]) for j in range(op.n_states)]
        return tuple(v.to(dtype) for v in out)
    return run
