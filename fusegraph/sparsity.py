"""Sparse weights: making them, pruning to 2:4, and what the compiler does with them.

    w = fusegraph.make_sparse((2048, 2048), density=0.3)      # a random float32 matrix, 70 % zeros
    w24 = fusegraph.prune_2_4(w_dense)                        # keep the 2 largest of every 4 along K
    fusegraph.is_2_4(w24)                                     # True
    pruned = fusegraph.prune_2_4(program, skip_names=["fc"])  # a copy, every product weight pruned

A MatMul whose weight is such a constant needs nothing else: the cpu target packs a weight with at
most half its entries nonzero by output column and times the sparse product against oneDNN's dense one
at compile, keeping the faster (targets/cpu/kernels/sparse.py); the gpu target runs a float16/bfloat16
2:4 weight on the sparse tensor cores (cuSPARSELt) where that times faster than cuBLAS
(targets/gpu/lower_sparse.py). docs/sparsity.md has the details.
"""

from __future__ import annotations

import numpy as np

from .errors import ArgumentError, api_boundary


def make_sparse(shape, density: float, seed: int = 0, dtype=np.float32, structure: str | None = None) -> np.ndarray:
    """A random matrix of `shape` with the fraction `density` of its entries nonzero (normal values),
    or with `structure="2:4"` two nonzeros in every four consecutive entries of the last axis but one
    (the reduction axis K of a [K, N] weight; density is then 0.5)."""
    shape = tuple(int(s) for s in shape)
    if not 0.0 <= density <= 1.0:
        raise ArgumentError(f"density must be in [0, 1], got {density}")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(dtype)
    if structure == "2:4":
        return prune_2_4_array(w)
    if structure is not None:
        raise ArgumentError(f"structure must be None or '2:4', got {structure!r}")
    w[rng.random(shape) >= density] = 0
    return w


def _groups(w: np.ndarray) -> np.ndarray:
    """w [..., K, N] as groups of 4 along K: [..., K/4, 4, N]."""
    if w.ndim < 2 or w.shape[-2] % 4:
        raise ArgumentError(f"2:4 sparsity groups the reduction axis by 4: a weight [.., K, N] with K a "
                            f"multiple of 4, got {list(w.shape)}")
    return w.reshape(*w.shape[:-2], w.shape[-2] // 4, 4, w.shape[-1])


@api_boundary
def prune_2_4(w, *, skip_names=None, min_size=None):
    """`w` pruned to 2:4 along K: an array (as `prune_2_4_array`), or a Program, whose product weights
    are pruned in a copy, returned; the input is left as it was. For a Program: `skip_names`, ONNX
    node names to leave dense; `min_size`, the fewest elements a pruned weight has (default 1024).
    The copy's metadata lists each product, its weight's shape and whether it was pruned or found
    2:4 already (`fusegraph.passes.prune_2_4.pruned_products`)."""
    from .ir.program import Program

    if isinstance(w, Program):
        from .passes.prune_2_4 import DEFAULT_MIN_SIZE, prune_program_2_4

        if w.is_compiled:  # its executable holds compiled code and device memory: no copy of it
            raise ArgumentError("prune_2_4: prune a program before compiling it (parse_onnx, prune_2_4, compile)")
        pruned = w.copy()
        prune_program_2_4(pruned, skip_names or (), DEFAULT_MIN_SIZE if min_size is None else min_size)
        return pruned
    if skip_names is not None or min_size is not None:
        raise ArgumentError("prune_2_4 of an array takes no skip_names / min_size (they are for a Program)")
    return prune_2_4_array(np.asarray(w))


def prune_2_4_array(w: np.ndarray) -> np.ndarray:
    """`w` with the two smallest-magnitude entries of every group of four along K set to zero (the
    pattern NVIDIA's sparse tensor cores run; prune, then fine-tune or check accuracy: `fusegraph
    verify` against the dense model)."""
    g = _groups(np.array(w, copy=True))
    drop = np.argsort(np.abs(g), axis=-2, kind="stable")[..., :2, :]
    np.put_along_axis(g, drop, 0, axis=-2)
    return g.reshape(w.shape)


def is_2_4(w: np.ndarray) -> bool:
    """Whether every group of four along K holds at most two nonzeros."""
    if w.ndim < 2 or w.shape[-2] % 4:
        return False
    return bool(((_groups(w) != 0).sum(axis=-2) <= 2).all())
