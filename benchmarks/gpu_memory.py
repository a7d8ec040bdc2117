"""What a compiled gpu program holds on the device, by the code that allocated it (zoo models, fp16).

    python benchmarks/gpu_memory.py [--rows resnet50:32,yolov8n:16] [--top 12]

For each row: the allocator's peak while the program was compiled and run once, what it still holds
afterwards, and the blocks still allocated grouped by the fusegraph frames that allocated them
(torch's memory history, Python stacks), largest first; then the largest allocations made on the
way. A tool for finding where peak memory goes (gpu_vs_torch.py compares the peaks with torch's);
this is how the second cuBLAS workspace of the warm-up's side stream was found. Memory a CUDA graph's
private pool keeps after its capture (the capture's transients, its cuBLAS workspace) is reserved,
not allocated, and does not appear among the blocks.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import fusegraph  # noqa: E402
from fusegraph import models  # noqa: E402


def site(frames: list[dict]) -> str:
    """The fusegraph frames of an allocation's stack, innermost first ("file:line:function; ...")."""
    own = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in frames if "fusegraph" in f["filename"]]
    return "; ".join(own)[:300] or "(outside fusegraph)"


def row(name: str, batch: int, top: int) -> list[str]:
    dims = {k: (batch, *v[1:]) for k, v in models.MODELS[name].default_shapes(batch=1).items()}
    gc.collect()  # the previous row's program
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    program = fusegraph.parse_onnx(models.get_model(name).SerializeToString(), map_input_dims=dims)
    program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True))
    feeds = {k: torch.rand(*v, device="cuda") for k, v in dims.items()}
    program.executable.run_device(feeds)
    torch.cuda.synchronize()
    mib = 2**20
    lines = [f"== {name} b{batch}: peak {(torch.cuda.max_memory_allocated() - base) / mib:.1f} MiB, "
             f"held {(torch.cuda.memory_allocated() - base) / mib:.1f} MiB (inputs included)"]
    snap = torch.cuda.memory._snapshot()
    held: Counter = Counter()
    for segment in snap["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                held[site(block.get("frames", []))] += block["size"]
    lines += [f"{n / mib:9.1f} MiB  {where}" for where, n in held.most_common(top)]
    allocs = [e for e in (snap.get("device_traces") or [[]])[0] if e["action"] == "alloc"]
    lines.append("largest allocations on the way:")
    lines += [f"{e['size'] / mib:9.1f} MiB  {site(e.get('frames', []))}"
              for e in sorted(allocs, key=lambda e: -e["size"])[:top]]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="resnet50:32,yolov8n:16", help="zoo model:batch, comma-separated")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_memory.py needs a CUDA GPU")
    torch.zeros(1, device="cuda")
    for spec in a.rows.split(","):
        name, batch = spec.split(":")
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
        print("\n".join(row(name, int(batch), a.top)), flush=True)
        torch.cuda.memory._record_memory_history(enabled=None)


if __name__ == "__main__":
    main()
