"""Kernel factories of the cpu target, registered in the lowering table on import."""

from . import control, custom, dense, int8, lookup, movement, nbits, nms, pointwise, recurrent, sparse  # noqa: F401
