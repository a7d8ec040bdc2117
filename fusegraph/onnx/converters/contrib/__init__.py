"""ONNX Runtime contrib ops (domain com.microsoft, plus ORT's pre-ONNX LayerNormalization and
SimplifiedLayerNormalization in the default domain) that exported models use most.

Each converter decomposes its op into ordinary IR ops -- dot, softmax, moments, gather, slices and
pointwise math -- so fusion passes and every target handle them with no contrib-specific kernel.
Where ORT's kernels differ from the op documentation (mask fill values, rounding of quantized
results), the converters follow the kernels; each module says where.
"""

from . import activations, attention, gemm, normalization, quantized, quantized_gemm, quantized_layers, rotary  # noqa: F401
