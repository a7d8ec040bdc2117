"""Post-training quantization with calibration: `quantize_int8` and `quantize_fp8`.

The float program is calibrated on the reference interpreter, then rewritten in place into the IR
that the ONNX frontend makes of an ONNX Runtime `quantize_static` QDQ model, so the targets' integer
lowerings serve both:
- each activation input of a quantized conv / dot becomes
  `dequantize_linear(quantize_linear(x, s, zp), s, zp)` with per-tensor scale and zero point
  (broadcast scalars; one pair per tensor, shared by its quantized readers);
- each constant weight becomes an int8 (or float8) literal read through `dequantize_linear`, with a
  per-output-channel scale (reshaped and broadcast against it) and zero point 0;
- biases, and everything between quantized ops, stay float.
Defaults are ORT's quantize_static QDQ defaults: int8 activations, asymmetric; int8 weights,
symmetric, per channel. Sensitive heads stay float (select.py). The rewrite runs before any pass
and every target compiles it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import ArgumentError, CompileError
from ..ir.dtypes import DType
from ..ir.module import Instruction, Module
from ..ir.op import registered_ops
from ..ir.program import Program
from ..ops.quantize import DequantizeLinear, QuantizeLinear
from ..passes.propagate_constant import propagate_constant
from .calibration import iter_calibration
from .observe import check_runner, collect_ranges
from .qparams import ACTIVATION_TYPES, Scheme, channel_shape, quantize_array, range_qparams, weight_qparams
from .ranges import METHODS, select_range
from .select import DEFAULT_QUANTIZE_OPS, select, weight_axis

QUANTIZED_KEY = "quantized"  # program metadata: what quantized it


@dataclasses.dataclass
class Plan:
    """What calibration decided: the ops to quantize and each activation's [rmin, rmax]."""

    scheme: Scheme
    ops: list[Instruction]
    ranges: dict[int, tuple[float, float]]   # activation instruction uid -> range
    samples: int
    method: str

    def named_ranges(self, module: Module) -> dict[str, tuple[float, float]]:
        """The ranges by ONNX tensor name (an input's name for an input)."""
        names = {i.uid: i.op.param_name if i.is_param else i.tensor for i in module.instructions}
        return {names[u]: r for u, r in self.ranges.items() if names.get(u)}


def make_plan(program: Program, calibration: Any, scheme: Scheme, method: str = "minmax",
              quantize_ops: Iterable[str] = DEFAULT_QUANTIZE_OPS, skip_ops: Iterable[str] = (),
              skip_names: Iterable[str] = (), keep_heads: bool = True, percentile: float = 99.99,
              num_bins: int = 2048, max_samples: int | None = None, runner: str = "ref") -> Plan:
    """Fold constants, pick the ops, calibrate their activation inputs (on `runner`: ref or cpu).
    Changes `program` only by folding constants (so weights are literals)."""
    if method not in METHODS:
        raise ArgumentError(f"calibration method {method!r}: expected one of {', '.join(METHODS)}")
    if program.is_compiled:
        raise CompileError("quantize a program before compiling it (parse_onnx, then quantize, then compile)")
    module = program.main
    _fold_constants(module)
    ops = select(module, quantize_ops, skip_ops, skip_names, keep_heads)
    watched = {x.uid for ins in ops for x in ins.inputs if not x.is_literal}
    bins = 0 if method == "minmax" else int(num_bins)
    samples = iter_calibration(program, calibration, max_samples)
    stats, n = collect_ranges(module, watched, samples, bins, check_runner(module, runner))
    ranges = {u: select_range(r, method, percentile) for u, r in stats.items()}
    return Plan(scheme, ops, ranges, n, method)


def _fold_constants(module: Module, rounds: int = 8) -> None:
    """Constants folded and per-channel scales folded into the weights first (a batch norm after its
    convolution: conv(x, w) * c -> conv(x, w * c)), as ORT's quant_pre_process does: the weights are
    then quantized as the program computes them, and the integer kernels' epilogues meet the bias
    and activation directly. Per-channel symmetric scales would absorb the factor anyway."""
    from ..passes.eliminate_dead_code import eliminate_dead_code
    from ..passes.simplify_algebra import simplify_algebra

    for _ in range(rounds):
        if not (propagate_constant(module) | simplify_algebra(module)):
            break
    eliminate_dead_code(module)


def _op(name: str, **attrs):
    return registered_ops()[name](**attrs)


def _spread(module: Module, value: Instruction, like: Instruction, before: Instruction) -> Instruction:
    """`value` broadcast against `like` (shape known now or, when dynamic, at run time)."""
    if like.shape.is_dynamic:
        return module.insert(before, _op("broadcast_like"), value, like)
    if value.shape.lens == like.shape.lens:
        return value
    return module.insert(before, _op("broadcast", out_lens=like.shape.lens), value)


def _qdq(module: Module, x: Instruction, scale: Instruction, zp: Instruction, dtype: DType, before: Instruction,
         origin, stored: bool = False) -> Instruction:
    """`x` through quantize_linear and dequantize_linear before `before`; a `stored` x (a weight
    literal quantized already) only through dequantize_linear."""
    s, z = _spread(module, scale, x, before), _spread(module, zp, x, before)
    made = [s, z]
    q = x if stored else module.insert(before, QuantizeLinear(to=dtype, saturate=True), x, s, z)
    made.append(q)
    dq = module.insert(before, DequantizeLinear(to=DType.float32), q, s, z)
    for ins in [*made, dq]:
        if not ins.is_literal and not ins.origin:
            ins.origin = origin
    return dq


