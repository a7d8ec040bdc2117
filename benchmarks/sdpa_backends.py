"""Which of torch's scaled_dot_product_attention backends take the forms the gpu target hands it
(issue 23), and what each returns: a question the CUDA device answers in seconds.

    python benchmarks/sdpa_backends.py [--batch 1] [--heads 8] [--kv-heads 4] [--seq 128] [--dim 64]

For each form (no mask, an additive [B, 1, 1, S] padding mask, an additive [B, 1, L, S] causal mask,
an additive [1, H, L, S] bias (Swin's relative position bias: --masks bias, --seq 49 --dim 32);
q, k, v dense [B, H, L, D] or strided views of one [B, L, 3, H, D] projection; grouped-query k/v
with enable_gqa) and each fused backend alone (flash, memory-efficient, cuDNN): whether it runs, its
time (CUDA events, gpu_vs_torch.time_alternating's rounds, median), the output's strides (is it [B, L, H, D] in
memory, so that the model's transpose + contiguous after it is free?) and its largest difference from
the math backend. Prints a table; --out writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from benchmarks.gpu_vs_torch import time_alternating  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH,
            "bmm": None}  # no SDPA: two batched products around a half-precision softmax (Inductor's form)


def composed(q, k, v, mask, gqa):
    if gqa:
        raise RuntimeError("bmm: no grouped-query form")
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return (s if mask is None else s + mask).softmax(-1) @ v


def operands(b: int, h: int, hkv: int, s: int, d: int, layout: str, dev: str):
    """q [B, H, L, D] and k, v [B, Hkv, S, D]: dense, or views of one packed projection (the layout a
    transformer's q, k, v have after merge_sibling_dots: [B, L, H*D + 2*Hkv*D] split and transposed)."""
    dt = torch.float16
    if layout == "dense":
        return (torch.randn(b, h, s, d, device=dev, dtype=dt), torch.randn(b, hkv, s, d, device=dev, dtype=dt),
                torch.randn(b, hkv, s, d, device=dev, dtype=dt))
    packed = torch.randn(b, s, (h + 2 * hkv) * d, device=dev, dtype=dt)
    q, k, v = packed.split([h * d, hkv * d, hkv * d], dim=-1)
    return (q.reshape(b, s, h, d).transpose(1, 2), k.reshape(b, s, hkv, d).transpose(1, 2),
            v.reshape(b, s, hkv, d).transpose(1, 2))


def mask_of(kind: str, b: int, h: int, s: int, dev: str):
    if kind == "none":
        return None
    if kind == "bias":
        return torch.randn(1, h, s, s, device=dev, dtype=torch.float16)
    if kind == "padding":
        m = torch.zeros(b, 1, 1, s, device=dev, dtype=torch.float16)
        m[..., s - s // 8:] = -65504.0  # the last eighth of every sequence padded
        return m
    causal = torch.full((s, s), -65504.0, device=dev, dtype=torch.float16).triu(1)
    return causal.expand(b, 1, s, s)


def timed(fn) -> float:
    """Microseconds a call, the median over gpu_vs_torch's rounds (CUDA events, after warm-up)."""
    return statistics.median(time_alternating({"sdpa": fn})["sdpa"]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--masks", default="none,padding,causal", help="of none, padding, causal, bias")
    ap.add_argument("--no-gqa", action="store_true", help="only the forms with as many k/v heads as q's")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    dev = "cuda"
    rows = []
    for gqa in (False,) if args.no_gqa else (False, True):
        hkv = args.kv_heads if gqa else args.heads
        for layout in ("dense", "packed"):
            q, k, v = operands(args.batch, args.heads, hkv, args.seq, args.dim, layout, dev)
            for mask_kind in args.masks.split(","):
                mask = mask_of(mask_kind, args.batch, args.heads, args.seq, dev)

                def call(q=q, k=k, v=v, mask=mask, gqa=gqa):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
                with sdpa_kernel(SDPBackend.MATH):
                    ref = call().float()
                for name, backend in BACKENDS.items():
                    row = {"gqa": gqa, "layout": layout, "mask": mask_kind, "backend": name}
                    try:
                        if backend is None:
                            def bmm(q=q, k=k, v=v, mask=mask, gqa=gqa):
                                return composed(q, k, v, mask, gqa)
                            out = bmm()
                            row["us"] = round(timed(bmm), 2)
                        else:
                            with sdpa_kernel(backend):
                                out = call()
                                row["us"] = round(timed(call), 2)
                        row["out_strides"] = list(out.stride())
                        row["out_is_blhd"] = out.transpose(1, 2).is_contiguous()
                        row["max_diff_vs_math"] = float((out.float() - ref).abs().max())
                    except RuntimeError as e:  # the backend does not take this form
                        row["error"] = str(e).splitlines()[0][:120]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(f"\n| gqa | layout | mask | {' | '.join(BACKENDS)} |")
    print("| --- | --- | --- |" + " --- |" * len(BACKENDS))
    for k in range(0, len(rows), len(BACKENDS)):
        group = rows[k:k + len(BACKENDS)]
        cells = [f"{r['us']} us{' BLHD' if r['out_is_blhd'] else ''}" if "us" in r else "-" for r in group]
        print(f"| {group[0]['gqa']} | {group[0]['layout']} | {group[0]['mask']} | {' | '.join(cells)} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(args),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
