"""Seconds Triton takes to compile fusegraph's GEMM template (triton_gemm.py) for an sm_90 GPU (the
H200) on any machine, no GPU needed, and, with `--time` on a GPU, each form's kernel time. Per config
and K, four forms: generic (K an argument: what tuning times), K-constant (what a static program
runs once a config is chosen), no-unroll (K-constant, ptxas told not to unroll its main loop) and
generic-x2 (the generic form's main loop unrolled twice by Triton). A K-constant compile is the one
a cold compile waits for after its last choice.

Triton emits the same PTX main loop whether K is an argument or a constant; as a constant, the trip
count is known to ptxas, which may unroll the loop, and that unrolling is the slow compile: on the
2-core VM (Triton 3.6, sm_90) 128x128x32 at K = 1024 (32 trips) took ptxas 4.1 s for 2160 SASS
instructions, 0.14 s for 1056 with `.pragma "nounroll"` at the loop's header: the size of the same
kernel at K = 2048, which ptxas leaves rolled. `--time` weighs what the unrolling buys.

    python benchmarks/gpu_gemm_compile.py [--problems 6272x256x960,6272x256x1024]
                                          [--configs 128,128,32,8,4,4;128,128,64,8,8,3]
    python benchmarks/gpu_gemm_compile.py --time [--problems ...] [--rounds 5]   # on a GPU
    python benchmarks/gpu_gemm_compile.py --recorded   # the winners the H200 tuner recorded, per row

A problem is MxNxK of a float16 dot with a bias-ReLU epilogue; a config is block_m, block_n,
block_k, group_m, warps, stages (by default, with --time, the configs the tuner would time for the
problem: autotune.worth_timing). Each compile goes into an empty Triton cache. Needs triton and torch.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEMS = "6272x256x256,6272x256x960,6272x256x1024,6272x256x2048"
# ResNet-50 b32's and DeepLabV3 b32's 1x1 convolutions, implicit-GEMM sizes of 3x3 ones, BERT-base b32's
TIMED_PROBLEMS = ("6272x256x960,6272x256x1024,1568x256x1024,1568x1024x256,392x512x2048,392x2048x512,"
                  "25088x64x256,6272x128x1152,1568x256x2304,4096x768x768,4096x768x3072")
CONFIGS = "128,128,32,8,4,4;64,128,32,8,4,4;64,64,32,8,4,4;64,128,64,8,4,3;128,128,64,8,8,3"
# generic-x2: the generic form with its main loop unrolled twice by Triton (`tl.range`'s loop_unroll_factor)
FORMS = ("generic", "K-constant", "no-unroll", "generic-x2")
SUFFIX = "_nounroll"  # the kernel name of the no-unroll form: what the PTX hook looks for
MAIN_LOOP = "for k in range(0, K, BLOCK_K):"  # (triton_gemm.gemm_source's)
UNROLLED_LOOP = "for k in tl.range(0, K, BLOCK_K, loop_unroll_factor=2):"
LOOP_HEADER = re.compile(r"^(\$L__BB\d+_\d+:[^\n]*Inner Loop Header[^\n]*\n)", re.M)
REWRITTEN: set[str] = set()  # the kernels whose PTX the hook rewrote in this process


def no_unroll(ptx: str) -> str:
    """`ptx` with `.pragma "nounroll"` at each loop header LLVM marked (a kernel of one trip has none)."""
    return LOOP_HEADER.sub(lambda m: m.group(1) + '\t.pragma "nounroll";\n', ptx)


def install_no_unroll_hook() -> None:
    """Triton's PTX rewritten by `no_unroll` for kernels named ...SUFFIX: its NVIDIA backend's make_ptx
    wrapped (Triton's stages hook changed its calling convention between 3.6 and 3.8)."""
    from triton.backends.nvidia.compiler import CUDABackend

    make_ptx = CUDABackend.make_ptx

    def wrapped(self, src, metadata, *args, **kwargs):
        text = make_ptx(self, src, metadata, *args, **kwargs)
        if not metadata["name"].endswith(SUFFIX):
            return text
        REWRITTEN.add(metadata["name"])
        return no_unroll(text)
    CUDABackend.make_ptx = wrapped


def operands(m: int, n: int, k: int, device: str = "cpu") -> tuple:
    """(out, a, b, bias) of the problem: float16, random, the bias broadcast over the rows."""
    import torch

    half = torch.float16
    a, b = torch.randn(m, k, dtype=half, device=device), torch.randn(k, n, dtype=half, device=device) / k ** 0.5
    out, bias = torch.empty(m, n, dtype=half, device=device), torch.randn(n, dtype=half, device=device).expand(m, n)
    return out, a, b, bias


def gemm(config, form: str, tensors: tuple):
    """The launcher of the problem of `tensors` (`operands`) in `form`, configured for them."""
    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.kernels import load_kernel
    from fusegraph.targets.gpu.triton_gemm import GemmLauncher

    body = call("max", call("add", Var(0), Var(1)), 0.0)
    launcher = GemmLauncher(body, [DType.float16] * 2, (0,), DType.float16, DType.float16, config,
                            form.startswith("generic"))
    out, a, b, bias = tensors
    launcher._ready(out, a, b, (bias,))
    if form in ("no-unroll", "generic-x2"):
        (name, source), = launcher.sources.items()
        suffix = SUFFIX if form == "no-unroll" else "_x2"
        source = source.replace(f"def {name}(", f"def {name}{suffix}(")
        if form == "generic-x2":
            if MAIN_LOOP not in source:
                raise RuntimeError("the GEMM template's main loop is no longer written as this benchmark expects")
            source = source.replace(MAIN_LOOP, UNROLLED_LOOP)
        launcher.fn = load_kernel(source, name + suffix)
        launcher.launch = launcher.fn[launcher.grid]
    return launcher


def compile_seconds(m: int, n: int, k: int, config, form: str) -> float:
    """Seconds of triton.compile for sm_90 of the problem's kernel in `form`, into the current cache."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out, a, b, bias = operands(m, n, k)
    launcher = gemm(config, form, (out, a, b, bias))
    fn = launcher.fn.fn
    values = iter([a, b, out, bias, *launcher.args])  # the kernel's arguments, in order
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


def fresh_compile_seconds(m: int, n: int, k: int, config, form: str) -> float:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemm_compile_")
    return compile_seconds(m, n, k, config, form)


def time_forms(m: int, n: int, k: int, config, rounds: int) -> dict:
    """Each form's kernel time on the GPU (median of `rounds` alternating rounds, each the median of
    cuda_measure's runs) and how far its output is from the generic form's (they should agree)."""
    from fusegraph.targets.gpu.measure import cuda_measure

    tensors = operands(m, n, k, "cuda")
    outs = {form: tensors[0].clone() for form in FORMS}
    launchers = {form: gemm(config, form, (outs[form], *tensors[1:])) for form in FORMS}
    runs = {form: functools.partial(launchers[form], outs[form], *tensors[1:]) for form in FORMS}
    samples: dict[str, list[float]] = {form: [] for form in FORMS}
    for run in runs.values():
        run()  # compiled here, in this process (the hook's): a no-unroll kernel built elsewhere is not one
    if launchers["no-unroll"].fn.fn.__name__ not in REWRITTEN:
        raise RuntimeError("the no-unroll kernel was compiled without its PTX rewritten")
    for _ in range(rounds):
        for form in FORMS:
            samples[form].append(cuda_measure(runs[form], reps=30))
    return {"us": {form: round(statistics.median(s) * 1e6, 2) for form, s in samples.items()},
            "max_diff": max(float((outs[f].float() - outs["generic"].float()).abs().max()) for f in FORMS)}


def recorded_winners() -> dict[tuple, set[str]]:
    """(M, N, K, config) of each float16 problem a template won in the tuner timings recorded in
    benchmarks/results (gpu_config_wins.recorded) -> the rows that recorded it: the K-constant kernels
    those rows' cold compiles built."""
    from benchmarks.gpu_config_wins import problem_dims, recorded
    from fusegraph.targets.gpu.triton_gemm import GemmConfig

    winners: dict[tuple, set[str]] = {}
    for (row, problem), times in recorded(Path(__file__).resolve().parent / "results").items():
        match = re.fullmatch(r"(\d+)x(\d+)x(\d+)_g(\d+)_w(\d+)_s(\d+)", min(times, key=times.__getitem__))
        if match and " float16->" in problem:  # (the library's wins, and float32 products, build no template)
            winners.setdefault((*problem_dims(problem), GemmConfig(*map(int, match.groups()))), set()).add(row)
    return winners


def compile_recorded() -> None:
    """Each recorded winner's K-constant and no-unroll compile, then per row their sums and the longest."""
    per_row: dict[str, list[tuple[float, float]]] = {}
    for (m, n, k, config), rows in sorted(recorded_winners().items(), key=lambda item: item[0][:3]):
        seconds = [round(fresh_compile_seconds(m, n, k, config, form), 2) for form in ("K-constant", "no-unroll")]
        print(f"{m}x{n}x{k:<6d} {config.name():22s} K/BLOCK_K {k // config.block_k:4d}  K-constant {seconds[0]:5.2f} s"
              f"  no-unroll {seconds[1]:5.2f} s  {','.join(sorted(rows))}", flush=True)
        for row in rows:
            per_row.setdefault(row, []).append((seconds[0], seconds[1]))
    for row, pairs in sorted(per_row.items()):
        print(f"{row:34s} {len(pairs):3d} kernels  K-constant {sum(a for a, _ in pairs):6.2f} s (longest "
              f"{max(a for a, _ in pairs):5.2f})  no-unroll {sum(b for _, b in pairs):6.2f} s (longest "
              f"{max(b for _, b in pairs):5.2f})", flush=True)


def main() -> None:
    from fusegraph.targets.gpu.autotune import worth_timing
    from fusegraph.targets.gpu.triton_gemm import GemmConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=None)
    ap.add_argument("--configs", default=None, help="default: CONFIGS; with --time, the tuner's for each problem")
    ap.add_argument("--time", action="store_true", help="also time each form on the GPU")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--recorded", action="store_true",
                    help="the K-constant kernels of every template win the tuner recorded (benchmarks/results)")
    args = ap.parse_args()
    install_no_unroll_hook()
    if args.recorded:
        compile_recorded()
        return
    rows = []
    for problem in (args.problems or (TIMED_PROBLEMS if args.time else PROBLEMS)).split(","):
        m, n, k = map(int, problem.split("x"))
        if args.configs or not args.time:
            configs = [GemmConfig(*map(int, text.split(","))) for text in (args.configs or CONFIGS).split(";")]
        else:
            configs = worth_timing(m, n, k, 132)
        for config in configs:
            seconds = {form: round(fresh_compile_seconds(m, n, k, config, form), 2) for form in FORMS}
            row = {"problem": problem, "config": config.name(), "trips": k // config.block_k, "compile_s": seconds}
            line = (f"{problem:16s} {config.name():22s} K/BLOCK_K {k // config.block_k:4d}  compile "
                    + "  ".join(f"{form} {s:5.2f} s" for form, s in seconds.items()))
            if args.time:
                row |= time_forms(m, n, k, config, args.rounds)
                line += "  " + "  ".join(f"{form} {us:8.2f} us" for form, us in row["us"].items())
            rows.append(row)
            print(line, flush=True)
    if args.time:
        from benchmarks._common import write_results

        print(f"results: {write_results('gpu_gemm_compile', {'rows': rows})}")


if __name__ == "__main__":
    main()
