"""Every op, registered by importing its family module. Look ops up with `fusegraph.ir.get_op_class`."""

from . import control, conv, gemm, movement, nn, opaque, pointwise, reduce, rnn, tensor  # noqa: F401
from .pointwise import PointwiseOp
from .scalar import Expr

__all__ = ["Expr", "PointwiseOp"]
