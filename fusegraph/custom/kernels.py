"""What a custom op may bring for each target besides its numpy reference.

cpu:  `CKernel(source, symbol)`: C compiled with the cpu target's build machinery (one library per
      op instance, cached on disk like the generated kernels, never written into a .fgx), or any
      Python callable `fn(*arrays, **attrs)` (numba's @njit functions included).
gpu:  `TorchKernel(fn)`: `fn(*tensors, **attrs)` returns the output tensor(s) (torch ops, or Triton
      kernels it launches itself); `TritonKernel(launch)`: `launch(out, *tensors, **attrs)` writes one
      output into the buffer the target allocated (the static plan's arena, CUDA-graph capturable).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class CKernel:
    """A C function `void SYMBOL(void *const *p, const int64_t *d, int nt)`: p[0] the output buffer,
    p[1..] the inputs (all contiguous, in the dtypes of the shape rule and the inputs); d the rank
    then the lens of the output, then of each input in order; nt the threads it may use (OpenMP is
    linked). Attributes arrive as macros ATTR_<name> (numbers, 0/1 for bools, `{a, b}` lists for
    tuples; strings are not passed). One output only."""

    source: str
    symbol: str


@dataclasses.dataclass(frozen=True)
class TorchKernel:
    fn: Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class TritonKernel:
    launch: Callable[..., Any]
