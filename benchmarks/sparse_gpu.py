"""Dense against 2:4 sparse float16 on one NVIDIA GPU (issue 24), run by `benchmarks/sparse.py --device gpu`.

    PYTHONPATH=. python benchmarks/sparse.py --device gpu     # products and BERT-base b32: ~3-5 min on an H200

Products, y = x W (+ bias) with W [K, N] = prune_2_4 of a random matrix (2048^3, and BERT-base's
layers at M = 32 x 128 tokens), timed in rounds, alternating: cuBLAS (torch.matmul / addmm: the gpu
target's dense kernels), fusegraph's sparse kernel (lower_sparse.SparseWeight: cuSPARSELt on W^T,
bias fused, the result written transposed: y row-major), cuSPARSELt with a row-major y^T (torch
2.11's own layout, a probe of whether the layout costs host time), and torch's semi-structured form
(F.linear over to_sparse_semi_structured(W^T)). Two numbers per contender: `ms`, the GPU time of its
kernels (measure.cuda_measure: CUDA events behind a GPU-side sleep covering the host's work, what a
CUDA graph replay pays), and `host_ms`, the host time of one eager call (measure.host_measure); last,
fusegraph's two products captured once as CUDA graphs and replayed (`*_graph`: what a compiled
program runs; a capture that fails is reported in `graph_errors`). The earlier rows of 190-290 ms
were host time: a fixed 100 us sleep did not cover torch's per-call cuSPARSELt plan building.

BERT-base end to end (transformers' BertModel, random weights, every encoder Linear pruned to 2:4, as
benchmarks/gpu_vs_torch.py builds it; batch x 128 tokens), the same weights: fusegraph fp16 with the
sparse kinds switched off (its dense form), fusegraph fp16 as it compiles (each sparse step timed
against its dense kernel), torch eager fp16, torch eager with every pruned Linear's weight as a
SparseSemiStructuredTensor, and both torch forms replayed as CUDA graphs (their launches and
cuSPARSELt's plan building out of the timing). CUDA events around each call, contenders alternated in
rounds (gpu_vs_torch.time_alternating); errors are relative L2 against the pruned fp32 module on the GPU.
"""

from __future__ import annotations

import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import fusegraph
from benchmarks.gpu_vs_torch import bert, export_onnx, rel_err, time_alternating
from fusegraph.errors import FusegraphError
from fusegraph.targets.gpu import sparse_patterns
from fusegraph.targets.gpu.lower_sparse import SparseWeight
from fusegraph.targets.gpu.measure import cuda_measure, host_measure

PRODUCTS = "2048x2048x2048,4096x768x3072,4096x3072x768,4096x768x768"  # M x K x N (BERT-base: 32 x 128 tokens)
ROUNDS = 3  # rounds of the product rows (each a median of REPS calls per contender)
REPS = 10  # timed calls per round and contender


def pruned_weight(k: int, n: int, seed: int = 0) -> np.ndarray:
    return fusegraph.prune_2_4(np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32) * 0.05)


