"""Every op, registered by importing its family module. Look ops up with `fusegraph.ir.get_op_class`."""

from . import (  # noqa: F401
    attention,
    control,
    conv,
    fused,
    gemm,
    grid_sample,
    image,
    indexing,
    layout,
    misc,
    ml,
    movement,
    movement_dynamic,
    nbits,
    nn,
    opaque,
    optional,
    pointwise,
    pool,
    quantize,
    quantized_nn,
    random,
    reduce,
    resize,
    rnn,
    select,
    sequence,
    signal,
    sparse,
    strings,
    tensor,
)
from .pointwise import PointwiseOp
from .scalar import Expr

__all__ = ["Expr", "PointwiseOp"]
