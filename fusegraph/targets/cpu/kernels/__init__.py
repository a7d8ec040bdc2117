"""Kernel factories of the cpu target, registered in the lowering table on import."""

from . import dense, pointwise  # noqa: F401
