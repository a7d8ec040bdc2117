"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

# oneDNN and the generated kernels share one OpenMP pool, left at libgomp's defaults: its workers
# spin briefly after a kernel (GOMP_SPINCOUNT 300000: ~5 ms of one core after a ResNet-50 run on the
# 2-core VM), then sleep, so the next kernel finds them awake. Forcing them to sleep at once
# (OMP_WAIT_POLICY=PASSIVE, this target's earlier setting) made ResNet-50 12%, MiniLM 36% and YOLOv8n
# 57% slower there; ONNX Runtime alternating with it in the same process ran -2% to 11% faster
# (17% on silero-vad's 0.28 ms) (benchmarks/cpu_vs_ort.py, 30 runs each way).
# OMP_WAIT_POLICY and GOMP_SPINCOUNT set by the user apply as usual.

from .target import TARGET, CpuTarget

__all__ = ["TARGET", "CpuTarget"]
