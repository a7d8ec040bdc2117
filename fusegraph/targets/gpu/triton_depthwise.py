"""The tiled form of a 2-D depthwise convolution over channels-last input and output (triton_pool.py
keeps the other forms and launches this one): a program computes a [BLOCK_W, BLOCK_C] tile of output
pixels and channels for `rows` consecutive output rows (grid: N * ceil(OH / rows), OW / BLOCK_W,
C / BLOCK_C). Each input row the tile's outputs read is loaded once per horizontal tap, channels
contiguous, and added into every output row that reads it, weighted by one vector of the channels'
weights: rows output rows of a kh-tall window read rows * stride + (kh - 1) * dilation input rows
rather than rows * kh.

On the H200 in fp16 one row a program ran ConvNeXt-T's four 7x7s at batch 1 in 33 us (cuDNN 49, the
small form 46) and MobileNetV3-Large's 12 in 36 (cuDNN 46, the small form 34), and at batch 32 2.3x
cuDNN's time; four rows a program matched cuDNN on 3x3 windows at batch 32 and lost on 5x5 and 7x7
ones (`benchmarks/gpu_depthwise.py --rows 1,4`; lower_nn.triton_depthwise_rows picks the rows).
"""

from __future__ import annotations

from .triton_expr import compute_type, tl_type
from .triton_pointwise import HEADER

IND = "    "
ROWS = 1         # output rows a program (benchmarks/gpu_depthwise.py --rows times others)
TILE = 1024      # output elements of a tile (BLOCK_W * BLOCK_C) at most
MAX_BLOCK_C = 64
WARPS = 4        # warps a program (benchmarks/gpu_depthwise.py --warps times others)
ROLLED_ROWS_TAPS = 25  # one output row a program, windows past this many taps loop over their rows


def tiled_source(spec, name: str, params: list[str], unrolled: bool) -> str:
    """The kernel `name` of `spec` (triton_pool.PoolSpec: a depthwise 2-D window, channels-last), its
    parameters `params` (triton_pool's: sizes and strides as run-time arguments); the horizontal taps
    unrolled or looped over. With one output row a program, a window of more than ROLLED_ROWS_TAPS
    taps loops over its rows (its rows' taps unrolled): ConvNeXt-T's 7x7 kernel, wholly unrolled, took
    4.1-4.6 s to compile for sm_90 on the 2-core VM (255 registers a thread and 56 bytes of spills at
    ConvNeXt-T's 16x64 tiles) and about 4 s on the H200 machine, the last of ConvNeXt-T b1's cold
    compile (5.4 s; 2.9 s with the flat form); looped, 1.0 s on the VM, 72 registers, no spills
    (`benchmarks/triton_depthwise_regs.py --windows 7 --rows 1 [--unrolled]`). The loop costs run time:
    ConvNeXt-T b1 on the H200 compiled in 2.15 s against 4.14 unrolled and ran 0.5579 ms against 0.5163
    (its four 7x7 shapes alone, 36.6 us against 33.5: `benchmarks/gpu_depthwise.py --unrolled`). With
    several output rows and undilated window rows, such a window loops over the input rows the tile
    reads, each output row taking a loaded row where its window has it (its weights masked elsewhere):
    the 96-channel 7x7 at four rows and 8x64 tiles, 130 registers and 1.2 s (unrolled: 255, 24 bytes
    of spills, 6.4 s); on the H200 at batch 32 (512-element tiles, the best of 1, 2 and 4 rows) it ran
    ConvNeXt-T's four 7x7s in 801 us against cuDNN's 153, so no rule runs it (lower_nn keeps such
    convolutions on cuDNN); `benchmarks/gpu_depthwise.py --rows` times it."""
    acc_t, out_t = tl_type(compute_type(spec.dtype)), tl_type(spec.dtype)
    (kh, kw), s0, d0, rows = spec.lengths, spec.strides[0], spec.dilations[0], spec.rows
    inner = "tl.static_range" if unrolled else "range"
    lines = [f"@triton.jit\ndef {name}({', '.join(params)}, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):",
             f"{IND}blocks = (o2 + {rows - 1}) // {rows}",
             f"{IND}n = tl.program_id(0) // blocks",
             f"{IND}oh0 = tl.program_id(0) % blocks * {rows}",
             f"{IND}ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)",
             f"{IND}c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)",
             f"{IND}cm = c < o1",
             f"{IND}xb = x_ptr + n * xs0 + c[None, :] * xs1",
             *[f"{IND}acc{r} = tl.zeros([BLOCK_W, BLOCK_C], {acc_t})" for r in range(rows)]]
    rolled = kh * kw > ROLLED_ROWS_TAPS
    if rolled and rows == 1:  # one output row: the window's rows a loop
        lines += [f"{IND}for k0 in range({kh}):",
                  *_input_row(f"k0 * {d0}", [(0, "k0", None)], IND * 2, inner, spec, acc_t)]
    elif rolled and d0 == 1:  # a loop over the input rows the tile reads, each added where a window takes it
        uses = [(r, f"(rel - {r * s0})", f"(rel >= {r * s0}) & (rel < {r * s0 + kh})") for r in range(rows)]
        lines += [f"{IND}for rel in range({(rows - 1) * s0 + kh}):", *_input_row("rel", uses, IND * 2, inner, spec, acc_t)]
    else:  # each input row the tile's output rows read, once
        readers: dict[int, list] = {}  # input row (from oh0 * stride - pad) -> (output row, tap row, None)
        for r in range(rows):
            for k0 in range(kh):
                readers.setdefault(r * s0 + k0 * d0, []).append((r, str(k0), None))
        for rel, taken in sorted(readers.items()):
            lines += _input_row(str(rel), taken, IND, inner, spec, acc_t)
    lines += [f"{IND}out = out_ptr + n * os0 + ow[:, None] * os3 + c[None, :] * os1",
              f"{IND}oh = oh0 + tl.zeros([BLOCK_W], tl.int32)"]
    for r in range(rows):
        lines.append(f"{IND}tl.store(out + (oh0 + {r}) * os2, acc{r}.to({out_t}), "
                     f"mask=((ow < o3) & (oh + {r} < o2))[:, None] & cm[None, :])")
    return HEADER + "\n".join(lines) + "\n"


