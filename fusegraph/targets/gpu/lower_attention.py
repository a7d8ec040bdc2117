"""Attention (patterns_attention.py) as one kernel: torch's scaled_dot_product_attention (as torch
dispatches it, or one of its fused backends forced) or triton_attention's short-sequence kernel,
whichever the tuner times fastest on the step's own tensors (`TunedAttention`).

The kernels take one additive mask of the query's type. The pattern's mask and Where-fill become
that mask: converted with values beyond the type's range clamped to it (a float32 finfo.min mask is
-inf in float16; the fill takes the same clamp), added in float32 when both apply. A mask that is
the model's constant is converted once (`constant_mask`).

A query row whose every key is masked gets uniform weights in the model: the float32 scores plus
finfo(float32).min all round to finfo.min, and a Where sets them all to its fill. SDPA adds the
float16 lowest (-65504) in float32 without absorbing the scores (softmax of the scores instead), and
a boolean mask gives zeros. So such rows are found (keys masked by the Where, or float16 mask
values at the lowest) and their query is read as zeros: equal scores, uniform weights, the mean of
v. Before SDPA that is one `where` in q's own memory order (`zero_rows`); the Triton kernel zeroes
them in registers.
"""

from __future__ import annotations

import contextlib

from . import kernels
from .device import torch
from .lowering import lowering


@lowering("attention", mode="value", note="scaled_dot_product_attention", cublas=True)  # (its math fallback)
def attention(ctx, step):
    from .view_chain import apply

    data = step.data
    scale = data["scale"]
    chains = data["chains"]  # q, K^T, v from the pattern's inputs: strided views where they can be
    gqa = data.get("gqa", False)  # k and v with fewer heads than q, each read by a group of q's heads

    mask = shared_mask(ctx, step)
    if ctx.tuner is None:
        from .autotune import Tuner

        ctx.tuner = Tuner.for_device(ctx.device)
    tuned = TunedAttention(ctx.tuner, scale, gqa)
    ctx.kernels.append(tuned)

    def run(q, kt, v, *masks):
        q, kt, v = (apply(x, c) for x, c in zip((q, kt, v), chains))
        q, k, v = (sdpa_operand(x) for x in (q, kt.transpose(-1, -2), v))
        bias, dead = mask(q.dtype, masks)
        return tuned(q, k, v, bias, dead)
    return run


# Heads of at most this many dims, over at most triton_attention.MAX_KEYS keys in half precision, take
# the Triton kernel without timing torch's SDPA (in "auto" mode without exhaustive tuning): it won every
# such choice the H200 tuner recorded (DistilBERT b1, GPT-2 b1 and b32, Llama-small b32: 64-dim heads,
# 128 keys; 1.7-2.2x faster than the fastest SDPA backend), and SDPA's first calls, where cuDNN builds
# its graph, took 0.57-0.74 s of those rows' cold compiles at b32 on the H200
SMALL_ALONE_DIM = 64


def small_alone(q, k) -> bool:
    """Whether attention over q, k takes triton_attention's kernel alone, untimed (SMALL_ALONE_DIM)."""
    from .triton_attention import fits

    return fits(q, k) and q.shape[-1] <= SMALL_ALONE_DIM


