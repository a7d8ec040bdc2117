"""Kernel factories of the cpu target, registered in the lowering table on import."""

from . import (  # noqa: F401
    control,
    cumulative,
    custom,
    dense,
    int8,
    int8_dynamic,
    int8_lstm,
    lookup,
    min_max,
    movement,
    nbits,
    nms,
    pointwise,
    recurrent,
    select,
    sparse,
)
