"""Segmented execution: a program the static mode cannot take whole (a detector ending in NMS, a
classifier ending in NonZero or a TopK with a run-time k) runs its static prefix in the static mode
(one arena, weights uploaded once, one CUDA graph) and the rest in the dynamic mode, as ONNX Runtime
and TensorRT partition such models, instead of running every step in the dynamic mode.

* The prefix is the largest set of steps closed under "every value it reads is a program input or
  a literal or one of its own": steps with a device lowering whose values all have static shapes
  and torch types, taken in instruction order. Values the rest reads from it (the boundary) are
  plain tensors (a tuple value read across the boundary drops its step from the prefix).
* It is taken when it holds the work: at least half of the steps that compute (movement steps,
  views mostly, are not counted), or any convolution or GEMM (one conv in the prefix is worth more
  than the launch overhead of many small steps after it).
  Otherwise the whole program stays in the dynamic mode, as before.
* The split is two Programs built from main (copies of its instructions; literal arrays are shared,
  not copied): the prefix returns the boundary values and the program outputs it computes; the
  rest takes the boundary values as parameters. Each is compiled by the existing machinery, so the
  prefix's path (plan, arena, capture) is exactly the static executable's.
* Boundary values pass as the prefix's device output tensors (no host round trip). A literal both
  parts read is uploaded once, by the prefix, and the rest reads that tensor, unless the prefix
  packed it channels-last (then the rest uploads its own, standard-layout copy).

The split depends on the IR alone, so loading a saved program rebuilds the same segmentation.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping
from typing import Any

from ...ir.builtin import Return
from ...ir.module import Instruction, Module
from ...ir.op import OpKind
from ...ir.program import Program
from ...ir.shape import Shape
from ...passes.memory_coloring import reads
from ..base import CompileOptions, Executable
from .device import StreamScope
from .executable import DeviceDoor, as_tensor, check_input_names
from .host import device_type_ok, host_value, why_host
from .plan import Step, is_dynamic, list_steps

PREFIX, REST = 0, 1
HEAVY_KINDS = (OpKind.GEMM, OpKind.CONV)  # a prefix holding one of these is worth a segment


@dataclasses.dataclass
class Split:
    """A program cut into its static prefix and the rest (both built from main, see split_program)."""

    prefix: Program
    rest: Program
    boundary: list[tuple[int, str]]       # (index among the prefix's outputs, the rest's parameter name)
    outputs: list[tuple[int, int]]        # per program output: (PREFIX or REST, index among that part's outputs)
    literal_pairs: dict[int, int]         # rest literal uid -> the prefix literal holding the same array
    origin: dict[int, int]                # uid in a part -> uid of the main instruction it copies

    def shared_literals(self, tensors: Mapping[int, Any]) -> dict[int, Any]:
        """rest literal uid -> the prefix's device tensor of it (`tensors`: prefix literal uid ->
        tensor), for those in the standard layout the rest's steps expect."""
        out = {}
        for rest_uid, prefix_uid in self.literal_pairs.items():
            t = tensors.get(prefix_uid)
            if t is not None and t.is_contiguous():
                out[rest_uid] = t
        return out


def _fits(ins: Instruction) -> bool:
    return device_type_ok(ins.shape) and not is_dynamic(ins.shape)


def _closed_prefix(main: Module, steps: list[Step], banned: set[int]) -> set[int]:
    """uids of the largest input-closed set of static, lowered steps (one instruction each)."""
    own = {i.uid for i in main.instructions}
    available = {i.uid for i in main.instructions if i.is_literal or (i.is_param and _fits(i))}
    taken: set[int] = set()
    for step in steps:
        ins = step.ins
        if ins.uid not in banned and _fits(ins) and why_host(step) is None and reads(ins) & own <= available:
            taken.add(ins.uid)
            available.add(ins.uid)
    return taken


def _read_outside(main: Module, taken: set[int], by_return: bool) -> set[int]:
    """uids of `taken` that instructions outside it read (`by_return`: the program's return too)."""
    out: set[int] = set()
    for ins in main.instructions:
        if ins.uid in taken or ins.is_param or ins.is_literal or (isinstance(ins.op, Return) and not by_return):
            continue
        out |= reads(ins) & taken
    return out


