"""LSTM with its weights prepared once: W and R transposed, the two biases summed, the input
projection of every time step one product; a step is then one product and the gate math over the
sigmoid gates at once. The op's reference re-derives all of that per call (~100 us per step of
silero-vad's 128-unit cell, about half of it here). Other recurrent layers and LSTM variants (clip,
sequence_lens, other activations, coupled input-forget) keep the reference."""

from __future__ import annotations

import numpy as np

from ....ir.module import Instruction
from ..lowering import Kernel, LowerContext, lowering, reference_kernel

DEFAULT_ACTIVATIONS = ("sigmoid", "tanh", "tanh")


@lowering("lstm")
def lstm(ins: Instruction, ctx: LowerContext) -> Kernel:
    op = ins.op
    consts = [ctx.const(i) for i in ins.inputs[1:5]]  # W, R, B, P
    plain = (op.clip is None and not op.has_sequence_lens and not op.input_forget
             and op.activations == DEFAULT_ACTIVATIONS * op.num_directions)
    if not plain or any(c is None for c in consts) or ins.inputs[0].shape.is_dynamic:
        return reference_kernel(ins, ctx)
    w, r, b, p = consts
    h, dtype = op.hidden_size, ins.inputs[0].shape.dtype.np
    dirs = []
    for k in range(op.num_directions):
        peep = p[k] if np.any(p[k]) else None
        wt, rt = np.ascontiguousarray(w[k].T), np.ascontiguousarray(r[k].T)
        # one step: [x_t, h] @ [W^T; R^T] is one product (what a single-step cell, like a streaming
        # VAD's, runs per call); longer sequences project every x_t at once first
        dirs.append((wt, rt, np.concatenate([wt, rt]), b[k][:4 * h] + b[k][4 * h:], peep,
                     op.direction == "reverse" or k == 1))
    t_len, batch, _ = ins.inputs[0].shape.lens
    first_state = 5 + op.has_sequence_lens

    def run(args, out):
        if t_len == 1 and len(dirs) == 1 and dirs[0][4] is None:
            return _one_step(args)
        with np.errstate(over="ignore"):  # exp(-g) overflows to inf for very negative g: sigmoid 0
            return _run(args)

    def _one_step(args):
        """One time step, one direction, no peepholes (a streaming model's cell): in place, the
        sigmoids as 0.5 * (1 + tanh(x / 2)) (no overflow to guard)."""
        _, _, wrt, bias, _, _ = dirs[0]
        xh = np.empty((batch, wrt.shape[0]), dtype)
        n_in = wrt.shape[0] - h
        xh[:, :n_in] = args[0][0]
        if op.has_initial_h:
            xh[:, n_in:] = args[first_state][0]
        else:
            xh[:, n_in:] = 0
        g = np.matmul(xh, wrt)
        g += bias
        s = g[:, :3 * h]  # gates i, o, f
        np.multiply(s, 0.5, out=s)
        np.tanh(s, out=s)
        s += 1
        s *= 0.5
        cell = np.tanh(g[:, 3 * h:])
        cell *= s[:, :h]
        if op.has_initial_c:
            cell += s[:, 2 * h:] * args[first_state + op.has_initial_h][0]
        state = np.tanh(cell)
        state *= s[:, h:2 * h]
        return state.reshape(1, 1, batch, h), state[None], cell[None]

    def _run(args):
        x = args[0]
        zeros = np.zeros((batch, h), dtype)
        y = np.empty((t_len, len(dirs), batch, h), dtype)
        hs, cs = [], []
        for k, (wt, rt, wrt, bias, peep, reverse) in enumerate(dirs):
            state = args[first_state][k] if op.has_initial_h else zeros
            cell = args[first_state + op.has_initial_h][k] if op.has_initial_c else zeros
            if t_len > 1:
                xw = (x.reshape(t_len * batch, -1) @ wt + bias).reshape(t_len, batch, 4 * h)
            for t in range(t_len - 1, -1, -1) if reverse else range(t_len):
                if t_len > 1:
                    g = xw[t] + state @ rt  # gates i, o, f, c
                else:
                    g = np.concatenate((x[0], state), axis=1) @ wrt
                    g += bias
                if peep is None:
                    s = 1 / (1 + np.exp(-g[:, :3 * h]))
                    i, o, f = s[:, :h], s[:, h:2 * h], s[:, 2 * h:]
                    cell = f * cell + i * np.tanh(g[:, 3 * h:])
                else:
                    i = 1 / (1 + np.exp(-(g[:, :h] + peep[:h] * cell)))
                    f = 1 / (1 + np.exp(-(g[:, 2 * h:3 * h] + peep[2 * h:] * cell)))
                    cell = f * cell + i * np.tanh(g[:, 3 * h:])
                    o = 1 / (1 + np.exp(-(g[:, h:2 * h] + peep[h:2 * h] * cell)))
                state = o * np.tanh(cell)
                y[t, k] = state
            hs.append(state)
            cs.append(cell)
        return y, np.stack(hs).astype(dtype, copy=False), np.stack(cs).astype(dtype, copy=False)

    return run