def product_row(m: int, k: int, n: int) -> dict:
    dev = torch.device("cuda")
    w = torch.from_numpy(pruned_weight(k, n)).half().to(dev)
    x = torch.randn(m, k, device=dev).half()
    b = torch.randn(n, device=dev).half()
    plain, biased = SparseWeight(), SparseWeight()
    semi = torch.sparse.to_sparse_semi_structured(w.t().contiguous())  # torch's form: a Linear's [N, K] weight
    packed = torch._cslt_compress(w.t().contiguous())
    fns = {"cublas": lambda: torch.matmul(x, w), "cublas_bias": lambda: torch.addmm(b, x, w),
           "fusegraph_2_4": lambda: plain(x, w), "fusegraph_2_4_bias": lambda: biased(x, w, b),
           "cusparselt_row_major_yt": lambda: torch._cslt_sparse_mm(packed, x.t()).t(),
           "torch_semi_structured_bias": lambda: F.linear(x, semi, b)}
    want = x.float() @ w.float()
    errs = {}
    for name, fn in fns.items():
        ref = want + b.float() if "bias" in name else want
        errs[name] = rel_err(fn().float(), ref)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(ROUNDS):
        names = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for name in names:
            samples[name].append(cuda_measure(fns[name], reps=REPS) * 1e3)
    ms = {name: round(statistics.median(v), 4) for name, v in samples.items()}
    host_ms = {name: round(host_measure(fn) * 1e3, 4) for name, fn in fns.items()}
    graph_errors = {}
    for name in ("fusegraph_2_4", "fusegraph_2_4_bias"):  # last: as the program runs them, one capture each
        try:
            replay = graphed(fns[name])
        except RuntimeError as e:  # reported in the row, not dropped silently
            graph_errors[name] = str(e).splitlines()[0][:300]
            continue
        errs[f"{name}_graph"] = rel_err(replay().float(), want + b.float() if "bias" in name else want)
        ms[f"{name}_graph"] = round(cuda_measure(replay, reps=REPS) * 1e3, 4)
    return {"m": m, "k": k, "n": n, "dtype": "float16", "ms": ms, "host_ms": host_ms, "rel_err": errs,
            "graph_errors": graph_errors,
            "speedup_2_4_vs_cublas": round(ms["cublas"] / ms["fusegraph_2_4"], 3),
            "speedup_2_4_bias_vs_cublas_bias": round(ms["cublas_bias"] / ms["fusegraph_2_4_bias"], 3),
            "speedup_torch_semi_bias_vs_cublas_bias": round(ms["cublas_bias"] / ms["torch_semi_structured_bias"], 3)}


def graphed(fn):
    """`fn` captured once as a CUDA graph: a function that replays it (its output tensor is the same each time)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # lazy initialization (cuBLAS handles, workspaces) outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out
    return replay


def prune_linears(model: nn.Module) -> int:
    """Every encoder Linear's weight [N, K] pruned 2:4 along K (prune_2_4 groups the rows of [K, N])."""
    count = 0
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and ".encoder." in f".{name}.":
            w = mod.weight.detach().numpy()
            mod.weight.data = torch.from_numpy(np.ascontiguousarray(fusegraph.prune_2_4(w.T).T))
            count += 1
    return count


def semi_structured(model: nn.Module) -> nn.Module:
    """A copy of fp16 CUDA `model` with its 2:4 Linear weights in torch's semi-structured form."""
    sparse = copy.deepcopy(model)
    for name, mod in sparse.named_modules():
        if isinstance(mod, nn.Linear) and ".encoder." in f".{name}.":
            mod.weight = nn.Parameter(torch.sparse.to_sparse_semi_structured(mod.weight.detach()), requires_grad=False)
    return sparse


def compile_fusegraph(onnx_bytes: bytes, sparse: bool):
    t0 = time.perf_counter()
    program = fusegraph.parse_onnx(onnx_bytes)
    mark = sparse_patterns.mark_sparse
    if not sparse:  # the dense form: no step gets a sparse kind
        sparse_patterns.mark_sparse = lambda module, groups: None
    try:
        program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True))
    finally:
        sparse_patterns.mark_sparse = mark
    return program.executable, time.perf_counter() - t0