def _weight(module: Module, w: Instruction, axis: int | None, scheme: Scheme, before: Instruction,
            origin) -> Instruction:
    value = np.asarray(w.literal, np.float32)
    scale, zp = weight_qparams(value, scheme.weight, axis)
    q = module.add_literal(quantize_array(value, scale, zp, scheme.weight))
    flat = (-1,) if axis is not None else ()
    s_lit = module.add_literal(scale.reshape(flat) if flat else scale.reshape(()))
    z_lit = module.add_literal(zp.reshape(flat) if flat else zp.reshape(()))
    if axis is not None:  # as the frontend shapes a per-axis scale: reshape, then broadcast
        shape = channel_shape(value.ndim, axis, value.shape[axis])
        s_lit = module.insert(before, _op("reshape", dims=shape), s_lit)
        z_lit = module.insert(before, _op("reshape", dims=shape), z_lit)
    return _qdq(module, q, s_lit, z_lit, scheme.weight, before, origin, stored=True)


def apply_plan(program: Program, plan: Plan) -> int:
    """Rewrite the planned ops of `program` with Q/DQ inputs; the number rewritten."""
    module, scheme = program.main, plan.scheme
    activation_dq: dict[int, Instruction] = {}
    weight_dq: dict[tuple[int, Any], Instruction] = {}
    for ins in plan.ops:
        inputs = list(ins.inputs)
        for k, x in enumerate(inputs):
            if x.is_literal:
                axis = weight_axis(ins, scheme.per_channel) if k == 1 else None
                key = (x.uid, axis)
                if key not in weight_dq:
                    weight_dq[key] = _weight(module, x, axis, scheme, ins, ins.origin)
                inputs[k] = weight_dq[key]
                continue
            if x.uid not in activation_dq:
                rmin, rmax = plan.ranges.get(x.uid, (0.0, 0.0))
                scale, zp = range_qparams(rmin, rmax, scheme.activation, scheme.symmetric)
                s, z = module.add_literal(scale), module.add_literal(zp)
                activation_dq[x.uid] = _qdq(module, x, s, z, scheme.activation, ins, ins.origin)
            inputs[k] = activation_dq[x.uid]
        module.replace_inputs(ins, inputs)
    program.metadata[QUANTIZED_KEY] = (f"{scheme.label} {plan.method}: {len(plan.ops)} ops, activations "
                                       f"{scheme.activation.name}{' symmetric' if scheme.symmetric else ''}, weights "
                                       f"{scheme.weight.name} {'per-channel' if scheme.per_channel else 'per-tensor'}, "
                                       f"{plan.samples} calibration samples")
    program.verify()
    return len(plan.ops)


def quantize_int8(program: Program, calibration: Any, method: str = "minmax", per_channel: bool = True,
                  symmetric: bool | None = None, quantize_ops: Iterable[str] = DEFAULT_QUANTIZE_OPS,
                  skip_ops: Iterable[str] = (), skip_names: Iterable[str] = (), percentile: float = 99.99,
                  num_bins: int = 2048, *, activation_type: str = "int8", keep_heads: bool = True,
                  max_samples: int | None = None, runner: str = "ref") -> Program:
    """Quantize `program` (uncompiled, in place) to int8 with ranges calibrated on `calibration` (an
    iterable of input dicts, a folder of .npy / .npz files, or a .npz file); returns it.

    method: minmax | entropy | percentile (`percentile`, `num_bins` tune the histogram methods).
    symmetric: symmetric activations (None: asymmetric, as ORT's default); weights are always
    symmetric, per output channel unless `per_channel` is False. activation_type: int8 (ORT's
    default) or uint8. quantize_ops / skip_ops: op names (IR or ONNX); skip_names: ONNX node or
    tensor names kept float. keep_heads: keep the last quantizable op before each output float.
    max_samples: calibrate on at most that many samples; runner: where calibration runs the float
    program: ref (default) or cpu (see observe.py for when cpu pays off)."""
    if activation_type not in ACTIVATION_TYPES:
        raise ArgumentError(f"activation_type {activation_type!r}: expected {' or '.join(ACTIVATION_TYPES)}")
    scheme = Scheme(ACTIVATION_TYPES[activation_type], DType.int8, bool(symmetric), bool(per_channel))
    plan = make_plan(program, calibration, scheme, method, quantize_ops, skip_ops, skip_names, keep_heads,
                     percentile, num_bins, max_samples, runner)
    apply_plan(program, plan)
    return program


def quantize_fp8(program: Program, calibration: Any, method: str = "minmax", per_channel: bool = True,
                 quantize_ops: Iterable[str] = DEFAULT_QUANTIZE_OPS, skip_ops: Iterable[str] = (),
                 skip_names: Iterable[str] = (), percentile: float = 99.99, num_bins: int = 2048, *,
                 keep_heads: bool = True, max_samples: int | None = None, runner: str = "ref") -> Program:
    """As `quantize_int8`, to float8 e4m3fn: per-tensor activation scales and per-channel weight
    scales of absmax / 448, zero points 0, saturating."""
    scheme = Scheme(DType.float8_e4m3fn, DType.float8_e4m3fn, True, bool(per_channel))
    plan = make_plan(program, calibration, scheme, method, quantize_ops, skip_ops, skip_names, keep_heads,
                     percentile, num_bins, max_samples, runner)
    apply_plan(program, plan)
    return program
