"""The single-level IR: dtypes, shapes, ops protocol, instructions, modules, programs, text form."""

from .builtin import GetTupleElem, Literal, Param, Return
from .dtypes import DType
from .module import Instruction, Module
from .op import Op, OpKind, get_op_class, make_op, register_op, registered_ops
from .program import Program
from .shape import AnyShape, Dim, OptionalShape, SequenceShape, Shape, TupleShape

__all__ = [
    "AnyShape", "DType", "Dim", "GetTupleElem", "Instruction", "Literal", "Module", "Op", "OpKind",
    "OptionalShape", "Param", "Program", "Return", "SequenceShape", "Shape", "TupleShape", "get_op_class",
    "make_op", "register_op", "registered_ops",
]
