"""Index spaces of generated kernels, from sizes and element strides alone (no torch): the iteration
order that writes the output contiguously, and the dims that collapse into one.

A kernel over a tensor of lens L iterates one flat index in the output's memory order. Dims are
ordered by the output's strides (largest first) and neighbours merged when every operand steps
through them as one dim; an operand that then walks the output's flat index exactly is "flat" and
is addressed without index arithmetic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class IndexSpace:
    sizes: tuple[int, ...]                 # iteration dims, slowest first
    strides: tuple[tuple[int, ...], ...]   # per operand (output first), per iteration dim
    flat: tuple[bool, ...]                 # per operand: addressed by the flat index itself

    @property
    def ndim(self) -> int:
        return len(self.sizes)


def memory_order(sizes: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Dims ordered slowest to fastest in memory (stable for equal strides; size-1 dims first)."""
    return sorted(range(len(sizes)), key=lambda d: (sizes[d] != 1, -strides[d], d))


def index_space(sizes: Sequence[int], operand_strides: Sequence[Sequence[int]]) -> IndexSpace:
    """The collapsed iteration space for operands (output first) of logical `sizes`."""
    order = memory_order(sizes, operand_strides[0])
    dims = [d for d in order if sizes[d] != 1]
    new_sizes: list[int] = []
    new_strides: list[list[int]] = [[] for _ in operand_strides]
    for d in dims:
        if new_sizes and all(st[-1] == s[d] * sizes[d] for st, s in zip(new_strides, operand_strides)):
            new_sizes[-1] *= sizes[d]  # the previous dim steps over this one in every operand: merge
            for st, s in zip(new_strides, operand_strides):
                st[-1] = s[d]
            continue
        new_sizes.append(sizes[d])
        for st, s in zip(new_strides, operand_strides):
            st.append(s[d])
    if not new_sizes:
        new_sizes, new_strides = [1], [[1] for _ in operand_strides]
    contiguous = _contiguous_strides(new_sizes)
    flat = tuple(tuple(st) == contiguous for st in new_strides)
    return IndexSpace(tuple(new_sizes), tuple(tuple(st) for st in new_strides), flat)


def _contiguous_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(sizes):
        out.append(acc if n != 1 else out[-1] if out else acc)
        acc *= n
    return tuple(reversed(out))


def dense_strides(sizes: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Strides of a dense tensor of `sizes` laid out with dims `order` (slowest first)."""
    strides = [0] * len(sizes)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(sizes[d], 1)
    return tuple(strides)


def channels_last_order(ndim: int) -> tuple[int, ...]:
    """N, spatial..., C: the layout cuDNN runs fastest in half precision."""
    return (0, *range(2, ndim), 1)


def merge_dims(sizes: Sequence[int], operand_strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dims and merge neighbours (in the given order) that every operand steps through
    as one dim. Returns the new sizes (at least one) and per-operand strides."""
    new_sizes: list[int] = []
    new_strides: list[list[int]] = [[] for _ in operand_strides]
    for d, n in enumerate(sizes):
        if n == 1:
            continue
        if new_sizes and all(st[-1] == s[d] * n for st, s in zip(new_strides, operand_strides)):
            new_sizes[-1] *= n
            for st, s in zip(new_strides, operand_strides):
                st[-1] = s[d]
            continue
        new_sizes.append(n)
        for st, s in zip(new_strides, operand_strides):
            st.append(s[d])
    if not new_sizes:
        return (1,), tuple((0,) for _ in operand_strides)
    return tuple(new_sizes), tuple(tuple(st) for st in new_strides)
