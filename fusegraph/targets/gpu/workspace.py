"""Whether a static gpu program leaves cuBLAS out: its GEMMs then run as Triton templates only.

cuBLAS, under torch, holds a workspace per stream for the life of the process, allocated at its
first call: 32 MiB on Hopper (33 MiB measured on the H200, cuBLASLt's included), about 8 MiB on
older GPUs (torch's CublasHandlePool.cpp; CUBLAS_WORKSPACE_CONFIG sizes it). Timing cuBLAS
against the templates allocates it too, even when the templates win every problem. For a small
program that is most of its memory: MobileNetV2 at batch 1 in fp16 peaked at 10.8 MiB (compile
and one run) without cuBLAS and at 42.8 MiB with it timed, eager torch at 40.3.

So the default gemm mode ("auto") leaves cuBLAS out of the candidates (tuner mode "triton") where
the workspace would be larger than all the program's own device memory (weights and activations),
unless the program calls cuBLAS anyway (lowerings registered with `cublas=`: the attention's math
fallback, plain and integer matmuls, sparse and quantized GEMMs, einsum, NMS, patch-embedding
convolutions; its workspace is paid either way). On the H200, fp16, the templates alone cost there (`benchmarks/gpu_gemm_modes.py`): MobileNetV2 b1
0.3 % (0.2034 against 0.2027 ms), LR-ASPP b1 0.1 %, DeepLabV3 b1 1.8 %, EfficientNet-B0 b1 3.2 %,
ShuffleNetV2 b1 4 %; peak memory 10.8 / 13.1 / 32.5 / 13.8 / 6.4 MiB against 42.8 / 44.5 / 61.7
/ 46.2 / 39.3 with cuBLAS timed. Larger programs keep timing cuBLAS: RegNetY-400MF at batch 32
ran 17 % slower on templates alone, ResNeXt-50 b1 9 %. `GpuTarget(gemm="library")` or
`gemm="triton"` (FUSEGRAPH_GPU_GEMM) is taken as it is.
"""

from __future__ import annotations

import os
from typing import Any

MIB = 2**20


def cublas_workspace_bytes(device: Any) -> int:
    """cuBLAS's workspace per stream as torch sizes it: CUBLAS_WORKSPACE_CONFIG's ":KiB:count"
    pairs when set, else 32 MiB from compute capability 9 on and 4096 KiB x 2 + 16 KiB x 8 before;
    none off CUDA (Triton's interpreter: torch's CPU matmuls hold no workspace)."""
    if device.type != "cuda":
        return 0
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    parts = config.split(":")[1:]
    if parts and len(parts) % 2 == 0 and all(p.isdigit() for p in parts):
        return sum(int(kib) * 1024 * int(count) for kib, count in zip(parts[::2], parts[1::2]))
    from .device import torch

    major = torch().cuda.get_device_properties(device).major
    return 32 * MIB if major >= 9 else 4096 * 1024 * 2 + 16 * 1024 * 8


def leaves_cublas_out(steps: list[Any], own_bytes: int, device: Any) -> bool:
    """Whether a program of these plan steps, holding `own_bytes` of weights and activations, runs
    its GEMMs on the templates alone (see the module docstring)."""
    from .lowering import find_lowering

    if any(find_lowering(s).may_call_cublas(s) for s in steps):
        return False
    return own_bytes < cublas_workspace_bytes(device)
