"""The cpu target: fast inference on the host CPU — oneDNN convolutions, pooling and products with
fused epilogues, compiled pointwise kernels, one preallocated arena. `get_target("cpu")` loads it."""

import os

# oneDNN and the generated kernels share one OpenMP pool. Between kernels its workers spin briefly,
# then sleep: GOMP_SPINCOUNT 20000 (about a millisecond) covers the gap from one kernel to the next
# (a wake-up costs tens of microseconds, 53 times per ResNet-50), while an idle pool stops stealing
# the cores from the rest of the process (numpy, a peer runtime, other requests) within that
# millisecond. libgomp's own default (300000, with no policy set) spins long enough to slow a peer
# sharing two cores; PASSIVE (no spin) cost ResNet-50 7% and MiniLM 17% on this 2-core machine
# (benchmarks/cpu_vs_ort.py). It must be set before libgomp loads; values the user set win.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "20000"

from .target import TARGET, CpuTarget  # noqa: E402

__all__ = ["TARGET", "CpuTarget"]
