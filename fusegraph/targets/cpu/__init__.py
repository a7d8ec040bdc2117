"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

import os

# oneDNN and the generated kernels share one OpenMP pool. Its workers sleep between kernels rather
# than spin: spinning workers steal the cores from everything else in the process (numpy, a peer
# runtime, other requests), which on a 2-core machine costs more than the wake-ups. It must be set
# before libgomp loads; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .target import TARGET, CpuTarget  # noqa: E402

__all__ = ["TARGET", "CpuTarget"]
