"""oneDNN kernels' epilogues: an epilogue chain as post-ops, as far as oneDNN computes them exactly,
the rest in numpy; the exact form a step takes where its input holds a NaN or an infinity; and a
step's C calls in either form (native_program.py, native_finite.py)."""

from __future__ import annotations

import math

import numpy as np

from ..ops import RESIDUAL
from .small import numpy_chain


def _destination(out: np.ndarray | None, lens, dtype, residual: np.ndarray | None) -> np.ndarray:
    """The buffer a oneDNN kernel writes (`out`, or a fresh one where the plan gave none), holding
    the residual where there is one: oneDNN's Sum post-op adds onto the destination (plan_memory
    often planned the two in one buffer already)."""
    if out is None:
        out = np.empty(lens, dtype)
    if residual is not None and (residual.ctypes.data != out.ctypes.data or residual.strides != out.strides):
        np.copyto(out, residual)
    return out


# epilogue activation -> the oneDNN eltwise post-op (onednn.postops.ELTWISE_KINDS) and whether it
# takes the step's alpha/beta (the others keep oneDNN's defaults, which are ONNX's)
_ELTWISE = {"relu": ("relu", False), "leaky_relu": ("leaky_relu", True), "clip": ("clip", True),
            "sigmoid": ("sigmoid", False), "tanh": ("tanh", False), "silu": ("silu", False),
            "hard_sigmoid": ("hardsigmoid", True), "hard_swish": ("hardswish", False),
            "gelu_erf": ("gelu_erf", False), "linear": ("linear", True)}
# oneDNN's relu (slope 0), clip and hardsigmoid are vmaxps/vminps, which give the bound for a NaN where
# the reference gives NaN: exact on finite inputs only (their NaN-keeping forms, e.g. relu as elu with
# alpha 0 and abs, cost up to twice the convolution on the 2-core VM)
_FINITE_ONLY = frozenset({"relu", "clip", "hard_sigmoid"})


def _exact(name: str, alpha: float, finite_input: bool) -> bool:
    """Whether oneDNN computes the step as the reference does (for any input, or for finite ones)."""
    if name not in _ELTWISE:
        return False
    return finite_input or not (name in _FINITE_ONLY or name == "leaky_relu" and alpha == 0)


def finite(*arrays: np.ndarray) -> bool:
    """No NaN and no infinity in any of `arrays`: each one's sum of squares is finite. One BLAS dot
    product over the memory (3-4x faster than numpy's sum: 0.06 ms for 800K floats); a sum that
    overflows (values past ~1e16) only sends the caller down its slower exact path."""
    with np.errstate(over="ignore", invalid="ignore"):
        for a in arrays:
            v = a.ravel(order="K")  # a view for a permuted dense tensor (channels-last)
            if not math.isfinite(np.dot(v, v)):
                return False
    return True


class Chain:
    """An epilogue's steps split where oneDNN stops computing them exactly: `head` as the primitive's
    post-ops (its residual step a Sum onto the destination's contents), the rest applied after the
    product by `after(y, residuals)`, in place; `residual_first`: the residual is in the head, so the
    destination must hold it before the primitive runs. `finite_input`: for inputs known to hold no
    NaN or infinity (`finite()`), where all of oneDNN's steps are exact."""

    def __init__(self, activations, post: bool = True, finite_input: bool = False):
        from .. import onednn

        cut = next((i for i, (name, a, _) in enumerate(activations)
                    if name != RESIDUAL and not _exact(name, a, finite_input)), len(activations)) if post else 0
        head, tail = activations[:cut], activations[cut:]
        self.post_ops = []
        for name, a, b in head:
            if name == RESIDUAL:
                self.post_ops.append(onednn.Sum())
                continue
            kind, takes = _ELTWISE[name]
            self.post_ops.append(onednn.Eltwise(kind, a, b) if takes else onednn.Eltwise(kind))
        self.residual_first = any(name == RESIDUAL for name, _, _ in head)
        self.residual_after = any(name == RESIDUAL for name, _, _ in tail)
        self.after = numpy_chain(tail) if tail else None
        self.tail_names = tuple(name for name, _, _ in tail)

    def destination(self, out: np.ndarray | None, lens, dtype, args) -> tuple[np.ndarray, tuple]:
        """The buffer the primitive writes (see `_destination`) and the residuals `after` adds."""
        if not self.residual_after:
            return _destination(out, lens, dtype, args[-1] if self.residual_first else None), ()
        out = _destination(out, lens, dtype, None)
        res = args[-1]
        return out, (res.copy() if np.shares_memory(res, out) else res,)  # the primitive overwrites out

    def finish(self, out: np.ndarray, residuals: tuple) -> None:
        if self.after is not None:
            self.after(out, residuals)


def native_form(pick, a: np.ndarray | None, o: np.ndarray | None, args, out: np.ndarray, n_res: int):
    """The C calls of a oneDNN kernel step with an epilogue chain (native_program.py): on guarded
    inputs (`pick_form`), the fast form where they hold no NaN or infinity, else the exact one (a
    relu tail in C), or, where the exact one has no C form, a guard that stops the table for the
    step's Python form; None where the fast form has none or an operand would need a copy."""
    from ..native_finite import finite_or_exact

    chain, prim, checked, slow = pick.native
    if a is None or o is None:
        return None
    fast = _calls(chain, prim, a, o, args, out)
    if fast is None or not checked:
        return fast
    return finite_or_exact([args[0], *args[len(args) - n_res:]], fast, _calls(*slow, a, o, args, out))


def _calls(chain: Chain, prim, a: np.ndarray, o: np.ndarray, args, out: np.ndarray):
    """One form's calls: the residual copied into the destination where the primitive sums onto
    it, the primitive, and a relu tail (the exact chain's); None where a part of it is numpy's."""
    from ..native_finite import relu
    from ..native_program import copy_any, primitive_call

    calls = []
    if chain.residual_first:
        res = args[-1]
        if res.ctypes.data != out.ctypes.data or res.strides != out.strides:
            c = copy_any(out, res)  # (a transposed residual: through a table of offsets)
            if c is None:
                return None
            calls += c
    call = primitive_call(prim, a, out=o)
    calls.append(call)
    if chain.after is None:
        return calls
    tail = relu(out, call[0][1]) if chain.tail_names == ("relu",) and not chain.residual_after else None
    return None if tail is None else [*calls, tail]


def pick_form(activations, post: bool, prim, make_exact, constants, n_res: int):
    """pick(args) -> (Chain, primitive) for a run: all of oneDNN's post-ops when the input (and the
    residual) hold no NaN or infinity, else the primitive `make_exact()` builds, which leaves the
    steps oneDNN would get wrong to numpy (compiled once, in place)."""
    fast, exact = Chain(activations, post, finite_input=True), Chain(activations, post)
    if len(fast.post_ops) == len(exact.post_ops):
        return _pick(lambda args: (fast, prim), (fast, prim, False, None))
    slow = (exact, make_exact())
    if not finite(*(c for c in constants if c is not None)):  # NaN weights: every run is the exact one
        return _pick(lambda args: slow, (*slow, False, None))
    return _pick(lambda args: (fast, prim) if finite(args[0], *args[len(args) - n_res:]) else slow,
                 (fast, prim, True, slow))


def _pick(pick, native: tuple):
    """`pick` knowing its C form: (chain, primitive, whether the inputs' finiteness is checked first,
    and the (chain, primitive) of the exact form then)."""
    pick.native = native
    return pick
