"""Passes of the cpu target's pipeline (after the generic ones)."""

from .choose_layout import choose_layout
from .choose_winograd import choose_winograd
from .fuse_conv_epilogue import fuse_conv_epilogue
from .fuse_dot_epilogue import fuse_dot_epilogue
from .fuse_dynamic_int8 import fuse_dynamic_int8
from .fuse_int8 import fuse_int8
from .gather_elements_as_gather import gather_elements_as_gather
from .merge_parallel_dots import merge_parallel_dots
from .move_reduced_axes_last import move_reduced_axes_last
from .plan_memory import plan_memory
from .split_sliced_conv import split_sliced_conv
from .tabulate_int8 import tabulate_int8
from .widen_half import widen_half

__all__ = ["choose_layout", "choose_winograd", "fuse_conv_epilogue", "fuse_dot_epilogue", "fuse_dynamic_int8", "fuse_int8", "gather_elements_as_gather", "merge_parallel_dots", "move_reduced_axes_last", "plan_memory",
           "split_sliced_conv", "tabulate_int8", "widen_half"]