def split_program(main: Module) -> Split | None:
    """The static prefix and the rest of `main`, or None when the prefix is not worth a segment
    (see the module docstring)."""
    # Instruction by instruction: the patterns read static shapes, and the prefix program matches
    # its own when it is compiled.
    steps = list_steps(main, patterns=False)
    by_uid = {i.uid: i for i in main.instructions}
    banned: set[int] = set()
    while True:  # drop steps whose tuple values cross the boundary (a segment passes tensors)
        taken = _closed_prefix(main, steps, banned)
        tuples = {u for u in _read_outside(main, taken, by_return=True) if not isinstance(by_uid[u].shape, Shape)}
        if not tuples:
            break
        banned |= tuples
    in_prefix = [s for s in steps if s.ins.uid in taken]
    heavy = any(s.ins.op.kind in HEAVY_KINDS for s in in_prefix)
    work = [s for s in steps if s.ins.op.kind is not OpKind.MOVEMENT]  # views and copies do no arithmetic
    if not in_prefix or not (heavy or 2 * sum(s.ins.uid in taken for s in work) >= len(work)):
        return None
    return _build(main, taken)


def _build(main: Module, taken: set[int]) -> Split:
    crossing = _read_outside(main, taken, by_return=False)
    boundary = [i for i in main.instructions if i.uid in crossing]
    names = {p.op.param_name for p in main.parameters}
    main_uids = {i.uid for i in main.instructions}
    origin: dict[int, int] = {}

    def part(keep: list[Instruction], extra_params: list[tuple[str, Instruction]],
             outputs: list[Instruction]) -> tuple[Program, dict[int, Instruction]]:
        """A program of main's parameters and literals that `keep` reads, `extra_params` (values
        computed elsewhere), `keep` itself, returning `outputs`."""
        program = Program()
        mod = program.main
        new: dict[int, Instruction] = {}
        needs = {u for i in keep for u in reads(i)} | {o.uid for o in outputs}
        for p in main.parameters:
            if p.uid in needs:
                new[p.uid] = mod.add_parameter(p.op.param_name, p.shape)
        for name, value in extra_params:
            new[value.uid] = mod.add_parameter(name, value.shape)
        for ins in main.instructions:
            if ins.is_literal and ins.uid in needs:
                new[ins.uid] = mod.add_literal(ins.literal)  # the same array: nothing is copied
        for ins in keep:
            new[ins.uid] = _copy(ins, mod, program, new)
        mod.add_return(*[new[o.uid] for o in outputs])
        origin.update({n.uid: u for u, n in new.items() if u in main_uids})
        return program, new

    computing = [i for i in main.instructions if not (i.is_param or i.is_literal or isinstance(i.op, Return))]
    prefix_outputs = _unique(boundary + [o for o in main.outputs if o.uid in taken])
    prefix, in_prefix = part([i for i in computing if i.uid in taken], [], prefix_outputs)
    boundary_names = []
    for b in boundary:
        name = f"boundary%{b.uid}"
        while name in names:  # a program input of that name: another one
            name += "'"
        boundary_names.append((name, b))
    rest_outputs = _unique([o for o in main.outputs if o.uid not in taken])
    rest, in_rest = part([i for i in computing if i.uid not in taken], boundary_names, rest_outputs)
    prefix_index = {o.uid: k for k, o in enumerate(prefix_outputs)}
    rest_index = {o.uid: k for k, o in enumerate(rest_outputs)}
    outputs = [(PREFIX, prefix_index[o.uid]) if o.uid in taken else (REST, rest_index[o.uid]) for o in main.outputs]
    pairs = {in_rest[u].uid: in_prefix[u].uid for u in in_rest if u in in_prefix and in_rest[u].is_literal}
    return Split(prefix, rest, [(prefix_index[b.uid], name) for name, b in boundary_names], outputs, pairs, origin)


def _unique(values: list[Instruction]) -> list[Instruction]:
    return list({v.uid: v for v in values}.values())


def _copy(ins: Instruction, mod: Module, program: Program, new: dict[int, Instruction]) -> Instruction:
    """A copy of `ins` appended to `mod`, its inputs (and the values its submodules read from
    outside) taken from `new`; submodules are copied into `program`."""
    subs = [_copy_module(sub, mod, program, new) for sub in ins.module_args]
    return mod.add(ins.op, *[new[x.uid] for x in ins.inputs], module_args=subs)


def _copy_module(sub: Module, parent: Module, program: Program, new: dict[int, Instruction]) -> Module:
    mod = program.create_module(sub.name, parent)
    for ins in sub.instructions:
        if ins.is_param:
            new[ins.uid] = mod.add_parameter(ins.op.param_name, ins.shape)
        elif ins.is_literal:
            new[ins.uid] = mod.add_literal(ins.literal)
        elif isinstance(ins.op, Return):
            mod.add_return(*[new[x.uid] for x in ins.inputs])
        else:
            new[ins.uid] = _copy(ins, mod, program, new)
    return mod