def bert_row(batch: int) -> dict:
    timed, export = bert()
    row: dict = {"model": "bert-base", "batch": batch, "tokens": batch * 128, "dtype": "float16",
                 "pruned_linears": prune_linears(export)}
    timed.load_state_dict(export.state_dict())
    ids = torch.randint(0, 30522, (batch, 128))
    inputs, names = (ids, torch.ones(batch, 128, dtype=torch.int64)), ["input_ids", "attention_mask"]
    onnx_bytes = export_onnx(export, inputs, names)
    dev = torch.device("cuda")
    feeds = {n: x.to(dev) for n, x in zip(names, inputs)}
    targs = tuple(x.to(dev) for x in inputs)
    with torch.no_grad():
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = timed.to(dev)(*targs).float()
        fns, compile_s, errs = {}, {}, {}
        row["errors"] = {}
        for name, sparse in (("fusegraph_dense", False), ("fusegraph_2_4", True)):
            try:  # the 2:4 program captures cuSPARSELt's calls in its CUDA graph where they are chosen
                exe, compile_s[name] = compile_fusegraph(onnx_bytes, sparse)
            except (RuntimeError, FusegraphError) as e:  # reported in the row, the rest still measured
                row["errors"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                continue
            errs[name] = rel_err(exe.run_device(feeds)[0], ref)
            fns[name] = (lambda e: lambda: e.run_device(feeds))(exe)
            if sparse:
                row["choices"] = {k: v["name"] for k, v in exe.tuning.items() if k.startswith("2:4")}
                row["tuner_ms"] = {k: {c: round(s_ * 1e3, 4) for c, s_ in v.items()}
                                   for k, v in getattr(exe, "tuning_times", {}).items() if k.startswith("2:4")}
        model = timed.half()
        semi = semi_structured(model)
        eager = {"torch_dense": lambda: model(*targs), "torch_semi_structured": lambda: semi(*targs)}
        for name, fn in eager.items():
            errs[name] = rel_err(fn(), ref)
            fns[name] = fn
        times = time_alternating(fns)
        # last: a capture torch cannot make could leave the CUDA context unusable for what follows
        graphs, row["graph_errors"] = {}, {}
        for name, fn in eager.items():
            try:
                graphs[f"{name}_graph"] = graphed(fn)
            except RuntimeError as e:  # reported in the row, not dropped silently
                row["graph_errors"][name] = str(e).splitlines()[0][:300]
        for name, fn in graphs.items():
            errs[name] = rel_err(fn(), ref)
        if graphs:
            times.update(time_alternating(graphs))
    ms = {k: round(statistics.median(v), 4) for k, v in times.items()}
    row.update(ms=ms, rel_err=errs, compile_s={k: round(v, 2) for k, v in compile_s.items()})
    for name, (num, den) in {"speedup_2_4_vs_dense": ("fusegraph_dense", "fusegraph_2_4"),
                             "speedup_torch_semi_vs_torch_dense": ("torch_dense", "torch_semi_structured"),
                             "speedup_torch_semi_graph_vs_torch_dense_graph": ("torch_dense_graph",
                                                                               "torch_semi_structured_graph"),
                             "speedup_2_4_vs_torch_semi_graph": ("torch_semi_structured_graph", "fusegraph_2_4")}.items():
        if num in ms and den in ms:
            row[name] = round(ms[num] / ms[den], 3)
    picked = list(row.get("choices", {}).values())
    row["sparse_steps_chosen"] = f"{picked.count('cusparselt')}/{len(picked)}"
    return row


def main_gpu(products: str, batches: str) -> dict:
    if not torch.cuda.is_available():
        raise SystemExit("--device gpu needs an NVIDIA GPU (CUDA)")
    rows = []
    for spec in filter(None, products.split(",")):
        m, k, n = (int(v) for v in spec.split("x"))
        rows.append(product_row(m, k, n))
        r = rows[-1]
        print(f"{spec:>16}: GPU ms {r['ms']}  2:4 vs cuBLAS {r['speedup_2_4_vs_cublas']}x, with bias "
              f"{r['speedup_2_4_bias_vs_cublas_bias']}x; host ms per eager call {r['host_ms']}", flush=True)
    models = []
    for b in filter(None, batches.split(",")):
        models.append(bert_row(int(b)))
        r = models[-1]
        print(f"bert-base batch {b}: {r['ms']}  2:4 vs dense {r.get('speedup_2_4_vs_dense')}x  "
              f"sparse steps {r['sparse_steps_chosen']}  errors {r['errors']} {r['graph_errors']}", flush=True)
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "products": rows, "models": models}
