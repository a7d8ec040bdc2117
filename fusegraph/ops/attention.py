"""Attention ops that do not decompose into dot/softmax: the linear-attention recurrence.

(Softmax attention has no op of its own: the frontend spells it as dot -> pointwise -> softmax ->
dot, which fusion passes match.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape, TupleShape


@register_op
class LinearAttention(Op):
    """ONNX LinearAttention's recurrence over heads already split out, computed in float32:

        S = exp(g_t) * S                      (gated)
        v_t = beta_t * (v_t - S^T k_t)        (delta)
        S = S + k_t (x) v_t;  o_t = scale * q_t^T S   (kv heads shared by groups of q heads)

    Inputs: q [B,Hq,T,dk], k [B,Hkv,T,dk], v [B,Hkv,T,dv], state [B,Hkv,dk,dv], then decay
    [B,Hkv,T,dk or 1] when `gated` and beta [B,Hkv or 1,T,1] when `delta`. Outputs: o [B,Hq,T,dv]
    in q's dtype and the final state in the input state's dtype. A chunked kernel may replace the
    sequential loop; the result is defined by the loop."""

    name = "linear_attention"
    kind = OpKind.OPAQUE
    gated: bool = False
    delta: bool = False
    scale: float = 1.0

    def compute_shape(self, inputs: Sequence[Shape]) -> TupleShape:
        if len(inputs) != 4 + self.gated + self.delta or any(s.ndim != 4 for s in inputs):
            raise ShapeError(f"{self}: expects {4 + self.gated + self.delta} rank-4 inputs, got {inputs}")
        q, k, v, state = inputs[:4]
        b, hq, t, dk = q.lens
        hkv, dv = k.lens[1], v.lens[3]
        ok = (k.lens == (b, hkv, t, dk) and v.lens == (b, hkv, t, dv) and state.lens == (b, hkv, dk, dv)
              and hkv > 0 and hq % hkv == 0)
        extras = list(inputs[4:])
        if self.gated:
            g = extras.pop(0)
            ok = ok and g.lens[:3] == (b, hkv, t) and g.lens[3] in (1, dk)
        if self.delta:
            ok = ok and extras[0].lens[0] == b and extras[0].lens[1] in (1, hkv) and extras[0].lens[2:] == (t, 1)
        if not ok:
            raise ShapeError(f"{self}: inconsistent shapes {[str(s) for s in inputs]}")
        return TupleShape((Shape.of(q.dtype, (b, hq, t, dv)), Shape.of(state.dtype, state.lens)))

    def compute(self, args):
        q, k, v, state, *extras = (np.asarray(a, np.float32) for a in args)
        decay = extras.pop(0) if self.gated else None
        beta = extras[0] if self.delta else None
        group = q.shape[1] // k.shape[1]
        out = np.zeros((*q.shape[:3], v.shape[3]), np.float32)
        for i in range(q.shape[2]):
            if decay is not None:
                state = state * np.exp(decay[:, :, i, :])[..., None]
            v_t = v[:, :, i, :]
            if beta is not None:
                v_t = beta[:, :, i, :] * (v_t - np.einsum("bhdm,bhd->bhm", state, k[:, :, i, :]))
            state = state + k[:, :, i, :, None] * v_t[:, :, None, :]
            shared = np.repeat(state, group, axis=1) if group > 1 else state
            out[:, :, i, :] = self.scale * np.einsum("bhd,bhdm->bhm", q[:, :, i, :], shared)
        return out.astype(np.asarray(args[0]).dtype), state.astype(np.asarray(args[3]).dtype)
