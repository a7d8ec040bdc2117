"""Attention over short sequences as one Triton kernel: a tuning candidate of the attention step
(lower_attention.py) beside torch's scaled_dot_product_attention backends.

Swin's windows are 49 tokens with 32-dim heads, thousands of (window, head) pairs a layer. The fused
SDPA kernels tile 64 or 128 queries by 128 keys (cuDNN's, by its name: 64x128), so most of each
tile is padding: cuDNN's flash kernel took 1.23 ms of Swin-T's 4.7 ms at batch 32 on the H200 (issue
23), while a stage-1 layer's q, k, v and output are 77 MB of memory (~25 us at 3 TB/s). Here one program holds a (batch, head) pair's
whole score block in registers: q [BLOCK_M, D] @ k^T -> scores, plus the additive mask read through
its broadcast strides (never expanded), a softmax in float32, @ v, stored in the query's memory order
(so the model's transpose back to [B, L, H * D] stays free, as after cuDNN).

Taken only where it fits one key block (S <= 128, D <= 128) in half precision (float32 would need
Triton's IEEE dot to stay exact; the library kernels keep that case). Rows whose every key is
masked get the zeroed query the caller gives them (lower_attention.zero_rows), as with SDPA.
"""

from __future__ import annotations

from typing import Any

from .device import torch

MAX_KEYS = 128
MAX_DIM = 128

_kernel = None


def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())


def fits(q: Any, k: Any) -> bool:
    t = torch()
    return (q.dtype in (t.float16, t.bfloat16) and q.dim() == 4 and k.shape[-2] <= MAX_KEYS
            and q.shape[-1] <= MAX_DIM and q.shape[1] % k.shape[1] == 0)


def small_attention(q: Any, k: Any, v: Any, bias: Any, scale: float | None, dead: Any = None) -> Any:
    """softmax(q @ k^T * scale + bias) @ v for q [B, H, L, D], k and v [B, Hkv, S, D] (Hkv dividing H:
    grouped-query heads), bias broadcastable to [B, H, L, S] or None; each with a unit last stride.
    `dead` (boolean, broadcastable to [B, H, L, 1], or None) marks query rows to read as zeros: the
    rows whose every key is masked (lower_attention.zero_rows' rows, zeroed here in registers rather
    than by a pass over q: GPT-2 b32 on the H200 spent 12 us a layer in that pass, against 13 us for
    this kernel). The result has q's dim order. A RuntimeError when the form does not fit (`fits`)."""
    out, grid, args, meta = _launch(q, k, v, bias, scale, dead)
    kernel()[grid](*args, **meta)
    return out


def compile_small_attention(q: Any, k: Any, v: Any, bias: Any, scale: float | None, dead: Any = None) -> None:
    """Compile (in a compile scope: submit) small_attention's kernel for these operands, launching nothing."""
    _, grid, args, meta = _launch(q, k, v, bias, scale, dead)
    kernel().warmup(*args, grid=grid, **meta)


def _launch(q: Any, k: Any, v: Any, bias: Any, scale: float | None, dead: Any) -> tuple[Any, tuple, list, dict]:
    """(output, grid, arguments, meta-parameters) of small_attention's launch."""
    operands = [x for x in (q, k, v, bias) if x is not None]
    if not fits(q, k) or any(x.stride(-1) != 1 for x in (q, k, v)) or any(_extent(x) >= 2**31 for x in operands):
        raise RuntimeError("small_attention: a form it does not take")  # (offsets are 32-bit)
    b, h, n_q, d = q.shape
    n_kv = k.shape[-2]
    out = empty_in_order(q, q.shape)
    bias_strides = bias.expand(b, h, n_q, n_kv).stride() if bias is not None else (0, 0, 0, 0)
    if dead is not None:
        dead = dead.reshape((1,) * (4 - dead.dim()) + tuple(dead.shape))
    dead_strides = dead.expand(b, h, n_q, 1).stride()[:3] if dead is not None else (0, 0, 0)
    block_m = min(64, _pow2(n_q))
    grid = (b * h, (n_q + block_m - 1) // block_m)
    args = [q, k, v, bias if bias is not None else q, dead if dead is not None else q, out, h, h // k.shape[1],
            n_q, n_kv, float(scale if scale is not None else d ** -0.5),
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *bias_strides, *dead_strides, *out.stride()[:3]]
    meta = dict(HAS_BIAS=bias is not None, HAS_DEAD=dead is not None,
                BLOCK_M=block_m, BLOCK_N=_pow2(n_kv), BLOCK_D=_pow2(d), D=d, num_warps=4)
    return out, grid, args, meta


def empty_in_order(like: Any, lens: Any) -> Any:
    """A new tensor of `lens` whose memory follows `like`'s dim order (as the attention kernels write)."""
    order = sorted(range(like.dim()), key=lambda d: -like.stride(d))
    out = torch().empty([lens[d] for d in order], dtype=like.dtype, device=like.device)
    return out.permute([order.index(d) for d in range(like.dim())])


def _extent(x: Any) -> int:
    """One past the largest element offset `x` reaches."""
    return 1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride()) if n > 0)


SOURCE = """import triton
import triton.language as tl


@triton.jit
def attention_small(q_ptr, k_ptr, v_ptr, b_ptr, d_ptr, o_ptr, H, GROUP, L, S, scale,
                    sqb, sqh, sql, skb, skh, sks, svb, svh, svs, sbb, sbh, sbl, sbs, sdb, sdh, sdl,
                    sob, soh, sol, HAS_BIAS: tl.constexpr, HAS_DEAD: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr, D: tl.constexpr):
    pair = tl.program_id(0)
    b = pair // H
    h = pair % H
    hk = h // GROUP
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    rmask, kmask, dmask = rows < L, keys < S, dims < D
    q = tl.load(q_ptr + b * sqb + h * sqh + rows[:, None] * sql + dims[None, :],
                mask=rmask[:, None] & dmask[None, :], other=0.0)
    if HAS_DEAD:
        dead = tl.load(d_ptr + b * sdb + h * sdh + rows * sdl, mask=rmask, other=0) != 0
        q = tl.where(dead[:, None], tl.zeros_like(q), q)
    k = tl.load(k_ptr + b * skb + hk * skh + keys[:, None] * sks + dims[None, :],
                mask=kmask[:, None] & dmask[None, :], other=0.0)
    v = tl.load(v_ptr + b * svb + hk * svh + keys[:, None] * svs + dims[None, :],
                mask=kmask[:, None] & dmask[None, :], other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    if HAS_BIAS:
        s += tl.load(b_ptr + b * sbb + h * sbh + rows[:, None] * sbl + keys[None, :] * sbs,
                     mask=rmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
    s = tl.where(kmask[None, :], s, float("-inf"))
    p = tl.exp(s - tl.max(s, 1)[:, None])
    o = tl.dot(p.to(v.dtype), v) / tl.sum(p, 1)[:, None]
    tl.store(o_ptr + b * sob + h * soh + rows[:, None] * sol + dims[None, :], o.to(o_ptr.dtype.element_ty),
             mask=rmask[:, None] & dmask[None, :])
"""


def kernel():
    """The Triton kernel, a generated module (kernels.load_kernel) like the others: its compile goes
    to a compile worker, not a thread that holds the GIL (Triton is imported lazily)."""
    global _kernel
    if _kernel is None:
        from .kernels import load_kernel

        _kernel = load_kernel(SOURCE, "attention_small")
    return _kernel
