"""NonMaxSuppression on the device (nms.py; on CUDA replayed as one CUDA graph per input shape,
nms_graph.py): its boxes and scores stay there, and only the count of selected boxes (the output's
extent) comes back to the host. The thresholds and the per-class limit
are read once at build time when they are literals (a detector's are), else at each run."""

from __future__ import annotations

import numpy as np

from .lowering import lowering
from .nms import non_max_suppression


def _scalar(step, k: int, default):
    """Input k's value: fixed now when it is a literal, else read from its tensor at run time."""
    if k >= len(step.inputs):
        return lambda args: default
    x = step.inputs[k]
    if x.is_literal:
        flat = np.asarray(x.literal).reshape(-1)
        value = flat[0].item() if flat.size else default
        return lambda args: value
    return lambda args: args[k].reshape(-1)[0].item() if args[k].numel() else default


@lowering("non_max_suppression", mode="value", sizes_output=True, cublas=True,
          note="Triton kernels (on CUDA one graph per input shape) or torch ops; the output count read back")
def nms(ctx, step):
    from .nms_graph import GraphCache

    center = bool(step.ins.op.center_point_box)
    limit, iou, score = _scalar(step, 2, 0), _scalar(step, 3, 0.0), _scalar(step, 4, None)
    graphs = GraphCache()  # this step's CUDA graphs, one per input shape and thresholds

    def run(*args):
        return non_max_suppression(args[0], args[1], limit(args), iou(args), score(args), center, graphs=graphs)
    return run
