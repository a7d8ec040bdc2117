"""Registers, spills and compile time of fusegraph's tiled depthwise kernel (triton_depthwise.py) per
convolution shape, compiled by Triton for an sm_90a GPU (the H200) on any machine, with no GPU: Triton's own
compile (its bundled ptxas, its specialization of the integer arguments divisible by 16) and its
bundled cuobjdump's resource usage of the binary. A kernel that spills runs many times slower (an
EfficientNet-B0 5x5 / 2 at 144 channels and four rows a program: 558 us against 62 at one row on the
H200; here, with Triton 3.9, 32 registers and 4.5 KB of stack for its spills, where one row a program
takes 142 registers and no stack), so this says which window sizes and rows a program are worth
timing on the device at all.

    python benchmarks/triton_depthwise_regs.py [--channels 72,144] [--windows 3,5] [--strides 1,2]
                                               [--rows 1,2,4] [--size 56] [--batch 32] [--dtype float16]
                                               [--tile 1024] [--block-c 64] [--warps 4] [--unrolled]

Prints one line per shape: registers a thread, its stack in bytes (spilled registers), the tile
(BLOCK_W x BLOCK_C, from triton_depthwise.tiled_grid) and the seconds Triton took to compile it into
an empty cache (`--unrolled`: with every tap unrolled, as before windows of one output row past
triton_depthwise.ROLLED_ROWS_TAPS taps looped over their rows). Needs triton (no GPU, no torch device).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import add_depthwise_form_args, set_depthwise_form  # noqa: E402

POINTER = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}  # Triton's signature types


def compile_one(channels: int, window: int, stride: int, rows: int, size: int, batch: int, dtype_name: str) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.kernels import load_kernel
    from fusegraph.targets.gpu.triton_depthwise import tiled_grid
    from fusegraph.targets.gpu.triton_pool import PoolSpec, pool_source

    dtype = DType[dtype_name]
    pad, out = window // 2, (size + 2 * (window // 2) - window) // stride + 1
    spec = PoolSpec("depthwise", dtype, (window, window), (stride, stride), (pad, pad), (1, 1), (0, 2, 3, 1), True, rows)
    fn = load_kernel(pool_source(spec, "dw"), "dw").fn  # as the gpu target loads it
    _, meta = tiled_grid((batch, channels, out, out), rows)
    c, k = channels, window
    ints = {"numel": batch * c * out * out, "o0": batch, "o1": c, "o2": out, "o3": out, "n0": size, "n1": size,
            "xs0": c * size * size, "xs1": 1, "xs2": size * c, "xs3": c, "os0": c * out * out, "os1": 1,
            "os2": out * c, "os3": c, "ws0": k * k, "ws2": k, "ws3": 1}
    signature, constants, attrs = {}, {"BLOCK_W": meta["BLOCK_W"], "BLOCK_C": meta["BLOCK_C"]}, {}
    for i, arg in enumerate(fn.arg_names):  # as Triton's launcher specializes them
        if arg in constants:
            signature[arg] = "constexpr"
        elif arg.endswith("_ptr"):
            signature[arg] = "*fp32" if arg == "cnt_ptr" else POINTER[dtype_name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif ints[arg] == 1:
            signature[arg], constants[arg] = "constexpr", 1
        else:
            signature[arg] = "i32"
            if ints[arg] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="dw_regs_")  # a compile, not a cache hit
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": meta["num_warps"]})
    seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "--dump-resource-usage", str(cubin)], capture_output=True,
                               text=True).stdout
    found = {key: int(m.group(1)) for key in ("REG", "STACK") if (m := re.search(rf"{key}:(\d+)", usage))}
    return {"registers": found.get("REG"), "stack_bytes": found.get("STACK"),
            "tile": f"{meta['BLOCK_W']}x{meta['BLOCK_C']}", "output": out, "compile_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--channels", default="72,144")
    ap.add_argument("--windows", default="3,5")
    ap.add_argument("--strides", default="1,2")
    ap.add_argument("--rows", default="1,2,4")
    ap.add_argument("--size", type=int, default=56, help="input height and width")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    add_depthwise_form_args(ap)
    args = ap.parse_args()
    set_depthwise_form(args)
    grid = itertools.product(*([int(v) for v in text.split(",")]
                               for text in (args.channels, args.windows, args.strides, args.rows)))
    for c, k, s, r in grid:
        got = compile_one(c, k, s, r, args.size, args.batch, args.dtype)
        print(f"C {c:5d}  {k}x{k} / {s}  rows {r}  tile {got['tile']:>6s}  registers {got['registers']}  "
              f"stack (spills) {got['stack_bytes']} bytes  compile {got['compile_s']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
