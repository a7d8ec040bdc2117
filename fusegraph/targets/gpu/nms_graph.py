"""The all-Triton NonMaxSuppression (nms_triton.py) replayed as one CUDA graph per input shape.

A detector's NMS does little work on the device (a few boxes a class pass its threshold); what it
costs is the host: three kernel launches, their argument checks and six allocations per call. Once
per (input shapes, thresholds) the three kernels are captured as one graph that reads the graph's
own copies of the boxes and scores and writes its selection into an output of the largest possible
size (every row's limit); a call copies the inputs in, replays, makes its one host read (how many
boxes were kept, and the most candidates a row had) and copies that many rows out.
A row with more candidates than the in-register sort holds sends the call to nms.py's torch path,
as without the graph. The graphs belong to the compiled step that made them (`GraphCache`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MAX_OUTPUT_BYTES = 64 << 20  # past this the max-size output is not worth holding: launch instead
CACHED = 8                   # graphs a step keeps (distinct input shapes and thresholds)


class GraphCache:
    """A step's graphs by (boxes shape, scores shape, limit, iou, score, centre), least recent evicted."""

    def __init__(self):
        self._graphs: OrderedDict[tuple, GraphedNms] = OrderedDict()

    def get(self, boxes: Any, flat: Any, classes: int, limit: int, iou: float, score: float,
            center: bool) -> GraphedNms | None:
        """The graph for these inputs (captured on first use), or None where none should be made:
        not CUDA, a capture already under way (an enclosing graph), an output too large to hold."""
        import torch

        if not boxes.is_cuda or torch.cuda.is_current_stream_capturing():
            return None
        if flat.shape[0] * limit * 3 * 8 > MAX_OUTPUT_BYTES:
            return None
        key = (tuple(boxes.shape), tuple(flat.shape), boxes.device, limit, float(iou), float(score), center)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = GraphedNms(boxes, flat, classes, limit, iou, score, center)
            while len(self._graphs) > CACHED:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        return graph


class GraphedNms:
    """candidates -> greedy -> emit for one input shape and thresholds, captured once."""

    def __init__(self, boxes: Any, flat: Any, classes: int, limit: int, iou: float, score: float, center: bool):
        import torch

        from .executable import no_collection

        self.boxes, self.scores = boxes.clone(), flat.clone()
        self.out = torch.empty((flat.shape[0] * limit, 3), dtype=torch.int64, device=boxes.device)
        self._args = (classes, limit, iou, score, center)
        current = torch.cuda.current_stream(boxes.device)
        side = torch.cuda.Stream(boxes.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            self._launch()  # compiles the kernels, outside the capture
        current.wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with no_collection(), torch.cuda.graph(self.graph):
            self.sums = self._launch()

    def _launch(self) -> Any:
        from .nms_triton import candidates, emit_into, greedy

        classes, limit, iou, score, center = self._args
        order, count = candidates(self.scores, score)
        kept, held, sums = greedy(order, count, self.boxes, classes, limit, iou, center)
        emit_into(kept, held, self.out, classes)
        return sums

    def __call__(self, boxes: Any, flat: Any) -> tuple[int, int, Any]:
        """(boxes kept, most candidates of a row, the [kept, 3] selection: a tensor of its own)."""
        self.boxes.copy_(boxes)
        self.scores.copy_(flat)
        self.graph.replay()
        total, longest = self.sums.tolist()  # the one host read
        return total, longest, self.out[:total].clone()
