"""Run-time index checks of the gpu target, without a host sync and inside CUDA graphs.

An index outside [-n, n) must be the op's ExecutionError (ops/indexing.check_range), as on ref and
cpu; handed to torch's kernels it is a device-side assert, which kills the process's CUDA context.
So each indexing step, built through `IndexChecks.wrapper`, clamps its indices into range (the
kernel then reads garbage, never out of bounds) and ORs "some index was clamped" into its own cell
of a small device flag array. All of it is tensor ops, captured with the rest of the graph. The
executable zeroes the cells at the start of every run (a captured step). How the cells come back:

* a checked run (`run`, numpy or device tensors in; the dynamic and segmented modes) reads them at
  its end (`raise_if_flagged`: one tiny device-to-host copy, beside the outputs' own); a set cell
  makes it run the program once more uncaptured with host checks (`diagnosing`), which raises
  check_range's own error (the op, the input, the offending value) at the first bad step, so the
  message is ref's. Only the error path pays for the second run.
* `run_device` and `run_async` do not wait: the cells are copied into pinned host memory behind an
  event on the run's stream (`read_later`), and the error surfaces at the first later moment that
  finds the copy done (`raise_late`): the start of the executable's next call, `check()`, or the
  run's `DeviceFuture.result()`, as CUDA's own asynchronous errors do. Reading them at once cost a
  host sync a call, which left the host's launch work no device work to hide behind (DistilBERT b1
  on the H200, gpu_models.py: 0.4244 ms a call with the read, 0.3294 without). The run's inputs are gone by then, so the
  late error names the op, not the offending value; the outputs of that run are not valid.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import ExecutionError
from ...ir.op import Op
from ...ops.indexing import check_range
from .device import torch
from .kernels import Kernel, compiling_all, load_kernel

BLOCK = 64  # cells per flag tensor: cells are views, so blocks are added, never grown


class IndexChecks:
    """The device error flags of one executable's indexing steps (one bool cell per step)."""

    def __init__(self, device: Any):
        self.device = device
        self.ops: list[Op] = []        # cell k -> the op whose indices it watches
        self.blocks: list[Any] = []    # bool tensors of BLOCK cells
        self.eager = False             # diagnosing: check on the host, raise at the first bad step
        self._late: collections.deque = collections.deque()  # (event, pinned copy) of unread runs
        self._spare: list[Any] = []    # (event, pinned buffer) pairs read already, for later runs

    def _cell(self, op: Op) -> Any:
        k = len(self.ops)
        if k % BLOCK == 0:
            self.blocks.append(torch().zeros(BLOCK, dtype=torch().bool, device=self.device))
        self.ops.append(op)
        return self.blocks[-1][k % BLOCK:k % BLOCK + 1]

    def wrapper(self, op: Op, n: int | Sequence[int], what: str = "indices") -> Callable[[Any], Any]:
        """A function of an index tensor giving int64 positions in [0, n) (negative ones count from
        the end; `n` one extent, or one per position of the last axis as GatherND's tuples), that
        flags `op` when any index was outside [-n, n). Call it at build time (before any capture)."""
        t = torch()
        cell = self._cell(op)
        per_axis = np.ndim(n) > 0
        extents = [int(e) for e in np.reshape(n, -1)]
        ext: Any = max(extents[0], 1)
        if per_axis:  # device constants made now: a capture may not copy from the host
            ext = t.tensor([max(e, 1) for e in extents], dtype=t.int64, device=self.device)
        low, high = -ext, ext - 1
        empty = 0 in extents  # no index is in range: the op fails whenever it has one (its shape says)

        def wrap(idx: Any) -> Any:
            idx = idx.to(t.int64)
            if empty and idx.numel():
                raise ExecutionError(f"{op}: input {what!r} indexes an axis of length 0")
            if self.eager:
                check_range(op, idx.cpu().numpy(), n, what)
            if not per_axis and idx.numel():
                return wrapped(idx, ext, cell)
            inside = t.clamp(idx, low, high)
            cell.logical_or_((inside != idx).any())
            return t.remainder(inside, ext)  # [-n, n) -> [0, n)
        return wrap

    def reset(self) -> None:
        """Clear every cell (a step of the run, so a CUDA graph's replays clear them too)."""
        for block in self.blocks:
            block.zero_()

    def flagged(self) -> list[Op]:
        """The ops whose cells are set, in build order (reads the cells back: a sync)."""
        if not self.blocks:
            return []
        t = torch()
        cells = (self.blocks[0] if len(self.blocks) == 1 else t.cat(self.blocks)).cpu().numpy()
        return [op for op, bad in zip(self.ops, cells) if bad]

    @contextlib.contextmanager
    def diagnosing(self):
        """Checks on the host while in it (uncaptured runs only: they sync)."""
        self.eager = True
        try:
            yield
        finally:
            self.eager = False

    def raise_if_flagged(self, rerun: Callable[[], None]) -> None:
        """ExecutionError when a cell is set: `rerun()` (the same run, uncaptured) under host checks
        raises check_range's error; should it pass, the first flagged op is named without its value."""
        bad = self.flagged()
        if not bad:
            return
        with self.diagnosing():
            rerun()
        raise ExecutionError(f"{bad[0]}: an input index was outside its axis (the second run, checked on "
                             "the host, did not meet it again)")

    # -- reading the cells later (run_device, run_async) ----------------------------------------------
    def read_later(self, stream: Any) -> None:
        """Queue the cells' copy into pinned host memory on `stream` (CUDA; the current stream: the
        run was just queued there) and an event behind it; nothing waits. `raise_late` reads it."""
        if not self.blocks:
            return
        t = torch()
        if self._spare:
            event, buf = self._spare.pop()
        else:
            event, buf = t.cuda.Event(), t.empty(BLOCK * len(self.blocks), dtype=t.bool, pin_memory=True)
        if len(self.blocks) == 1:
            buf.copy_(self.blocks[0], non_blocking=True)
        else:
            for k, block in enumerate(self.blocks):
                buf[k * BLOCK:(k + 1) * BLOCK].copy_(block, non_blocking=True)
        event.record(stream)
        self._late.append((event, buf))

    def raise_late(self, wait: bool = False) -> None:
        """ExecutionError naming the first flagged op of the earliest run whose queued copy is done
        (with `wait`, every queued copy: it waits for them). Each copy is read once."""
        bad = None
        while self._late and (wait or self._late[0][0].query()):
            event, buf = self._late.popleft()
            event.synchronize()
            flags = buf.numpy()[:len(self.ops)]
            if bad is None and flags.any():
                bad = self.ops[int(flags.argmax())]
            self._spare.append((event, buf))
        if bad is not None:
            raise ExecutionError(f"{bad}: an input index was outside its axis in an earlier run_device or "
                                 "run_async call; that run's outputs are not valid")


