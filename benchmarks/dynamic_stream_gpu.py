"""Request streams through one dynamic program on the GPU, against torch.compile(dynamic=True) (issue 16, part b).

    PYTHONPATH=. python benchmarks/dynamic_shapes.py --part b --device gpu [--requests 200] [--bucket 32]
                                                     [--out $OUT/dynamic_stream-gpu.json]

The streams of benchmarks/dynamic_stream.py (BERT-base with random lengths in [8, 384], YOLOv8n with
random square sizes 320..640 step 32; batch 1, one request at a time), fp16, both contenders in this
process as benchmarks/gpu_vs_torch.py measures them, each stream cold (its compiles count):
- BERT-base: fusegraph runs fusegraph.models' bert_base (one dynamic program, a CUDA graph per
  shape, lengths padded to --bucket with attention_mask 0 as on cpu); torch runs transformers'
  BertModel(BertConfig()) -- the same architecture and sizes (12 layers, 768 wide, 12 heads, 3072,
  vocab 30522), SDPA attention -- under torch.compile(dynamic=True) at the raw lengths. (A
  transformers export does not parse with a dynamic sequence: its masks come from Range over the
  length, whose size the IR does not know.) fusegraph's first outputs are checked against ONNX
  Runtime (cpu) on its model.
- YOLOv8n: gpu_vs_torch's YOLOv8n with its anchor grid computed from the feature maps, so one module
  serves every size; fusegraph compiles its ONNX export (dynamic height and width), same weights;
  fusegraph's first outputs are checked against the fp32 torch module.
"""

from __future__ import annotations

import io
import statistics
import time

import numpy as np
import torch

import fusegraph
from benchmarks.dynamic_stream import SEQ, SIZES, pad, stream
from benchmarks.gpu_vs_torch import YoloV8n
from fusegraph.ir import Dim

CHECKED = 3  # requests whose outputs are checked


class YoloV8nDynamic(YoloV8n):
    """YOLOv8n whose anchors and strides follow the feature maps, as ultralytics' make_anchors does."""

    def grid(self, feats):
        anchors, strides = [], []
        for f, s in zip(feats, (8, 16, 32), strict=True):
            sy = torch.arange(f.shape[2], device=f.device, dtype=f.dtype) + 0.5
            sx = torch.arange(f.shape[3], device=f.device, dtype=f.dtype) + 0.5
            yy, xx = torch.meshgrid(sy, sx, indexing="ij")
            anchors.append(torch.stack((xx, yy), -1).view(-1, 2))
            strides.append((torch.zeros_like(xx) + s).view(-1, 1))
        return torch.cat(anchors).T.unsqueeze(0), torch.cat(strides).T.unsqueeze(0)


class BertLastHidden(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


def _timed(fn, requests) -> tuple[list[float], float, list]:
    """Per-request seconds (synchronized), the stream's total and the first outputs (on the host)."""
    lat, kept = [], []
    torch.cuda.synchronize()
    start = time.perf_counter()
    for k, r in enumerate(requests):
        t0 = time.perf_counter()
        out = fn(r)
        torch.cuda.synchronize()
        lat.append(time.perf_counter() - t0)
        if k < CHECKED:
            kept.append(out.float().cpu().numpy())
    return lat, time.perf_counter() - start, kept


def _summary(lat: list[float], total: float, compiles: int, compile_s: float) -> dict:
    # warm: the requests faster than twice the median (the others compiled something)
    warm = [t for t in lat if t < 2 * statistics.median(lat)]
    return {"total_s": total, "p50_ms": float(np.percentile(lat, 50)) * 1e3, "p99_ms": float(np.percentile(lat, 99)) * 1e3,
            "warm_p50_ms": float(np.percentile(warm, 50)) * 1e3, "warm_p99_ms": float(np.percentile(warm, 99)) * 1e3,
            "compiles": compiles, "compile_before_stream_s": compile_s, "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}


def _fusegraph(proto, dyn, requests, to_feeds, cache):
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    program = fusegraph.parse_onnx(proto, map_dyn_input_dims=dyn)
    program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True, dynamic_cache_size=cache))
    compile_s = time.perf_counter() - t0
    exe = program.executable
    lat, total, kept = _timed(lambda r: exe.run(to_feeds(r))[0], requests)
    row = _summary(lat, total, len(exe.specializations), compile_s)
    row["specialization_s"] = [s.seconds for s in exe.specializations]
    return row, kept


