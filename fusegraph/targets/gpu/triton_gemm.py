"""Triton GEMM template with a fused epilogue: C = epilogue(A @ B), one kernel.

The problem is a matmul over rows: A [M, K], B [K, N], C [M, N], with the row index of A, C and
the epilogue's full-size operands decomposed as (batch, row) = (m // R, m % R), each with its own
two row strides. That one form covers plain and batched matmuls, 1x1 convolutions over
channels-last rows (a channel slice of a concat buffer included) and outputs written through the
strides of arena buffers or concat slices, without copies.

The main loop follows Triton's matmul tutorial and Inductor's mm template: grouped tile order for
L2 reuse, row/column indices wrapped modulo M/N so A and B loads need no masks, K a constant, the K tail masked
only when K is not a multiple of BLOCK_K, fp32 accumulation (float32 inputs with
input_precision="ieee": exact fp32, never TF32). The epilogue is the reader's scalar body rendered
by TritonExprRenderer; the matmul value is first rounded to its own dtype, exactly as the unfused
program stores it before its pointwise kernel reads it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...ir.dtypes import DType
from ...ops.scalar import Expr
from .kernels import Launcher, load_kernel, source_hash
from .layout import merge_dims
from .triton_expr import HALF, TritonExprRenderer, compute_type, tl_type
from .triton_pointwise import HEADER

ACC, COL, FULL, SCALAR = "acc", "col", "full", "scalar"  # how an epilogue variable is read


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3

    def name(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_g{self.group_m}"
                f"_w{self.num_warps}_s{self.num_stages}")


@dataclasses.dataclass(frozen=True)
class GemmSpec:
    body: Expr                    # the epilogue over its variables
    var_types: tuple[DType, ...]  # per variable; the matmul's own dtype for ACC variables
    modes: tuple[str, ...]        # per variable: ACC | COL | FULL | SCALAR
    in_type: DType                # A's and B's dtype
    out_type: DType
    split_rows: bool              # rows decompose into (batch, row): two row strides
    even_k: bool                  # K % BLOCK_K == 0: no mask on the K tail
    wide: bool = False            # 64-bit offsets
    generic: bool = False         # K an argument, not a constant: one kernel for every K (tuning's)

    def key(self) -> str:
        return "|".join([str(self.body), ",".join(t.value for t in self.var_types), ",".join(self.modes),
                         self.in_type.value, self.out_type.value, str(self.split_rows), str(self.even_k),
                         str(self.wide)] + (["generic"] if self.generic else []))


def gemm_source(spec: GemmSpec, name: str) -> str:
    ind = "    "
    ops = [k for k, m in enumerate(spec.modes) if m != ACC]
    params = ["a_ptr", "b_ptr", "out_ptr"] + [f"e{k}_ptr" for k in ops] + ["M", "N", "R"]
    params += ["s_ab", "s_ar", "s_ak", "s_bk", "s_bn", "s_ob", "s_or", "s_on"]
    for k in ops:
        params += {FULL: [f"s{k}_b", f"s{k}_r", f"s{k}_n"], COL: [f"s{k}_n"], SCALAR: []}[spec.modes[k]]
    # K is a constant of the kernel (as in Inductor's template): a known trip count to pipeline (K as
    # an argument, the generic form tuning times, cost ResNet-50 b32's GEMMs 0-18 %, most at K = 1024)
    params += ["K" if spec.generic else "K: tl.constexpr"]
    params += ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr", "GROUP_M: tl.constexpr"]
    lines = [f"@triton.jit\ndef {name}({', '.join(params)}):"]
    pid = "tl.program_id(0).to(tl.int64)" if spec.wide else "tl.program_id(0)"
    lines += [f"{ind}{s}" for s in (
        f"pid = {pid}",
        "grid_m = tl.cdiv(M, BLOCK_M)",
        "grid_n = tl.cdiv(N, BLOCK_N)",
        "width = GROUP_M * grid_n",  # tiles of GROUP_M row blocks run together: their B columns stay in L2
        "group_id = pid // width",
        "group_size = min(grid_m - group_id * GROUP_M, GROUP_M)",
        "pid_m = group_id * GROUP_M + (pid % group_size)",
        "pid_n = (pid % width) // group_size",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
        # wrapped indices read valid (repeated) rows and columns: no load masks in the main loop. No
        # contiguity hints: Triton derives 16-element runs itself when N (M) is a multiple of 16, and
        # a hint across the wrap point would make vector loads read past the tensor.
        "ram = rm % M",
        "rbn = rn % N",
        f"a_ptrs = a_ptr + ({_row('ram', 's_ab', 's_ar', spec.split_rows)})[:, None] + rk[None, :] * s_ak",
        "b_ptrs = b_ptr + rk[:, None] * s_bk + rbn[None, :] * s_bn",
        f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={_acc_type(spec.in_type)})",
        "for k in range(0, K, BLOCK_K):",
    )]
    body = ind * 2
    if spec.even_k:
        lines += [f"{body}a = tl.load(a_ptrs)", f"{body}b = tl.load(b_ptrs)"]
    else:
        zero = "0" if spec.in_type.is_int else "0.0"
        lines += [f"{body}a = tl.load(a_ptrs, mask=rk[None, :] < K - k, other={zero})",
                  f"{body}b = tl.load(b_ptrs, mask=rk[:, None] < K - k, other={zero})"]
    precision = ', input_precision="ieee"' if spec.in_type == DType.float32 else ""
    if spec.in_type.is_int:  # int8 x int8 sums exactly in int32 (Triton wants the type named)
        precision = ", out_dtype=tl.int32"
    lines += [f"{body}acc = tl.dot(a, b, acc{precision})",
              f"{body}a_ptrs += BLOCK_K * s_ak", f"{body}b_ptrs += BLOCK_K * s_bk"]
    lines += _epilogue(spec, ind)
    return "\n".join(lines) + "\n"


def _acc_type(in_type: DType) -> str:
    return "tl.int32" if in_type.is_int else "tl.float32"


def _row(index: str, s_b: str, s_r: str, split: bool) -> str:
    return f"({index} // R) * {s_b} + ({index} % R) * {s_r}" if split else f"{index} * {s_r}"


def _epilogue(spec: GemmSpec, ind: str) -> list[str]:
    lines = [f"{ind}mask = (rm < M)[:, None] & (rn < N)[None, :]"]
    names, types = [], []
    for k, (mode, dt) in enumerate(zip(spec.modes, spec.var_types)):
        ct = compute_type(dt)
        if mode == ACC:
            # the unfused program stores the matmul in its dtype before the epilogue reads it
            load = f"acc.to({tl_type(dt)})" if dt in HALF else "acc"
        elif mode == FULL:
            load = (f"tl.load(e{k}_ptr + ({_row('rm', f's{k}_b', f's{k}_r', spec.split_rows)})[:, None]"
                    f" + rn[None, :] * s{k}_n, mask=mask)")
        elif mode == COL:
            load = f"tl.load(e{k}_ptr + rn * s{k}_n, mask=rn < N)[None, :]"
        else:
            load = f"tl.load(e{k}_ptr)"
        if ct != dt or (mode == ACC and dt in HALF):
            load = f"({load}).to({tl_type(ct)})"
        lines.append(f"{ind}x{k} = {load}")
        names.append(f"x{k}")
        types.append(ct)
    result, _ = TritonExprRenderer(lines, ind).emit(spec.body, names, types)
    store = f"(({result}) != 0)" if spec.out_type == DType.bool else f"({result}).to({tl_type(spec.out_type)})"
    # an epilogue made only of one-element values and the accumulator still covers the whole tile
    lines.append(f"{ind}c = tl.broadcast_to({store}, [BLOCK_M, BLOCK_N])")
    out = f"out_ptr + ({_row('rm', 's_ob', 's_or', spec.split_rows)})[:, None] + rn[None, :] * s_on"
    lines.append(f"{ind}tl.store({out}, c, mask=mask)")
    return lines


class GemmLauncher(Launcher):
    """One Triton config of one epilogue GEMM. Called as (out, a, b, *operands) with tensors in row
    form: a [*rows, K], b [K, N], out and the epilogue's operands (its variables other than the
    matmul, in order) [*rows, N], broadcasts included. The kernel is configured from the first
    call's strides (and whenever they change); rows whose strides do not merge into (batch, row)
    raise ValueError, and the autotuner drops the template for that problem. `generic`: the kernel
    takes K as an argument, so the problems of one epilogue share one kernel per config (what tuning
    times: ResNet-50 b32 compiles 51 kernels instead of 137); the chosen config then runs its
    K-constant kernel."""

    def __init__(self, body: Expr, var_types: list[DType], acc_vars: tuple[int, ...], in_type: DType,
                 out_type: DType, config: GemmConfig, generic: bool = False):
        self.body, self.var_types, self.acc_vars = body, tuple(var_types), frozenset(acc_vars)
        self.in_type, self.out_type, self.config, self.generic = in_type, out_type, config, generic
        self.sources: dict[str, str] = {}
        self.kernel: Any = None  # the compiled kernel last launched (Triton's; None interpreted)

    def _configure(self, out: Any, a: Any, b: Any, ops: list[Any]) -> None:
        rows = tuple(out.shape[:-1])
        m, n, k = math.prod(rows), out.shape[-1], a.shape[-1]
        sizes, merged = merge_dims(rows, [out.stride()[:-1], a.stride()[:-1]] + [x.stride()[:-1] for x in ops])
        if len(sizes) > 2:
            raise ValueError(f"rows {rows} of these strides do not merge into (batch, row)")
        split = len(sizes) == 2
        pairs = [tuple(st) if split else (0, st[0]) for st in merged]  # (batch, row) strides per tensor
        op_modes = [FULL if pairs[2 + j] != (0, 0) else COL if x.stride()[-1] != 0 else SCALAR
                    for j, x in enumerate(ops)]
        it = iter(op_modes)
        modes = tuple(ACC if v in self.acc_vars else next(it) for v in range(len(self.var_types)))
        extent = max(sum(abs(s) * (d - 1) for s, d in zip(t.stride(), t.shape)) for t in [out, a, b, *ops])
        cfg = self.config
        spec = GemmSpec(self.body, self.var_types, modes, self.in_type, self.out_type, split,
                        k % cfg.block_k == 0, extent >= 2**31, self.generic)
        name = "mm_" + source_hash(spec.key())
        source = HEADER + gemm_source(spec, name)
        self.sources[name] = source
        fn = load_kernel(source, name)
        args = [m, n, sizes[-1], *pairs[1], a.stride()[-1], b.stride(0), b.stride(1), *pairs[0], out.stride()[-1]]
        for j, x in enumerate(ops):
            if op_modes[j] == FULL:
                args += [*pairs[2 + j], x.stride()[-1]]
            elif op_modes[j] == COL:
                args.append(x.stride()[-1])
        if self.generic:
            args.append(k)
        grid = (-(-m // cfg.block_m)) * (-(-n // cfg.block_n))
        self.fn, self.grid = fn, (max(grid, 1),)
        self.launch = fn[self.grid]
        self.args = args
        self.empty = m == 0 or n == 0
        self.meta = {} if self.generic else {"K": k}
        self.meta |= {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k,
                     "GROUP_M": cfg.group_m, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}

    def _ready(self, out: Any, a: Any, b: Any, ops: tuple) -> None:
        key = (out.stride(), a.stride(), b.stride(), tuple(x.stride() for x in ops), tuple(out.shape), a.shape[-1])
        self._configured_for(key, out, a, b, list(ops))

    def __call__(self, out: Any, a: Any, b: Any, *ops: Any) -> None:
        self._ready(out, a, b, ops)
        if not self.empty:
            self.kernel = self.launch(a, b, out, *ops, *self.args, **self.meta)

    def compile(self, out: Any, a: Any, b: Any, *ops: Any) -> None:
        """Compile the kernel for these tensors without launching it (autotune.precompile submits
        it to a thread pool this way)."""
        self._ready(out, a, b, ops)
        if not self.empty:
            self.fn.warmup(a, b, out, *ops, *self.args, grid=self.grid, **self.meta)
