"""oneDNN (libdnnl v3) bound through its C API with ctypes: the cpu target's conv, matmul and pooling kernels.

Nothing here loads the library at import; the first primitive created (or `available()`) does. A
primitive is built once at compile time (descriptor, kernel choice, packed weights) and called many
times on caller-owned numpy buffers, zero-copy:

    conv = Convolution((1, 64, 56, 56), w, b, padding=(1, 1, 1, 1), post_ops=[Eltwise("relu")])
    conv(x, out=y)
"""

from ._lib import INSTALL_HINT, PIP_PACKAGE, available, default_threads
from .base import PackingCache, Primitive, Reorder, pack, packing_cache
from .matmul import MatMul
from .memory import MemDesc, aligned_empty
from .postops import Binary, Eltwise, Sum
from .primitives import LAYOUTS, Convolution, Deconvolution, Pooling, activation_desc

__all__ = [
    "INSTALL_HINT", "LAYOUTS", "PIP_PACKAGE", "Binary", "Convolution", "Deconvolution", "Eltwise", "MatMul",
    "MemDesc", "PackingCache", "Pooling", "Primitive", "Reorder", "Sum", "activation_desc", "aligned_empty",
    "available", "default_threads", "pack", "packing_cache",
]
