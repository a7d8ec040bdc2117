"""One module per ONNX op family; importing this package registers every converter."""

from . import control, elementwise, gemm, nn, quantize, reduce, rnn, sequence, tensor  # noqa: F401
