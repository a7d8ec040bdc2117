"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

# oneDNN and the generated kernels share one OpenMP pool: its workers spin briefly between kernels,
# then sleep, unless the user chose a policy (openmp.py has the measurements). Set before any of
# this package's libraries loads libgomp.
from .openmp import set_wait_defaults

set_wait_defaults()

from .target import TARGET, CpuTarget  # noqa: E402  (after the wait default: it loads libgomp)

__all__ = ["TARGET", "CpuTarget"]
