"""One module per ONNX op family; importing this package registers every converter."""

from . import control, elementwise, gemm, nn, reduce, rnn, tensor  # noqa: F401
