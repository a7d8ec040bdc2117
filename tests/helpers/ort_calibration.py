"""ONNX Runtime's quantizer fed the same calibration samples as fusegraph's (tests, benchmarks)."""

from __future__ import annotations


def sample_reader(samples):
    """An onnxruntime.quantization CalibrationDataReader over `samples` (a list of input dicts)."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    return Reader()
