"""How much a compile thread's Python slows the gpu target's warm-up walk, at the interpreter's default
switch interval and at the one its compile scopes set (kernels.quick_gil_handoff). No GPU needed.

    python benchmarks/gil_handoff.py [--threads 1,2] [--steps 3000]

The walk is modelled by a loop of small torch calls (a tensor made, a view, its strides), each of
which releases the GIL as the walk's own tensor and launch calls do; the compile threads run Triton's
code generation (AST -> TTIR, the part of a compile that holds the GIL) of one of fusegraph's GEMM
kernels for sm_90, over and over. Per setting: the loop's seconds alone and beside N such threads, and
how many code generations the threads completed per second meanwhile and then without the loop (the
switching's own cost: their side of the trade).
Writes benchmarks/results/gil_handoff-<host>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import write_results  # noqa: E402


def front_end():
    """A function that runs Triton's code generation of one GEMM kernel once (K varies, so each is new)."""
    import importlib.util
    import tempfile

    import triton._C.libtriton as libtriton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compiler as triton_compiler

    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.triton_gemm import ACC, COL, GemmSpec, gemm_source
    from fusegraph.targets.gpu.triton_pointwise import HEADER

    spec = GemmSpec(call("add", Var(0), Var(1)), (DType.float16, DType.float16), (ACC, COL), DType.float16,
                    DType.float16, False, True)
    path = Path(tempfile.mkdtemp()) / "gil_handoff_mm.py"
    path.write_text(HEADER + gemm_source(spec, "mm"))
    loaded = importlib.util.spec_from_file_location("gil_handoff_mm", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    signature = {name: "*fp16" for name in ("a_ptr", "b_ptr", "out_ptr", "e1_ptr")}
    signature |= {name: "i32" for name in ("M", "N", "R", "s_ab", "s_ar", "s_ak", "s_bk", "s_bn", "s_ob", "s_or", "s_on",
                                            "s1_n")}
    target = GPUTarget("cuda", 90, 32)
    backend = triton_compiler.make_backend(target)
    options = backend.parse_options({"num_warps": 4, "num_stages": 3})
    count = [0]

    def once() -> None:
        count[0] += 1
        constants = {"K": 64 * (count[0] % 64 + 1), "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}
        context = libtriton.ir.context()
        libtriton.ir.load_dialects(context)
        backend.load_dialects(context)
        source = ASTSource(module.mm, signature | {c: "constexpr" for c in constants}, constants)
        source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    return once


def walk(steps: int) -> float:
    import torch

    x = torch.zeros(64, 64)
    t0 = time.perf_counter()
    for _ in range(steps):
        torch.empty(64, 64)
        x[:, :32].stride()
    return time.perf_counter() - t0


def beside(threads: int, steps: int, once) -> tuple[float, float, float]:
    """(the walk's seconds, code generations a second meanwhile, and a second after it, without the
    walk: the switching's own cost) with `threads` threads generating code."""
    stop, done = threading.Event(), [0]

    def work() -> None:
        while not stop.is_set():
            once()
            done[0] += 1
    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    time.sleep(0.3)
    start, t0 = done[0], time.perf_counter()
    seconds = walk(steps)
    rate = (done[0] - start) / (time.perf_counter() - t0)
    start, t0 = done[0], time.perf_counter()
    time.sleep(2.0)
    alone = (done[0] - start) / (time.perf_counter() - t0)
    stop.set()
    for w in workers:
        w.join()
    return seconds, rate, alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    from fusegraph.targets.gpu import kernels

    once = front_end()
    once()  # (Triton's first code generation sets things up)
    alone = min(walk(args.steps) for _ in range(3))
    rows = []
    for threads in (int(n) for n in args.threads.split(",")):
        for setting in ("default", "compile scopes"):
            scope = kernels.quick_gil_handoff() if setting == "compile scopes" else contextlib.nullcontext()
            with scope:
                interval = sys.getswitchinterval()
                seconds, rate, rate_alone = beside(threads, args.steps, once)
            rows.append({"threads": threads, "switch_interval_ms": round(interval * 1e3, 3), "walk_s": round(seconds, 3),
                         "slowdown": round(seconds / alone, 1), "code_generations_per_s": round(rate, 1),
                         "code_generations_per_s_without_walk": round(rate_alone, 1)})
            print(f"{threads} thread(s), switch interval {interval * 1e3:.1f} ms: walk {seconds:.3f} s "
                  f"({seconds / alone:.1f}x its {alone:.3f} s alone), {rate:.1f} code generations/s meanwhile, "
                  f"{rate_alone:.1f}/s without the walk")
    print("wrote", write_results("gil_handoff", {"steps": args.steps, "walk_alone_s": round(alone, 4), "rows": rows}))


if __name__ == "__main__":
    main()