class TunedAttention:
    """The attention kernel of one step, chosen by the tuner at its first call (while compiling, before
    graph capture) on the step's own tensors: scaled_dot_product_attention as torch dispatches it
    (the first candidate: the choice where nothing is timed, Triton's interpreter), each of its fused
    backends forced, and triton_attention's short-sequence kernel. torch picks a backend by what the
    inputs allow, not by speed: on Swin's 49-token windows its choice (cuDNN) is the slowest. Each
    SDPA candidate's first call (cuDNN builds its graph for the shapes then) is made with the
    libraries' first calls right after the walk, while the GEMMs' candidates compile: the choice
    itself, made after the GEMMs' (it compiles nothing), then times warm candidates. Where the
    short-sequence kernel takes the heads (`small_alone`) it is chosen untimed, and SDPA's candidates
    are neither called nor timed unless it fails."""

    BACKENDS = ("cudnn", "flash", "efficient")

    def __init__(self, tuner, scale, gqa):
        self.tuner, self.scale, self.gqa = tuner, scale, gqa
        self.sources: dict[str, str] = {}  # (ctx.kernels' interface: no generated source)
        self.tuning: dict[str, dict] = {}
        self.run = None
        self.zero: list = []  # where's 0 as a device tensor, made once (a Python 0 is a fill kernel every run)

    def __call__(self, q, k, v, bias, dead):
        """Attention of q, k, v under the additive `bias`; `dead` (or None) marks the query rows whose
        every key is masked, which get uniform weights, as in the model (read as zero queries)."""
        return (self.run or self._choose(q, k, v, bias, dead))(q, k, v, bias, dead)

    def _choose(self, q, k, v, bias, dead):
        """The chosen kernel's run, kept for later calls (in autotune's compile_all pass: a run for
        this call, nothing kept)."""
        from .autotune import Candidate

        def order(x):
            return tuple(sorted(range(x.dim()), key=lambda d: -x.stride(d)))
        form = None if bias is None else (tuple(bias.shape), tuple(s == 0 for s in bias.stride()), bias.dtype)
        key = (f"attention q{tuple(q.shape)}{order(q)} k{tuple(k.shape)}{order(k)} v{order(v)} {q.dtype} "
               f"bias{form} dead{None if dead is None else tuple(dead.shape)} scale={self.scale} gqa={self.gqa}")
        args = (q, k, v, bias, dead)
        candidates = [Candidate("sdpa", lambda: self._sdpa(None))]
        if q.is_cuda:
            candidates += [Candidate(f"sdpa-{b}", lambda b=b: self._sdpa(b)) for b in self.BACKENDS]
        small = [Candidate("small", self._small)] if q.is_cuda else []
        known = self.tuner.decided(key)
        # the Triton kernel alone where it takes the heads (SMALL_ALONE_DIM), SDPA only where it fails;
        # a recorded or cached choice of an SDPA backend stands
        alone = bool(small) and small_alone(q, k) and self.tuner.prefers_first() and known in (None, "small")
        if alone:
            name, run = self.tuner.choose_first(key, small, candidates, args)
        else:
            name, run = self.tuner.choose(key, candidates + small, args)
        if name is not None:
            self.run = run
            self.tuning[key] = {"name": name}
        elif kernels.compiling_all():  # the pass that only compiles: the choice after it (kernels.after_walk)
            for c in candidates if q.is_cuda and not alone else ():  # the SDPA candidates' first calls,
                if known in (None, c.name):  # with the libraries'
                    kernels.after_walk(lambda c=c: c.make()(*args), library=True)
            kernels.after_walk(lambda: self._choose(q, k, v, bias, dead), compiles=False)
            return unwritten_output
        return run

    def _sdpa(self, backend: str | None):
        t = torch()
        F = t.nn.functional
        scale, gqa = self.scale, self.gqa
        if backend is None:
            within = contextlib.nullcontext
        else:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            chosen = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                      "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

            def within():
                return sdpa_kernel([chosen])

        def run(q, k, v, bias, dead):
            if dead is not None:
                if not self.zero:
                    self.zero.append(q.new_zeros(()))
                q = zero_rows(q, dead, self.zero[0])
            with within():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=gqa)
        return run

    def _small(self):
        """The Triton kernel's run, with the compile hook autotune.precompile and compile_all's pass
        call (GPT-2 b1 on the H200 waited 0.8 s for it in the warm-up's run when only timing built it)."""
        from .triton_attention import compile_small_attention, small_attention

        scale = self.scale

        def run(q, k, v, bias, dead):
            return small_attention(q, k, v, bias, scale, dead)

        def compile(q, k, v, bias, dead):
            compile_small_attention(q, k, v, bias, scale, dead)
        run.compile = compile
        return run


def unwritten_output(q, k, v, bias, dead):
    """Attention's output, allocated and not computed, laid out as its kernels write it (the query's
    dim order): compile_all's pass computes nothing, and the next steps compile for these strides."""
    from .triton_attention import empty_in_order

    return empty_in_order(q, (*q.shape[:-1], v.shape[-1]))


def zero_rows(q, dead, zero):
    """where(dead, 0, q) laid out as q is. cuDNN's attention writes its output in its query's dim
    order, so a query in [B, L, H, D] memory (a view of the q projection) gives an output whose
    transpose back to [B, L, H*D] is free; a plain `where` wrote [B, H, L, D] (its broadcast mask's
    order won), and the model's transpose + contiguous after the attention became a copy a layer
    (DistilBERT b32 on the H200: the where 12 us, the copy 9 us a layer, against 15 us of attention)."""
    t = torch()
    dead = dead.reshape((1,) * (q.dim() - dead.dim()) + tuple(dead.shape))
    order = sorted(range(q.dim()), key=lambda d: -q.stride(d))
    out = t.empty([q.shape[d] for d in order], dtype=q.dtype, device=q.device)
    t.where(dead.permute(order), zero, q.permute(order), out=out)
    return out.permute([order.index(d) for d in range(q.dim())])


def shared_mask(ctx, step):
    """sdpa_mask for `step`, as a function of (dtype, masks). The attention steps that read the same
    mask and condition with the same form (a transformer's layers: the model makes its mask once)
    share one: the first of them in the plan computes it, the others take its result. Every run runs
    the steps in plan order (the static loop, its CUDA graph, the profile, the dynamic mode), so the
    first has computed this run's when a later one reads it. Per layer it was 2-8 small kernels
    (amax and a comparison; with a Where: where, clamp, convert, not, or, all)."""
    data = step.data
    key = (tuple(i.uid for i in step.inputs[3:]), step.ins.shape.dtype, data["has_mask"], repr(data.get("where")))
    holder = ctx.shared.setdefault(("attention_mask", key), {"owner": step.ins.uid})
    if all(i.is_literal for i in step.inputs[3:]):
        return constant_mask(holder, data)
    if holder["owner"] != step.ins.uid:
        return lambda dtype, masks: holder["value"]

    def compute(dtype, masks):
        holder["value"] = sdpa_mask(dtype, data, *masks)
        return holder["value"]
    return compute