class SegmentedExecutable(DeviceDoor, Executable):
    """Runs the static prefix (a GpuExecutable: arena + one CUDA graph) then the rest (a
    DynamicExecutable) on the prefix's device outputs. The same surface as those two: `run` (numpy
    or device tensors), `run_device`, `describe()`, `host_ops`, `sources`, `tuning`. One run at a
    time (a lock): the boundary tensors are the prefix's output buffers, rewritten by every run."""

    def __init__(self, program: Program, options: CompileOptions, split: Split, prefix: Any, rest: Any):
        super().__init__(program, options)
        self.split, self.prefix, self.rest = split, prefix, rest
        self.device = prefix.device
        self._names = program.get_parameter_names()
        self._prefix_inputs = split.prefix.get_parameter_names()
        boundary = {name for _, name in split.boundary}
        self._rest_inputs = [n for n in split.rest.get_parameter_names() if n not in boundary]
        self._lock = threading.Lock()

    @property
    def graph(self) -> Any:
        """The prefix's CUDA graph (None before the first run, or where nothing is captured)."""
        return self.prefix.graph

    @property
    def sources(self) -> dict[str, str]:
        """Generated Triton sources of both parts (the rest's grow as it meets new shapes)."""
        return {**self.prefix.sources, **self.rest.sources}

    @property
    def tuning(self) -> dict[str, dict]:
        """GEMM template choices of both parts (saved as autotune.json)."""
        return {**self.prefix.tuning, **self.rest.tuning}

    @property
    def gemm_kernels(self) -> list[Any]:
        return [*self.prefix.gemm_kernels, *self.rest.gemm_kernels]

    @property
    def host_ops(self) -> list[str]:
        return self.rest.host_ops  # the prefix runs all on the device

    def describe(self) -> list[str]:
        """A header per segment, then its steps (named by the program's own value ids)."""
        prefix, rest = self.prefix, self.rest
        capture = "one CUDA graph" if prefix.graph_mode else "one arena, not captured (no CUDA device or graph_mode off)"
        hosted = len(rest.host_ops)
        lines = [f"static prefix: {len(prefix.plan.steps)} steps, {capture}"]
        lines += ["  " + self._main_ids(line) for line in prefix.describe()]
        lines.append(f"dynamic: {len(rest.runs)} steps" + (f" ({hosted} on the host)" if hosted else "")
                     + f", reading {len(self.split.boundary)} value(s) of the prefix")
        lines += ["  " + self._main_ids(line) for line in rest.describe()]
        return lines

    def _main_ids(self, line: str) -> str:
        return re.sub(r"^%(\d+)", lambda m: f"%{self.split.origin.get(int(m.group(1)), m.group(1))}", line)

    # -- running ------------------------------------------------------------------------------------
    def execute(self, inputs: dict[str, Any]) -> list[Any]:
        """numpy in (already checked by `run`), numpy out."""
        outs = self._run(inputs, device_out=False, copy_outputs=False)
        return [host_value(v, s) for v, s in zip(outs, self.output_shapes)]

    def run_device(self, inputs: Mapping[str, Any], stream: Any = None, copy_outputs: bool = False,
                   checked: bool = True) -> list[Any]:
        """Torch tensors, DLPack producers or numpy arrays in; device tensors out. Outputs the prefix
        computes alias its output buffers (valid until the next run) unless `copy_outputs`, as in
        the static mode; the rest's are fresh tensors. The rest's host steps wait for the device:
        indices are always checked at once (`checked`)."""
        self._run_pending_checks()
        check_input_names(inputs, self._names)
        with StreamScope(stream, self.device):
            return self._run({n: as_tensor(v) for n, v in inputs.items()}, device_out=True, copy_outputs=copy_outputs)

    def _run(self, inputs: Mapping[str, Any], device_out: bool, copy_outputs: bool) -> list[Any]:
        with self._lock:
            first = self.prefix.run_device({n: inputs[n] for n in self._prefix_inputs}, checked=True)
            rest_in = {n: inputs[n] for n in self._rest_inputs}
            rest_in.update({name: first[k] for k, name in self.split.boundary})  # device tensors, in place
            second = self.rest.run_device(rest_in) if device_out else self.rest.execute(rest_in)
            return [(first[k].clone() if copy_outputs else first[k]) if part == PREFIX else second[k]
                    for part, k in self.split.outputs]

