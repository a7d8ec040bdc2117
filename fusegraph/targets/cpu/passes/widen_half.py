"""widen_half: a cpu program's float16 compute runs in float32.

The cpu target's kernels are float32 (oneDNN, generated C); a half-precision op ran as float32 work
rounded to half after every op, or as its numpy reference (a CNN in float16 3.9x ONNX Runtime's time,
a BERT 1.5x). ONNX Runtime's CPU provider computes a float16 model in float32: it puts casts around
the nodes it has no float16 kernel for and removes the pairs between them. This pass does the same to
the main module: half inputs are converted on entry, half constants widened (exactly) at compile
time, each op rebuilt over float32 values (an attribute naming a half result type names float32),
and outputs converted back to their half type on exit. A conversion to half of a value the model
computes wider (a Cast to float16 of float32 data) stays a rounding point, as the model asks: the
value is rounded, then widened. An op that refuses float32 inputs, and control flow (its bodies keep
their types), reads its inputs in their own types. Results differ from op-by-op rounding only by the
roundings taken out, as ONNX Runtime's do.

bfloat16 is left as it is (each op rounded to bfloat16, as the reference and the ONNX backend
suite's expected values do): with 8 significant bits, a rounding taken out moves results by more
than the suite's tolerance, and bfloat16 models are rare on CPUs.

Invariant afterwards: a float16 value in the main module is an input, a constant, an explicit rounding
point, the input of an op kept in its own types, or a result converted back for an output.
"""

from __future__ import annotations

from ....errors import FusegraphError
from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.shape import Shape
from ....ops.pointwise import Convert
from ....quantize.fp16 import retyped

HALF = (DType.float16,)
F32 = DType.float32


def _dtype(ins: Instruction) -> DType | None:
    return ins.shape.dtype if isinstance(ins.shape, Shape) else None


def widen_half(module: Module) -> bool:
    if module.parent is not None or not any(_dtype(i) in HALF for i in module.instructions):
        return False
    new: dict[int, Instruction] = {}  # old uid -> what stands for it now
    converted: dict[tuple[int, DType], Instruction] = {}
    changed = False  # (a conversion made for an op that then refused its inputs is a change too)

    def as_type(x: Instruction, dt: DType | None, before: Instruction) -> Instruction:
        """`x` as `dt` (one conversion per value and type; a constant converted here, exactly)."""
        if dt is None or _dtype(x) in (None, dt) or not (dt.is_float and _dtype(x).is_float):
            return x
        nonlocal changed
        key = (x.uid, dt)
        if key not in converted:
            changed = True
            converted[key] = (module.insert(before, type(x.op)(x.literal.astype(dt.np))) if x.is_literal
                              else module.insert(before, Convert(to=dt), x))
        return converted[key]

    def widened(x: Instruction, before: Instruction) -> Instruction:
        return as_type(x, F32, before) if _dtype(x) in HALF else x

    old = list(module.instructions)
    ret = module.return_ins
    for ins in old:
        if ins is ret or ins.is_param or ins.is_literal:  # (widened where an op reads them)
            continue
        inputs = [new.get(x.uid, x) for x in ins.inputs]
        moved = any(x is not o for x, o in zip(inputs, ins.inputs))

        def own() -> list[Instruction]:  # the inputs in the types the op had them
            return [as_type(x, _dtype(o), ins) for x, o in zip(inputs, ins.inputs)]  # noqa: B023

        if ins.module_args or isinstance(ins.op, Convert) and (
                _dtype(ins) not in HALF or _dtype(ins.inputs[0]) not in HALF):
            # control flow (its bodies keep the types they were built for), a widening, and the
            # model's own rounding to half (a conversion of wider data): each as it was
            if not moved:
                continue
            r = module.insert(ins, ins.op, *own(), module_args=ins.module_args)
        elif _dtype(ins) in HALF or moved or any(_dtype(x) in HALF for x in inputs):
            try:
                r = module.insert(ins, retyped(ins.op, HALF, F32), *[widened(x, ins) for x in inputs])
            except FusegraphError:  # the op takes no float32 inputs: it runs in its own types
                if not moved:
                    continue
                r = module.insert(ins, ins.op, *own())
        else:
            continue
        r.origin, r.tensor = ins.origin, ins.tensor
        new[ins.uid] = r
        changed = True
    if not changed:
        return False
    module.replace_inputs(ret, [as_type(new.get(o.uid, o), _dtype(o), ret) for o in ret.inputs])
    for ins in reversed(old):  # the instructions replaced are unused now
        if ins is not ret and not ins.users and not ins.is_param and ins.module is module:
            module.remove(ins)
    return True

