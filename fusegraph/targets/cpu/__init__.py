"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

from .target import TARGET, CpuTarget

__all__ = ["TARGET", "CpuTarget"]
