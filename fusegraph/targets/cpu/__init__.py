"""The cpu target: fast inference on the host CPU (oneDNN kernels with fused epilogues, compiled pointwise
kernels, one preallocated arena). Only the kernel bindings (`onednn/`) exist so far; `TARGET` comes with
the target's pipeline and lowering."""
