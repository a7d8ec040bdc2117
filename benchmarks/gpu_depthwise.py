"""Depthwise convolutions on the GPU: cuDNN (as the gpu target calls it: heuristics, no benchmarking)
against fusegraph's Triton window kernel (triton_pool.py), per convolution of real models, and which
of the two the gpu target picks (lower_nn.triton_depthwise_rows). Needs CUDA, torch and torchvision.

    python benchmarks/gpu_depthwise.py [--models mobilenet_v3_large,efficientnet_b0,convnext_tiny]
                                       [--batches 1,32] [--layout channels_last|contiguous] [--rows 1,2,4]
                                       [--tile 1024] [--block-c 64] [--warps 4] [--unrolled]

Each model's depthwise convolutions (distinct shapes, found by running it once at 224x224) in fp16, at
each batch: cuDNN, aten's own CUDA kernel (`_conv_depthwise2d`, contiguous operands) and Triton's
tiled form with each --rows (output rows a program), each captured in a CUDA graph of 50 calls after
warm-up, replayed in alternating rounds, best round reported in microseconds a call; plus the Triton
output's relative error against cuDNN's and the seconds cuDNN's and aten's first calls took (cuDNN's:
its plan for the shape, which the compile pays). `--unrolled` unrolls every tap of the tiled form
(windows past triton_depthwise.ROLLED_ROWS_TAPS taps otherwise loop over their rows), `--block-c`
caps its channels a tile (triton_depthwise.MAX_BLOCK_C; fewer make more programs of a small layer),
`--warps` sets its warps a program (triton_depthwise.WARPS).
Writes benchmarks/results/gpu_depthwise-<host>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import add_depthwise_form_args, set_depthwise_form, write_results  # noqa: E402

CALLS = 50   # calls a graph
ROUNDS = 5   # alternating replays of each engine's graph


def depthwise_convs(name: str) -> list[tuple]:
    """(input C, H, W), weight shape, stride, padding, dilation, groups of each distinct depthwise
    convolution of the torchvision model `name`."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)().eval()
    found: list[tuple] = []

    def record(mod, inputs, output):
        found.append((tuple(inputs[0].shape[1:]), tuple(mod.weight.shape), mod.stride, mod.padding, mod.dilation,
                      mod.groups))
    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d) and mod.groups == mod.in_channels == mod.out_channels > 1:
            mod.register_forward_hook(record)
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    return list(dict.fromkeys(found))


def graph_of(fn):
    import torch

    for _ in range(3):
        fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    return graph


def replay_us(graph) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / CALLS


def measure(conv: tuple, batch: int, layout, rows: list[int]) -> dict:
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.lower_nn import triton_depthwise_rows
    from fusegraph.targets.gpu.triton_pool import PoolLauncher

    chw, w_shape, stride, pad, dil, groups = conv
    x = torch.randn(batch, *chw, device="cuda", dtype=torch.float16).to(memory_format=layout)
    w = (torch.randn(*w_shape, device="cuda", dtype=torch.float16) * 0.3).to(memory_format=layout)
    t0 = time.perf_counter()
    want = torch.nn.functional.conv2d(x, w, None, stride, pad, dil, groups)
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    # every graph's operands and launchers live as long as its graph (`calls`): a replay reads them
    calls = {"cudnn": lambda: torch.nn.functional.conv2d(x, w, None, stride, pad, dil, groups)}
    # aten's own CUDA depthwise kernel (no cuDNN plan), over contiguous operands
    xc, wc = x.contiguous(), w.contiguous()
    t0 = time.perf_counter()
    torch.ops.aten._conv_depthwise2d(xc, wc, w_shape[2:], None, stride, pad, dil)
    torch.cuda.synchronize()
    aten_first_call_s = time.perf_counter() - t0
    calls["aten"] = lambda: torch.ops.aten._conv_depthwise2d(xc, wc, w_shape[2:], None, stride, pad, dil)
    errs, forms = {}, {}
    for r in rows:
        out = torch.empty_like(want, memory_format=layout)
        launcher = PoolLauncher("depthwise", DType.float16, w_shape[2:], stride, pad, dil,
                                torch.ones(1, device="cuda"), None, rows=r)
        launcher(out, x, w)
        errs[r] = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
        forms[r] = "tiled" if any("BLOCK_C" in src for src in launcher.sources.values()) else "flat"
        calls[f"triton_rows{r}"] = lambda launcher=launcher, out=out: launcher(out, x, w)
    graphs = {name: graph_of(fn) for name, fn in calls.items()}
    best = {name: float("inf") for name in graphs}
    for _ in range(ROUNDS):
        for name, graph in graphs.items():
            best[name] = min(best[name], replay_us(graph))
    triton = {name: round(us, 2) for name, us in best.items() if name.startswith("triton")}
    return {"batch": batch, "input_chw": list(chw), "kernel": list(w_shape[2:]), "stride": list(stride),
            "cudnn_us": round(best["cudnn"], 2), "aten_us": round(best["aten"], 2),
            "aten_first_call_s": round(aten_first_call_s, 3), "triton_us": min(triton.values()), **triton,
            "ratio": round(min(triton.values()) / best["cudnn"], 3), "triton_form": forms[rows[0]],
            "rel_err": max(errs.values()), "cudnn_first_call_s": round(first_call_s, 3),
            "gpu_target_runs": "triton" if triton_depthwise_rows(tuple(w_shape[2:]), want.numel()) else "cudnn"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenet_v3_large,efficientnet_b0,convnext_tiny")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--layout", choices=["channels_last", "contiguous"], default="channels_last")
    parser.add_argument("--rows", default="1,2,4", help="the tiled form's output rows a program, each timed")
    add_depthwise_form_args(parser)
    args = parser.parse_args()
    form = set_depthwise_form(args)
    import torch

    torch.backends.cudnn.benchmark = False  # as the gpu target runs cuDNN (executable._LibraryFlags)
    layout = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
    rows = []
    for model in args.models.split(","):
        convs = depthwise_convs(model)
        for batch in (int(b) for b in args.batches.split(",")):
            totals = {"cudnn_us": 0.0, "aten_us": 0.0, "triton_us": 0.0}
            for conv in convs:
                row = {"model": model, **measure(conv, batch, layout, [int(r) for r in args.rows.split(",")])}
                rows.append(row)
                for key in totals:
                    totals[key] += row[key]
            print(f"{model} batch {batch}: {len(convs)} depthwise convolutions, cuDNN {totals['cudnn_us']:.1f} us, "
                  f"aten {totals['aten_us']:.1f} us, Triton (best rows each) {totals['triton_us']:.1f} us", flush=True)
            path = write_results("gpu_depthwise", {"layout": args.layout, **form, "calls_a_graph": CALLS,
                                                   "rounds": ROUNDS, "rows": rows})  # after each model and batch
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