def constant_mask(holder: dict, data: dict):
    """sdpa_mask of masks that are the model's constants (Swin's relative position bias and shifted-
    window mask), made at the first run (the warm-up's, before any graph capture) and kept: no
    per-run amax, comparison and conversion of a [windows, heads, 49, 49] mask (Swin-T b32 on the
    H200: 300 us a call). Whether any query row has every key masked is then known, and read once:
    when none has, q is not zeroed (a where over q a layer). Under a graph capture (no first run
    before it) the flags stay on the device."""
    t = torch()

    def compute(dtype, masks):
        if "value" not in holder:
            bias, dead = sdpa_mask(dtype, data, *masks)
            capturing = dead is not None and dead.is_cuda and t.cuda.is_current_stream_capturing()
            if dead is not None and not capturing and not bool(dead.any()):
                dead = None
            holder["value"] = bias, dead
        return holder["value"]
    return compute


# The most negative mask value SDPA is given. tests/targets/gpu/test_gpu_attention_masks.py's float32
# additive case (finfo.min on every key of some query rows) failed in its first H200 run while its
# float16 one (-65504) passed; the likely cause, not yet confirmed there: the memory-efficient kernel
# scales its scores by log2(e) in float32, which makes a float32 or bfloat16 lowest -inf, and a row of
# -inf loses the uniform weights the model gives it. -1e30 still zeroes a masked key's weight
# (exp(-1e30) is 0) and, added to any score, gives equal scores across a fully masked row.
MASK_FLOOR = -1e30


def sdpa_mask(dtype, data: dict, *masks):
    """(additive mask of `dtype` or None, [..., L, 1] boolean of the query rows whose every key is
    masked or None) for the pattern's mask and Where condition (step data "has_mask", "where")."""
    t = torch()
    it = iter(masks)
    mask = next(it) if data["has_mask"] else None
    where = data.get("where")
    cond = next(it) if where else None
    info = t.finfo(dtype)
    lowest = max(info.min, MASK_FLOOR)
    if cond is None:
        if mask is None:
            return None, None
        if mask.dtype != dtype:
            mask = mask.clamp(lowest, info.max).to(dtype)
        elif lowest > info.min:
            mask = mask.clamp(min=lowest)
        return mask, (mask.amax(-1, keepdim=True) <= info.min if dtype == t.float16 else None)
    kept = cond if where["keep_if"] else cond.logical_not()
    fill = max(where["fill"], lowest)
    if mask is None:
        bias = t.where(kept, 0.0, fill)
    elif where["fill_first"]:  # where(B, S, f) + M: masked keys take f + M
        bias = t.where(kept, 0.0, fill) + mask.float()
    else:
        bias = t.where(kept, mask.float(), fill)
    bias = bias.clamp(lowest, info.max).to(dtype)
    dead = kept.logical_not()
    if dtype == t.float16:
        dead = dead | (bias <= info.min)
    return bias, dead.all(-1, keepdim=True)


def sdpa_operand(x):
    """`x` as SDPA's kernels take it, else a dense copy. Unit stride along the last dim: the flash
    and memory-efficient kernels need it, and without them SDPA falls back to its math form (a K^T
    made contiguous by its producer, read transposed, made ViT-B/16's attention 15x slower than
    flash on an H200, issue 23). A strided view (view_chain.py) only in half precision (flash's
    types) and with its start and strides on 16 bytes: in float32 the memory-efficient kernel took
    SegFormer's and a GPT-2 kv-step's views on the H200 and refused them at run time ("query is not
    correctly aligned", "no kernel found to launch"). It checks the strides of size-1 dims too, which
    torch calls contiguous whatever they are (that kv-step's one-token query had strides (1, 8, 1, 1)):
    those are set to a dense tensor's (`dense_unit_strides`)."""
    if x.shape[-1] != 1 and x.stride(-1) != 1:
        return dense_unit_strides(x.contiguous())
    x = dense_unit_strides(x)
    if x.is_contiguous():
        return x
    size = x.element_size()
    aligned = x.data_ptr() % 16 == 0 and all(s * size % 16 == 0 for s in x.stride()[:-1])
    return x if size == 2 and aligned else dense_unit_strides(x.contiguous())


def dense_unit_strides(x):
    """`x` with each size-1 dim given the stride a dense tensor has there (the next dim's stride times
    its size; 1 for the last): the same elements, a view."""
    strides = list(x.stride())
    for d in range(x.dim() - 1, -1, -1):
        if x.shape[d] == 1:
            strides[d] = strides[d + 1] * x.shape[d + 1] if d + 1 < x.dim() else 1
    return x if strides == list(x.stride()) else x.as_strided(x.shape, strides, x.storage_offset())
