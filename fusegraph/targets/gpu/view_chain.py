"""Chains of movement ops folded into the library call that reads their result, as one strided view.

torch's MultiheadAttention export reaches its q, k and v through reshape -> transpose -> reshape ->
slice -> reshape -> transpose -> contiguous -> reshape from the packed in-projection. Step by step,
two of those reshapes cannot be views (they merge dims of different strides) and copy, twice per
operand and layer; yet the chain's result, [N, H, L, D], is a plain strided view of the projection
(ViT-B/16, issue 23). scaled_dot_product_attention takes any strides with a unit last one, so the
attention pattern takes the chain's base as its input and the lowering composes the chain:

* `compose` follows a chain on (size, stride) modes: each dim is a list of modes, outer first, so an
  intermediate dim that no single stride describes (a copy, step by step) is still exact; the chain
  is a view when every final dim's modes merge into one;
* when they do not (or the base's strides at run time forbid it), `apply` runs the ops as the view
  steps would have, copies included: the fold never changes a result, only the copies it saves.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ...ir.module import Instruction

CHAIN_OPS = ("reshape", "squeeze", "unsqueeze", "flatten", "transpose", "slice", "contiguous")
RESHAPES = ("reshape", "squeeze", "unsqueeze", "flatten")
Mode = tuple[int, int]  # (size, stride)


def _merged(modes: list[Mode]) -> list[Mode]:
    """`modes` without size-1 modes, neighbours merged where the outer one steps over the inner."""
    out: list[Mode] = []
    for size, stride in modes:
        if size == 1:
            continue
        if out and out[-1][1] == size * stride:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def _reshaped(dims: list[list[Mode]], lens: tuple[int, ...]) -> list[list[Mode]] | None:
    queue = deque(m for d in dims for m in _merged(d))
    out: list[list[Mode]] = []
    for n in lens:
        group: list[Mode] = []
        while n > 1:
            if not queue:
                return None
            size, stride = queue.popleft()
            if size <= n:
                if n % size:
                    return None
                group.append((size, stride))
                n //= size
            else:  # the new dim takes the outer part of this mode; the inner part stays queued
                if size % n:
                    return None
                group.append((n, stride * (size // n)))
                queue.appendleft((size // n, stride))
                n = 1
        out.append(group)
    return out if not queue else None


def compose(lens, strides, chain) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(sizes, strides, element offset) of `chain` applied to a tensor of `lens` and `strides`, when
    the result is one strided view of it; else None. `chain`: (op, output lens) pairs, in order."""
    dims: list[list[Mode]] = [[(n, s)] for n, s in zip(lens, strides)]
    offset = 0
    for op, out_lens in chain:
        if op.name in RESHAPES:
            dims = _reshaped(dims, tuple(out_lens))
            if dims is None:
                return None
        elif op.name == "transpose":
            dims = [dims[p] for p in op.perm]
        elif op.name == "slice":
            for a, s, st in zip(op.axes, op.starts, op.steps):
                m = _merged(dims[a])
                if len(m) > 1 or st < 1:
                    return None
                stride = m[0][1] if m else 0
                offset += s * stride
                dims[a] = [(out_lens[a], stride * st)]
        elif op.name != "contiguous":  # contiguous: the reader takes strides
            return None
    final = [_merged(d) for d in dims]
    if any(len(m) > 1 for m in final):
        return None
    return (tuple(out_lens) if chain else tuple(lens), tuple(m[0][1] if m else 1 for m in final), offset)


def apply(x: Any, chain) -> Any:
    """`chain` on the torch tensor `x`: one strided view when `compose` finds it, else op by op."""
    if not chain:
        return x
    found = compose(tuple(x.shape), x.stride(), chain)
    if found is not None:
        sizes, strides, offset = found
        return x.as_strided(sizes, strides, x.storage_offset() + offset)
    for op, out_lens in chain:
        if op.name in RESHAPES:
            x = x.reshape(tuple(out_lens))
        elif op.name == "transpose":
            x = x.permute(tuple(op.perm))
        elif op.name == "contiguous":
            x = x.contiguous()
        else:
            index = [slice(None)] * x.dim()
            for a, s, e, st in zip(op.axes, op.starts, op.ends, op.steps):
                index[a] = slice(s, e, st)
            x = x[tuple(index)]
    return x


def _chain_of(x: Instruction) -> list[Instruction]:
    """The movement instructions from `x` back towards its producer, `x` first."""
    path = []
    while x.op.name in CHAIN_OPS and (x.op.name != "slice" or all(s > 0 for s in x.op.steps)):
        if x.module is not None and any(o is x for o in x.module.outputs):
            break
        path.append(x)
        x = x.inputs[0]
    return path


def fold_chains(values: list[Instruction], readers: set[int]) -> tuple[list[Instruction], list, list[Instruction]]:
    """For `values` (read only by the instructions `readers`): (each one's chain base, each one's chain
    as (op, out lens) pairs from the base, the instructions folded). An instruction is folded
    only when every reader of it is folded too or in `readers` (no one else needs its value)."""
    paths = [_chain_of(v) for v in values]
    while True:
        folded = {i.uid for p in paths for i in p}
        inside = folded | readers
        cut = [next((k for k, i in enumerate(p) if any(u.uid not in inside for u in i.users)), len(p)) for p in paths]
        if all(c == len(p) for c, p in zip(cut, paths)):
            break
        paths = [p[:c] for c, p in zip(cut, paths)]
    bases = [p[-1].inputs[0] if p else v for p, v in zip(paths, values)]
    chains = [[(i.op, i.shape.lens) for i in reversed(p)] for p in paths]
    return bases, chains, list({i.uid: i for p in paths for i in p}.values())
