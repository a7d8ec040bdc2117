"""Kernel factories of the cpu target, registered in the lowering table on import."""

from . import control, dense, int8, movement, pointwise, recurrent  # noqa: F401
