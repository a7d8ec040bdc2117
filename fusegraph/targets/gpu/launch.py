"""Launchers of generated Triton kernels: pick the index space from the actual tensors' strides on
the first call (and whenever they change), generate and load the source, and launch.

The launch configuration is a pure function of the tensors' sizes and strides, so after the first
call (made while compiling, before graph capture) a launch costs one tuple comparison plus Triton's
own dispatch, and nothing at all inside a captured CUDA graph.
"""

from __future__ import annotations

import math
from typing import Any

from ...ir.dtypes import DType
from ...ops.scalar import Expr, fold
from .kernels import Launcher, load_kernel, source_hash
from .layout import index_space, merge_dims
from .triton_pointwise import HEADER, PointwiseSpec, operand_mode, pointwise_source
from .triton_reduce import ReduceBody, reduce_source

PERSISTENT_MAX = 2048   # rows up to this many elements stay in registers (one pass over memory)
LOOP_BLOCK = 1024       # column chunk of the looped (multi-pass) form
MIN_PROGRAMS = 264      # ~2 waves over the H200's 132 multiprocessors


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def rounds_to_integers(body: Expr) -> bool:
    """Whether `body` rounds a float result to an integer (QuantizeLinear's round, the QLinear ops)."""
    return fold(body, lambda e: False, lambda e, args: e.fn == "round" or any(args))


class PointwiseLauncher(Launcher):
    def __init__(self, body: Expr, in_types: list[DType], out_type: DType):
        self.body, self.in_types, self.out_type = body, tuple(in_types), out_type
        self.sources: dict[str, str] = {}  # kernel name -> source (saved with compiled programs)

    def _configure(self, out: Any, inputs: list[Any]) -> None:
        sizes = tuple(out.shape)
        space = index_space(sizes, [out.stride()] + [x.stride() for x in inputs])
        modes = tuple(operand_mode(f, st) for f, st in zip(space.flat, space.strides))
        numel = out.numel()
        wide = numel >= 2**31 or any(abs(s) * n >= 2**31 for st in space.strides for s, n in zip(st, space.sizes))
        spec = PointwiseSpec(self.body, self.in_types, self.out_type, space.ndim, modes, wide)
        name = "pw_" + source_hash(spec.key())
        source = HEADER + pointwise_source(spec, name)
        self.sources[name] = source
        fn = load_kernel(source, name)
        strided = [k for k, m in enumerate(modes) if m == "strided"]
        args = list(space.sizes[1:]) if strided else []
        for k in strided:
            args += list(space.strides[k])
        block = 1024 if numel >= 1024 else max(32, _pow2(numel))
        self.numel = numel
        self.launch = fn[((numel + block - 1) // block,)]
        self.args = args
        self.meta = {"BLOCK": block, "num_warps": 4 if block >= 512 else (2 if block >= 128 else 1)}
        if out.is_cuda and rounds_to_integers(self.body):
            # a quantization: each float op rounds on its own, as ONNX defines it (and ORT and the
            # reference compute it); a fused multiply-add moves values across the rounding edges
            self.meta["enable_fp_fusion"] = False

    def __call__(self, out: Any, *inputs: Any) -> None:
        key = (out.stride(), tuple(x.stride() for x in inputs), tuple(out.shape))
        self._configured_for(key, out, list(inputs))
        if self.numel:
            self.launch(out, *inputs, self.numel, *self.args, **self.meta)


class ReduceLauncher(Launcher):
    """Launches the kernel of one fused_reduce. `views(inputs)` gives the load tensors."""

    def __init__(self, rb: ReduceBody):
        self.rb = rb
        self.sources: dict[str, str] = {}

    def load_views(self, inputs: list[Any]) -> list[Any]:
        views = []
        for load in self.rb.loads:
            x = inputs[load.param]
            if load.lens is not None:
                x = x.broadcast_to(load.lens)
            views.append(x.broadcast_to(self.rb.full))
        return views

    def _configure(self, out: Any, views: list[Any]) -> None:
        rb = self.rb
        full = rb.full
        outer = [d for d in range(len(full)) if d not in rb.axes]
        red = list(rb.axes)
        out_full = out.broadcast_to(full)
        strides = [out_full.stride()] + [v.stride() for v in views]
        osz, ost = merge_dims([full[d] for d in outer], [[s[d] for d in outer] for s in strides])
        rsz, rst = merge_dims([full[d] for d in red], [[s[d] for d in red] for s in strides])
        n_rows, r = math.prod(osz), math.prod(rsz)
        persistent = _pow2(r) <= PERSISTENT_MAX
        name = "red_" + source_hash(rb.key() + repr((len(osz), len(rsz), persistent)))
        source = reduce_source(rb, len(osz), len(rsz), persistent, name)
        self.sources[name] = source
        fn = load_kernel(source, name)
        args = [n_rows, r] + list(osz[1:]) + list(rsz[1:])
        for k in range(len(strides)):
            args += list(ost[k])
            full_operand = (not rb.out_reduced) if k == 0 else not rb.loads[k - 1].reduced
            if full_operand:
                args += list(rst[k])
        if persistent:
            rblock = _pow2(r)
            xblock = max(1, min(128, 4096 // rblock))
            while xblock > 1 and -(-n_rows // xblock) < MIN_PROGRAMS:
                xblock //= 2
        else:
            rblock, xblock = LOOP_BLOCK, 1
        warps = 8 if xblock * rblock >= 4096 else 4 if xblock * rblock >= 1024 else 2
        self.launch = fn[(-(-n_rows // xblock),)]
        self.args = args
        self.empty = n_rows == 0 or r == 0
        self.meta = {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}

    def __call__(self, out: Any, *inputs: Any) -> None:
        views = self.load_views(list(inputs))
        self._configured_for((out.stride(), tuple(v.stride() for v in views), tuple(out.shape)), out, views)
        if not self.empty:
            self.launch(out, *views, *self.args, **self.meta)
