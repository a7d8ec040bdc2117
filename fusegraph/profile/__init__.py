"""Per-step profiling: what the targets report into, beside `ir/` in the layering (it imports
nothing above it). A target's instrumented run loop calls a `Recorder` around every kernel step; the
`Profile` it builds names each step's instruction, its ONNX nodes (ir/provenance.py) and its times,
and rolls them up by kernel and by ONNX op type (`summary.py`) or writes a Chrome trace (`trace.py`).
The plain run loops know nothing of it: profiling off costs nothing.
"""

from .record import Capture, Profile, Recorder, StepInfo, step_info
from .summary import by_kernel, by_onnx_op, step_rows
from .trace import chrome_trace, write_chrome_trace

__all__ = [
    "Capture", "Profile", "Recorder", "StepInfo", "by_kernel", "by_onnx_op", "chrome_trace", "step_info", "step_rows",
    "write_chrome_trace",
]
