"""Per-layer quantization sensitivity: the error of the program's outputs when only one layer is
quantized, to choose what to keep float (`skip_names`).

Each candidate op (every op `quantize_int8` could quantize, heads included) is evaluated on the
held-out samples with its inputs fake-quantized exactly as the rewrite would quantize them (the
same calibrated ranges, scales and QuantizeLinear / DequantizeLinear arithmetic) and every other op
in float; the error is the relative L2 of the outputs against the float program's, the worst output
counting. The program is changed only by constant folding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..ir.dtypes import DType
from ..ir.module import Instruction
from ..ir.program import Program
from .calibration import iter_calibration
from .int8 import Plan, make_plan
from .observe import Replace, run_with_inputs_replaced
from .qparams import ACTIVATION_TYPES, Scheme, fake_quantize, range_qparams, weight_qparams
from .select import DEFAULT_QUANTIZE_OPS, heads_of, weight_axis


@dataclasses.dataclass(frozen=True)
class LayerSensitivity:
    name: str        # the ONNX node (or tensor) the op came from
    op: str          # its ONNX op type (the IR op name when it has no origin)
    rel_l2: float    # worst output's ||q - f|| / ||f|| with only this layer quantized
    head: bool       # kept float by default (keep_heads)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _label(ins: Instruction) -> tuple[str, str]:
    if ins.origin:
        return ins.origin[0].name, ins.origin[0].op_type
    return ins.tensor or f"%{ins.uid}", ins.op.name


def layer_replacement(ins: Instruction, plan: Plan) -> Replace:
    """What the rewrite does to `ins`'s inputs, as a function of their values."""
    scheme = plan.scheme

    def replace(args: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for k, (x, a) in enumerate(zip(ins.inputs, args, strict=True)):
            if x.is_literal:
                axis = weight_axis(ins, scheme.per_channel) if k == 1 else None
                scale, zp = weight_qparams(np.asarray(a, np.float32), scheme.weight, axis)
                out.append(fake_quantize(a, scale, zp, scheme.weight))
            else:
                scale, zp = range_qparams(*plan.ranges.get(x.uid, (0.0, 0.0)), scheme.activation, scheme.symmetric)
                out.append(fake_quantize(a, scale, zp, scheme.activation))
        return out

    return replace


def _error(got: list[list[np.ndarray]], want: list[list[np.ndarray]]) -> float:
    worst = 0.0
    for k in range(len(want[0])):
        num = sum(float(np.sum((np.asarray(g[k], np.float64) - np.asarray(w[k], np.float64)) ** 2))
                  for g, w in zip(got, want, strict=True))
        den = sum(float(np.sum(np.asarray(w[k], np.float64) ** 2)) for w in want)
        worst = max(worst, float(np.sqrt(num / den)) if den > 0 else float(np.sqrt(num)))
    return worst


def sensitivity(program: Program, calibration: Any, held_out: Any = None, method: str = "minmax",
                per_channel: bool = True, symmetric: bool | None = None, activation_type: str = "int8",
                quantize_ops: Iterable[str] = DEFAULT_QUANTIZE_OPS, skip_ops: Iterable[str] = (),
                max_samples: int | None = None, held_out_samples: int | None = 8,
                runner: str = "ref") -> list[LayerSensitivity]:
    """Every quantizable layer with its output error when quantized alone, worst first; the first
    entry, named `(all)`, quantizes every listed layer at once."""
    scheme = Scheme(ACTIVATION_TYPES[activation_type] if activation_type in ACTIVATION_TYPES else DType.int8,
                    DType.int8, bool(symmetric), bool(per_channel))
    plan = make_plan(program, calibration, scheme, method, quantize_ops, skip_ops, (), False,
                     max_samples=max_samples, runner=runner)
    feeds = list(iter_calibration(program, calibration if held_out is None else held_out, held_out_samples))
    module = program.main
    reference = [run_with_inputs_replaced(module, f, {}) for f in feeds]
    heads = {i.uid for i in heads_of(module, plan.ops)}
    rows = []
    for ins in plan.ops:
        replace = {ins.uid: layer_replacement(ins, plan)}
        err = _error([run_with_inputs_replaced(module, f, replace) for f in feeds], reference)
        rows.append(LayerSensitivity(*_label(ins), err, ins.uid in heads))
    rows.sort(key=lambda r: -r.rel_l2)
    every = {i.uid: layer_replacement(i, plan) for i in plan.ops}
    total = _error([run_with_inputs_replaced(module, f, every) for f in feeds], reference)
    return [LayerSensitivity("(all)", "-", total, False), *rows]