_wrap_kernel = None
WRAP_SOURCE = """import triton
import triton.language as tl


@triton.jit
def wrap_indices(idx_ptr, out_ptr, cell_ptr, numel, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < numel
    i = tl.load(idx_ptr + offs, mask=live, other=0)
    inside = tl.minimum(tl.maximum(i, -n), n - 1)
    tl.store(out_ptr + offs, tl.where(inside < 0, inside + n, inside), mask=live)
    bad = live & ((i < -n) | (i >= n))
    tl.store(cell_ptr + offs * 0, tl.full([BLOCK], 1, tl.uint8), mask=bad)
"""


def wrap_kernel() -> Kernel:
    """The index-wrapping kernel, a generated module (its compile goes to a compile worker)."""
    global _wrap_kernel
    if _wrap_kernel is None:
        _wrap_kernel = load_kernel(WRAP_SOURCE, "wrap_indices")
    return _wrap_kernel


def wrapped(idx: Any, n: int, cell: Any) -> Any:
    """`idx` (int64) clamped into [-n, n) and counted from the start, [0, n); `cell` set when some
    index was outside: what the wrapper's clamp, comparison, any, or and remainder do in five
    kernels, in one Triton kernel (an embedding lookup was seven kernels with its gather and copy;
    GPT-2 has two such lookups a run)."""
    t = torch()
    idx = idx.contiguous()
    block = 1024
    # in the pass that only compiles, the kernel is submitted and the positions read as 0 (a wait for
    # its compile there was GPT-2's first lookup: 0.67 s on the H200)
    out = t.zeros_like(idx) if compiling_all() else t.empty_like(idx)
    wrap_kernel()[((idx.numel() + block - 1) // block,)](idx, out, cell.view(t.uint8), idx.numel(), n, BLOCK=block)
    return out