def _torch(module, requests, to_args):
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    compiled = torch.compile(module, dynamic=True)
    before = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)
    with torch.no_grad():
        lat, total, _ = _timed(lambda r: compiled(*to_args(r)), requests)
    graphs = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0) - before  # recompiles included
    return _summary(lat, total, int(graphs), 0.0)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / (np.linalg.norm(b) or 1.0))


def measure(model: str, n: int, seed: int, bucket: int, cache: int) -> dict:
    dev = torch.device("cuda")
    requests = stream(model, n, seed)
    torch.manual_seed(0)
    if model == "bert_base":
        from transformers import BertConfig, BertModel

        from fusegraph.models import get_model

        names = ("input_ids", "attention_mask", "token_type_ids")
        dyn = {k: [1, Dim(SEQ[0], SEQ[1])] for k in names}

        def fg_feeds(r):  # padded to the bucket, as on cpu (benchmarks/dynamic_stream.py)
            return {k: torch.from_numpy(v).to(dev) for k, v in (pad(r, bucket) if bucket > 1 else r).items()}

        proto = get_model("bert_base")
        fg, kept = _fusegraph(proto, dyn, requests, fg_feeds, cache)
        import onnxruntime as ort

        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        errs = [_rel(k[:, :r["input_ids"].shape[1]], sess.run(None, r)[0]) for k, r in zip(kept, requests, strict=False)]
        module = BertLastHidden(BertModel(BertConfig(attn_implementation="sdpa"), add_pooling_layer=False)).eval()
        module = module.to(dev).half()
        th = _torch(module, requests, lambda r: tuple(torch.from_numpy(r[k]).to(dev) for k in names))
        check = {"fusegraph_fp16_rel_err_vs_ort_fp32": max(errs)}
    else:
        fp32 = YoloV8nDynamic().eval()
        f = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(fp32, (torch.randn(1, 3, SIZES[0], SIZES[0]),), f, input_names=["input"], output_names=["output"],
                              opset_version=17, dynamo=False, dynamic_axes={"input": {2: "height", 3: "width"}, "output": {2: "anchors"}})
        dyn = {"input": [1, 3, Dim(SIZES[0], SIZES[-1]), Dim(SIZES[0], SIZES[-1])]}
        fg, kept = _fusegraph(f.getvalue(), dyn, requests, lambda r: {"input": torch.from_numpy(r["images"]).to(dev)}, cache)
        with torch.no_grad():
            ref = [fp32.to(dev)(torch.from_numpy(r["images"]).to(dev)).cpu().numpy() for r in requests[:CHECKED]]
        module = YoloV8nDynamic().eval()
        module.load_state_dict(fp32.state_dict())
        module = module.to(dev).half().to(memory_format=torch.channels_last)
        th = _torch(module, requests, lambda r: (torch.from_numpy(r["images"]).to(dev).half().contiguous(
            memory_format=torch.channels_last),))
        check = {"fusegraph_fp16_rel_err_vs_torch_fp32": max(_rel(k, r) for k, r in zip(kept, ref, strict=True))}
    row = {"model": model, "requests": n, "seed": seed, "bucket": bucket if model == "bert_base" else None, "cache": cache,
           "dtype": "float16", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "fusegraph": fg, "torch_compile_dynamic": th, **check,
           "total_ratio": fg["total_s"] / th["total_s"], "warm_p50_ratio": fg["warm_p50_ms"] / th["warm_p50_ms"]}
    print(f"{model}: fusegraph total {fg['total_s']:.1f} s (p50 {fg['p50_ms']:.2f} ms), torch.compile(dynamic=True) "
          f"{th['total_s']:.1f} s (p50 {th['p50_ms']:.2f} ms)", flush=True)
    return row
