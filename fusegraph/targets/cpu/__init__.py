"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

# oneDNN and the generated kernels share one OpenMP pool, left at libgomp's defaults: its workers
# spin briefly after a kernel (GOMP_SPINCOUNT 300000: ~5 ms of one core after a ResNet-50 run on the
# 2-core VM), then sleep, so the next kernel finds them awake. Forcing them to sleep at once
# (OMP_WAIT_POLICY=PASSIVE, this target's earlier setting) made ResNet-50 14%, MiniLM 28% and YOLOv8n
# (nudenet) 39% slower there, while ONNX Runtime alternating with it in the same process ran 0-3%
# faster (benchmarks/cpu_vs_ort.py, 30 runs each way; an earlier run gave 12%, 36%, 57% and -2% to 11%).
# OMP_WAIT_POLICY and GOMP_SPINCOUNT set by the user apply as usual.

from .target import TARGET, CpuTarget

__all__ = ["TARGET", "CpuTarget"]
