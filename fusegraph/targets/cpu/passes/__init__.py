"""Passes of the cpu target's pipeline (after the generic ones)."""

from .fuse_conv_epilogue import fuse_conv_epilogue

__all__ = ["fuse_conv_epilogue"]
