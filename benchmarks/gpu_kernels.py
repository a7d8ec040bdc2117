"""Where the GPU time goes: the kernels one call of fusegraph's gpu program launches, next to those of
torch.compile(mode="reduce-overhead") on the same model (gpu_vs_torch.py's models, fp16).

    python benchmarks/gpu_kernels.py [--rows yolo:1,resnet50:1] [--calls 20] [--out FILE]

For each contender: kernels per call, total kernel time per call, and the kernels by time (name, calls per
call, microseconds per call), from torch.profiler over --calls replays after warm-up. A tool for finding what
to fuse next; latency comparisons live in gpu_vs_torch.py.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import fusegraph  # noqa: E402
from benchmarks.gpu_vs_torch import build, export_onnx  # noqa: E402


def kernels(fn, calls: int) -> dict[str, tuple[float, float]]:
    """name -> (launches per call, microseconds per call)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    count: dict[str, int] = defaultdict(int)
    us: dict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            count[e.name] += 1
            us[e.name] += e.device_time
    return {k: (count[k] / calls, us[k] / calls) for k in count}


def report(title: str, table: dict[str, tuple[float, float]], top: int = 40) -> str:
    n = sum(c for c, _ in table.values())
    total = sum(t for _, t in table.values())
    lines = [f"== {title}: {n:.0f} kernels/call, {total:.1f} us kernel time/call"]
    for name, (c, t) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"{t:9.1f} us  {c:5.1f}x  {name[:110]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="yolo:1,resnet50:1")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    text = []
    for spec in args.rows.split(","):
        name, batch = spec.split(":")
        timed, export, inputs, names, convnet = build(name, int(batch))
        program = fusegraph.parse_onnx(export_onnx(export, inputs, names))
        program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True))
        exe = program.executable
        feeds = {n: x.to(dev) for n, x in zip(names, inputs)}
        text.append(report(f"{spec} fusegraph ({len(exe.steps)} steps)", kernels(functools.partial(exe.run_device, feeds), args.calls)))
        fmt = torch.channels_last if convnet else torch.contiguous_format
        model = timed.to(dev).half().to(memory_format=fmt)
        targs = tuple(x.to(dev).half().contiguous(memory_format=fmt) if x.is_floating_point() else x.to(dev)
                      for x in inputs)
        with torch.no_grad():
            torch._dynamo.reset()
            compiled = torch.compile(model, mode="reduce-overhead")
            text.append(report(f"{spec} torch.compile reduce-overhead", kernels(functools.partial(compiled, *targs), args.calls)))
        print(text[-2], text[-1], sep="\n", flush=True)
    if args.out:
        Path(args.out).write_text("\n\n".join(text) + "\n")


if __name__ == "__main__":
    main()
