"""NonMaxSuppression on the cpu target: the compiled C kernel (codegen/nms.py) for float32 boxes and
scores, the op's numpy reference for other dtypes (ONNX Runtime takes float32 only)."""

from __future__ import annotations

import ctypes

import numpy as np

from ....errors import ExecutionError, ResourceError
from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..codegen.nms import nms_kernel
from ..lowering import Kernel, LowerContext, lowering, reference_kernel

_PTRS = ctypes.c_void_p * 4
_DIMS = ctypes.c_int64 * 6


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]  # (`a.ctypes.data` builds a ctypes helper: ~10x slower)


def _scalar(a: np.ndarray, default: float | None) -> float | None:
    flat = np.asarray(a).reshape(-1)  # an empty tensor counts as absent, as in ONNX
    return flat[0] if flat.size else default


@lowering("non_max_suppression")
def non_max_suppression(ins: Instruction, ctx: LowerContext) -> Kernel:
    if any(x.shape.dtype != DType.float32 for k, x in enumerate(ins.inputs) if k != 2):
        return reference_kernel(ins, ctx)
    src = nms_kernel()
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    center = int(ins.op.center_point_box)
    op = ins.op

    def run(args, out):
        boxes, scores = np.ascontiguousarray(args[0]), np.ascontiguousarray(args[1])
        (batches, n, four), (s_batches, classes, s_n) = boxes.shape, scores.shape
        if four != 4 or s_batches != batches or s_n != n:  # the C kernel would read past the arrays
            raise ExecutionError(f"{op}: boxes {list(boxes.shape)} and scores {list(scores.shape)} do not "
                                 "agree (expected [B, N, 4] and [B, C, N])")
        limit = min(max(int(_scalar(args[2], 0)), 0), n)
        if not limit or not batches * classes:
            return np.zeros((0, 3), np.int64)
        score = _scalar(args[4], None) if len(args) > 4 else None
        thresholds = np.array([_scalar(args[3], 0), 0 if score is None else score], np.float32)
        res = np.empty(1 + batches * classes * limit * 3, np.int64)
        kernel = cell["kernel"]
        kernel._fn(_PTRS(_address(res), _address(boxes), _address(scores), _address(thresholds)),
                   _DIMS(batches, n, classes, limit, center, score is not None), kernel.threads)
        if res[0] < 0:
            raise ResourceError(f"{op}: out of memory for {batches * classes} classes of {n} boxes")
        selected = res[1:1 + 3 * res[0]].reshape(-1, 3)
        if out is None:
            return selected
        np.copyto(out, selected)
        return out

    return run