def _input_row(rel: str, uses: list[tuple[int, str, str | None]], ind: str, inner: str, spec, acc_t: str) -> list[str]:
    """The lines (indented `ind`) reading input row `rel` (from oh0 * stride - pad) tap by tap across
    the window, each tap added into the output rows `uses` names (output row, window row, and the
    condition under which that window takes the row, None for always)."""
    kw, s0, s1, b0, b1, d1 = spec.lengths[1], *spec.strides, *spec.begins, spec.dilations[1]
    lines = [f"{ind}ih = oh0 * {s0} - {b0} + {rel} + tl.zeros([BLOCK_W], tl.int32)  # (a vector: the interpreter's masks)",
             f"{ind}row_ok = (ih >= 0) & (ih < n0)",
             f"{ind}for k1 in {inner}({kw}):",
             f"{ind}{IND}iw = ow * {s1} - {b1} + k1 * {d1}",
             f"{ind}{IND}ok = row_ok & (iw >= 0) & (iw < n1)",
             f"{ind}{IND}v = tl.load(xb + (ih * xs2 + iw * xs3)[:, None], mask=ok[:, None] & cm[None, :], other=0.0)",
             f"{ind}{IND}v = v.to({acc_t})"]
    for r, k0, taken in uses:
        mask = "cm" if taken is None else f"cm & {taken}"
        lines += [f"{ind}{IND}wv = tl.load(w_ptr + c * ws0 + {k0} * ws2 + k1 * ws3, mask={mask}, other=0.0)",
                  f"{ind}{IND}acc{r} += v * wv.to({acc_t})[None, :]"]
    return lines


def tiled_grid(out_shape, rows: int) -> tuple[tuple[int, int, int], dict]:
    """The grid and block sizes of the tiled form for an output [N, C, OH, OW]: up to MAX_BLOCK_C
    channels and a tile of up to TILE elements."""
    n, c, oh, ow = out_shape
    block_c = min(MAX_BLOCK_C, 1 << max(0, (c - 1).bit_length()))
    block_w = max(1, min(TILE // block_c, 1 << max(0, (ow - 1).bit_length())))
    grid = (n * -(-oh // rows), -(-ow // block_w), -(-c // block_c))
    return grid, {"BLOCK_W": block_w, "BLOCK_C": block_c, "num_warps": WARPS}
