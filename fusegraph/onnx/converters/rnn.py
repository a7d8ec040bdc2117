"""RNN, GRU and LSTM -> `rnn`, `gru`, `lstm`.

The ops see one layout (sequence-major), explicit activations with their alpha/beta, and always a
bias (and LSTM peepholes): absent ones become zeros here. `layout=1` (batch-major) becomes
transposes around the op.
"""

from __future__ import annotations

import numpy as np

from ..registry import converter

# Alpha/beta defaults are those of the ONNX operators of the same name.
_DEFAULTS = {
    "affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0),
}
# Which of alpha and beta each function takes: the attribute lists hold only those, in order.
_USES = {
    "affine": (True, True), "leakyrelu": (True, False), "thresholdedrelu": (True, False),
    "scaledtanh": (True, True), "hardsigmoid": (True, True), "elu": (True, False),
}
_KNOWN = {"relu", "tanh", "sigmoid", "softsign", "softplus"} | set(_USES)


def _activations(ctx, node, defaults: list[str], num_directions: int):
    names = [a.lower() for a in node.attr("activations", defaults * num_directions)]
    if len(names) == len(defaults) and num_directions == 2:
        names = names * 2  # one set given for both directions
    if len(names) != len(defaults) * num_directions:
        raise ctx.error(f"expected {len(defaults) * num_directions} activations, got {names}")
    unknown = [a for a in names if a not in _KNOWN]
    if unknown:
        raise ctx.error(f"unsupported activation(s) {unknown}")
    alphas = list(node.attr("activation_alpha", []))
    betas = list(node.attr("activation_beta", []))
    alpha, beta = [], []
    for name in names:
        use_a, use_b = _USES.get(name, (False, False))
        da, db = _DEFAULTS.get(name, (0.0, 0.0))
        alpha.append(float(alphas.pop(0)) if use_a and alphas else da)
        beta.append(float(betas.pop(0)) if use_b and betas else db)
    return tuple(names), tuple(alpha), tuple(beta)


def recurrent(ctx, node, args, op: str, gates: int, defaults: list[str], quant_params=(), **extra_attrs):
    """`quant_params` (a quantized lstm's scales and zero points) follow the weights."""
    args = list(args) + [None] * (8 - len(args))
    x, w, r, b, seq_lens, h0 = args[:6]
    c0, p = args[6:8] if gates == 4 else (None, None)
    direction = node.attr("direction", "forward")
    d = 2 if direction == "bidirectional" else 1
    if not w.shape.is_dynamic and w.shape.ndim == 3:
        hidden = node.attr("hidden_size", w.shape.lens[1] // gates)
    else:
        hidden = node.attr("hidden_size")
    acts, alpha, beta = _activations(ctx, node, defaults, d)
    batch_major = node.attr("layout", 0) == 1
    if batch_major:  # [batch, seq, in] -> [seq, batch, in]; states [batch, dirs, H] -> [dirs, batch, H]
        x = ctx.add("transpose", x, perm=(1, 0, 2))
        h0, c0 = (None if s is None else ctx.add("transpose", s, perm=(1, 0, 2)) for s in (h0, c0))
    dtype = x.shape.dtype
    if b is None:
        b = ctx.literal(np.zeros((d, 2 * gates * hidden), dtype.np))
    weights = [x, w, r, b]
    if gates == 4:
        weights.append(p if p is not None else ctx.literal(np.zeros((d, 3 * hidden), dtype.np)))
    optional = [v for v in (seq_lens, h0, c0) if v is not None]
    out = ctx.add(op, *weights, *quant_params, *optional, hidden_size=hidden, direction=direction, activations=acts,
                  activation_alpha=alpha, activation_beta=beta, clip=_clip(node),
                  has_sequence_lens=seq_lens is not None, has_initial_h=h0 is not None,
                  has_initial_c=c0 is not None, **extra_attrs)
    results = ctx.tuple_elems(out, 3 if gates == 4 else 2)
    if batch_major:  # Y [seq, dirs, batch, H] -> [batch, seq, dirs, H]
        results = [ctx.add("transpose", results[0], perm=(2, 0, 1, 3))] + [
            ctx.add("transpose", s, perm=(1, 0, 2)) for s in results[1:]]
    return results[:max(len(node.outputs), 1)]


def _clip(node) -> float | None:
    clip = node.attr("clip", None)
    return None if clip is None else float(clip)


@converter("RNN")
def rnn(ctx, node, args):
    return recurrent(ctx, node, args, "rnn", 1, ["tanh"])


@converter("GRU")
def gru(ctx, node, args):
    return recurrent(ctx, node, args, "gru", 3, ["sigmoid", "tanh"],
                      linear_before_reset=bool(node.attr("linear_before_reset", 0)))


@converter("LSTM")
def lstm(ctx, node, args):
    return recurrent(ctx, node, args, "lstm", 4, ["sigmoid", "tanh", "tanh"],
                      input_forget=bool(node.attr("input_forget", 0)))

