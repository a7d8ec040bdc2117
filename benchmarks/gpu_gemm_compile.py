"""Seconds Triton takes to compile fusegraph's GEMM template (triton_gemm.py) for an sm_90 GPU (the
H200) on any machine, no GPU needed: per config and K, its generic form (K an argument: what tuning
times) against its K-constant form (what a static program runs once a config is chosen). A
K-constant compile is the one a cold compile waits for after its last choice.

    python benchmarks/gpu_gemm_compile.py [--problems 6272x256x960,6272x256x1024]
                                          [--configs 128,128,32,8,4,4;128,128,64,8,8,3]

A problem is MxNxK of a float16 dot with a bias-ReLU epilogue; a config is block_m, block_n,
block_k, group_m, warps, stages. Each compile goes into an empty Triton cache. Needs triton and torch
(CPU tensors give the strides; nothing runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEMS = "6272x256x256,6272x256x960,6272x256x1024,6272x256x2048"
CONFIGS = "128,128,32,8,4,4;64,128,32,8,4,4;64,64,32,8,4,4;64,128,64,8,4,3;128,128,64,8,8,3"


def compile_seconds(m: int, n: int, k: int, config, generic: bool) -> float:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.triton_gemm import GemmLauncher

    body = call("max", call("add", Var(0), Var(1)), 0.0)
    launcher = GemmLauncher(body, [DType.float16] * 2, (0,), DType.float16, DType.float16, config, generic)
    half = torch.float16
    a, b, out = torch.empty(m, k, dtype=half), torch.empty(k, n, dtype=half), torch.empty(m, n, dtype=half)
    bias = torch.empty(n, dtype=half).expand(m, n)
    launcher._configure(out, a, b, [bias])
    fn = launcher.fn.fn
    values = iter([a, b, out, bias, *launcher.args])
    constants = {name: v for name, v in launcher.meta.items() if name not in ("num_warps", "num_stages")}
    signature, attrs = {}, {}
    for index, name in enumerate(fn.arg_names):  # as Triton's launcher specializes the arguments
        if name in constants:
            signature[name] = "constexpr"
            continue
        value = next(values)
        if isinstance(value, torch.Tensor) or value % 16 == 0:
            attrs[(index,)] = [["tt.divisibility", 16]]
        if not isinstance(value, torch.Tensor) and value == 1:
            signature[name], constants[name] = "constexpr", 1
        else:
            signature[name] = "*fp16" if isinstance(value, torch.Tensor) else "i32"
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    constexprs = {(fn.arg_names.index(name),): v for name, v in constants.items()}
    t0 = time.perf_counter()
    triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32), options=options)
    return time.perf_counter() - t0


def main() -> None:
    from fusegraph.targets.gpu.triton_gemm import GemmConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=PROBLEMS)
    ap.add_argument("--configs", default=CONFIGS)
    args = ap.parse_args()
    for problem in args.problems.split(","):
        m, n, k = map(int, problem.split("x"))
        for text in args.configs.split(";"):
            config = GemmConfig(*map(int, text.split(",")))
            times = []
            for generic in (True, False):
                os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemm_compile_")
                times.append(compile_seconds(m, n, k, config, generic))
            print(f"{problem:16s} {config.name():22s} K/BLOCK_K {k // config.block_k:4d}  generic {times[0]:5.2f} s"
                  f"  K-constant {times[1]:5.2f} s", flush=True)


if __name__ == "__main__":
    main()
