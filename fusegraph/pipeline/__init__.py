"""Model pipelines: compiled programs and host Python steps chained, requests overlapping.

    pipe = fusegraph.Pipeline([det, crop, rec])        # Programs (compiled) and callables
    texts = pipe.run({"x": image})                      # one request, stage after stage, in this thread
    with pipe:                                          # a thread per stage, bounded queues between
        futures = [pipe.submit({"x": im}) for im in images]
        results = [f.result() for f in futures]         # a failed stage fails its request only

See stages.py for what each stage is given and gives, and pipeline.py for the overlap.
"""

from .pipeline import Pipeline, StageError
from .stages import Stage

__all__ = ["Pipeline", "Stage", "StageError"]
