"""One module per ONNX op family; importing this package registers every converter."""

from . import (  # noqa: F401
    attention,
    contrib,
    control,
    conv,
    elementwise,
    gemm,
    indexing,
    loss,
    misc,
    movement,
    nn,
    quantize,
    reduce,
    resize,
    rnn,
    sequence,
    signal,
    tensor,
    training,
)
