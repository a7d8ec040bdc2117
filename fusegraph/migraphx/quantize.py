"""quantize_fp16 / quantize_bf16 / quantize_int8 / quantize_fp8 with MIGraphX's arguments.

`ins_names` names the ops to quantize, by MIGraphX op name ("all": every op fusegraph's pass
converts). For fp16/bf16 the ops of the program not named are kept in float32 (fusegraph's
`keep_fp32`; reductions, softmax and layer norms always accumulate in float32). int8 and fp8 are
fusegraph's calibrated quantizers (fusegraph/quantize/int8.py): the calibration runs on fusegraph's
own choice of target, so `t` only checks that a target was given. An empty `calibration` uses one
sample from generate_argument per parameter (random ranges: pass real samples for real accuracy).
Quantize before compile(), as on MIGraphX.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ArgumentError, CompileError, NotSupportedError, api_boundary
from .argument import _as_array, generate_argument
from .ops import OP_NAMES
from .program import program
from .shape import shape
from .target import target

_INT8_DEFAULT = ("dot", "convolution")


def _fusegraph_program(prog: Any, fn: str):
    if not isinstance(prog, program):
        raise ArgumentError(f"{fn}: expected a migraphx.program, got {type(prog).__name__}")
    if prog.is_compiled():
        raise CompileError(f"{fn}: the program is already compiled; quantize it before compile()")
    return prog.fusegraph_program


def _op_names(ins_names: Iterable[str], fn: str) -> frozenset[str]:
    if isinstance(ins_names, str):
        raise ArgumentError(f"{fn}: ins_names is a list of op names, got the string {ins_names!r}")
    return frozenset(OP_NAMES.get(n, n) for n in ins_names)


def _half(prog: Any, ins_names: Iterable[str], fn: str, convert: Any) -> None:
    from ..quantize import DEFAULT_KEEP_FP32

    p = _fusegraph_program(prog, fn)
    names = _op_names(ins_names, fn)
    keep = DEFAULT_KEEP_FP32
    if "all" not in names:
        used = {i.op.name for m in p.modules.values() for i in m.instructions if not i.op.name.startswith("@")}
        keep = keep | frozenset(used - names)
    convert(p, keep)


@api_boundary
def quantize_fp16(prog: program, ins_names: Sequence[str] = ("all",)) -> None:
    from .. import quantize

    _half(prog, ins_names, "quantize_fp16", quantize.quantize_fp16)


@api_boundary
def quantize_bf16(prog: program, ins_names: Sequence[str] = ("all",)) -> None:
    from .. import quantize

    _half(prog, ins_names, "quantize_bf16", quantize.quantize_bf16)


def _calibration(prog: program, calibration: Sequence[Mapping[str, Any]], fn: str) -> list[dict[str, Any]]:
    if isinstance(calibration, Mapping):
        raise ArgumentError(f"{fn}: calibration is a list of parameter dicts, got one dict (wrap it in a list)")
    samples = [{k: _as_array(v) for k, v in dict(sample).items()} for sample in calibration]
    if not samples:
        shapes: dict[str, shape] = prog.get_parameter_shapes()
        samples = [{k: _as_array(generate_argument(s)) for k, s in shapes.items()}]
    return samples


def _calibrated(kind: str, prog: program, t: target, calibration: Sequence[Mapping[str, Any]],
                ins_names: Sequence[str]) -> None:
    fn = f"quantize_{kind}"
    p = _fusegraph_program(prog, fn)
    if not isinstance(t, target):
        raise ArgumentError(f"{fn}: expected a migraphx.target (get_target(name)), got {t!r}")
    samples = _calibration(prog, calibration, fn)
    try:
        int8 = importlib.import_module("fusegraph.quantize.int8")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("fusegraph"):
            raise NotSupportedError(f"migraphx.{fn}: {kind} quantization is not available in this build of "
                                    "fusegraph (fusegraph/quantize/int8.py is missing); quantize_fp16 and "
                                    "quantize_bf16 are") from None
        raise
    # MIGraphX quantizes every instruction ins_names names, a network's last layer too: no head kept float
    getattr(int8, fn)(p, samples, quantize_ops=tuple(sorted(_op_names(ins_names, fn))), keep_heads=False)


@api_boundary
def quantize_int8(prog: program, t: target, calibration: Sequence[Mapping[str, Any]] = (),
                  ins_names: Sequence[str] = _INT8_DEFAULT) -> None:
    _calibrated("int8", prog, t, calibration, ins_names)


@api_boundary
def quantize_fp8(prog: program, t: target, calibration: Sequence[Mapping[str, Any]] = (),
                 ins_names: Sequence[str] = _INT8_DEFAULT) -> None:
    _calibrated("fp8", prog, t, calibration, ins_names)
