"""Prune the constant weights of a program's products to 2:4 structured sparsity (`prune_2_4`).

Invariant afterwards: every product of `PRODUCTS` whose weight is a constant float literal with K
(its reduction axis) a multiple of 4, at least `min_size` elements, and whose ONNX node is not in
`skip_names`, reads a literal that is 2:4 along K (`fusegraph.is_2_4`): the two largest magnitudes
of every four kept, the other two zero. A weight that is 2:4 already is left as it is ("found").
Each product that reads a constant weight is listed in the program's metadata (`PRUNED_KEY`, as
JSON) with its weight's shape and what happened to it, pruned, found or why it was left.

Constants are folded first, so a Gemm's transposed weight (`transpose` of a literal) is a literal
[K, N] the targets' 2:4 kernels read directly. A pruned weight is a new literal read by the product
alone: another reader of the dense one (an unrelated op sharing the tensor) keeps the dense values.
The pass changes the program in place; `fusegraph.prune_2_4(program)` works on a copy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

import numpy as np

from ..errors import ArgumentError, CompileError
from ..ir.dtypes import DType
from ..ir.module import Instruction, Module
from ..ir.program import Program
from ..ir.shape import Shape
from ..sparsity import is_2_4, prune_2_4_array
from .eliminate_dead_code import eliminate_dead_code
from .propagate_constant import propagate_constant


@dataclasses.dataclass(frozen=True)
class Product:
    """Where an op reads its weight: the input index and the weight's reduction axis."""

    weight: int
    k_axis: int


# the products whose weights are pruned (a convolution joins when a target runs sparse convs)
PRODUCTS = {"dot": Product(weight=1, k_axis=-2)}  # dot(x [.., M, K], w [.., K, N])
PRUNABLE_DTYPES = frozenset({DType.float16, DType.bfloat16, DType.float32, DType.float64})
DEFAULT_MIN_SIZE = 1024  # elements: smaller weights cost too little to gain from sparsity
PRUNED_KEY = "pruned_2_4"  # program metadata: the products, as JSON


@dataclasses.dataclass(frozen=True)
class PrunedProduct:
    name: str          # the ONNX node the product came from (%uid without one)
    op_type: str       # its ONNX op type (MatMul, Gemm), the IR op name without one
    shape: list[int]   # the weight's shape, as the product reads it ([.., K, N])
    status: str        # pruned | found (2:4 already) | skipped: <why>
    weight_rel_l2: float = 0.0  # ||w - pruned|| / ||w||: the weight's share that pruning removed

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def prune_program_2_4(program: Program, skip_names: Iterable[str] = (), min_size: int = DEFAULT_MIN_SIZE
                      ) -> list[PrunedProduct]:
    """Prune `program`'s product weights in place (see the module docstring); the products found, in
    program order, also recorded in `program.metadata[PRUNED_KEY]`."""
    if program.is_compiled:
        raise CompileError("prune a program before compiling it (parse_onnx, then prune_2_4, then compile)")
    if not isinstance(min_size, int) or min_size < 0:
        raise ArgumentError(f"prune_2_4: min_size is a number of elements >= 0, got {min_size!r}")
    module = program.main
    skip = _check_names(module, skip_names)
    propagate_constant(module)
    made: dict[int, Instruction] = {}  # dense weight uid -> its pruned literal (one per weight shared by products)
    rows = [_prune(module, ins, skip, min_size, made) for ins in list(module.instructions) if _weight(ins) is not None]
    eliminate_dead_code(module)
    program.metadata[PRUNED_KEY] = json.dumps([r.as_dict() for r in rows])
    program.verify()
    return rows


def pruned_products(program: Program) -> list[PrunedProduct] | None:
    """What `prune_program_2_4` recorded in `program` (a compiled or loaded one too); None if unpruned."""
    text = program.metadata.get(PRUNED_KEY)
    return None if text is None else [PrunedProduct(**row) for row in json.loads(text)]


def summary(rows: list[PrunedProduct]) -> str:
    """One line: how many products were pruned, found 2:4, and left dense."""
    count = {s: sum(r.status == s for r in rows) for s in ("pruned", "found")}
    left = len(rows) - count["pruned"] - count["found"]
    return (f"2:4: {count['pruned']} product weight(s) pruned, {count['found']} found 2:4 already, "
            f"{left} left dense")


def _weight(ins: Instruction) -> Instruction | None:
    """The constant weight a product reads, or None (no product, or an activation operand)."""
    spec = PRODUCTS.get(ins.op.name)
    if spec is None or len(ins.inputs) <= spec.weight:
        return None
    w = ins.inputs[spec.weight]
    return w if w.is_literal else None


def _label(ins: Instruction) -> tuple[str, str]:
    if ins.origin:
        return ins.origin[0].name, ins.origin[0].op_type
    return f"%{ins.uid}", ins.op.name


def _prune(module: Module, ins: Instruction, skip: frozenset[str], min_size: int,
           made: dict[int, Instruction]) -> PrunedProduct:
    spec, w = PRODUCTS[ins.op.name], _weight(ins)
    assert w is not None and isinstance(w.shape, Shape)
    name, op_type = _label(ins)
    value = w.literal
    row = PrunedProduct(name, op_type, list(value.shape), "")
    why = _ineligible(ins, value, w.shape.dtype, spec, skip, min_size)
    if why:
        return dataclasses.replace(row, status=f"skipped: {why}")
    if is_2_4(_k_last_but_one(value, spec)):
        return dataclasses.replace(row, status="found")
    if w.uid not in made:
        pruned = np.moveaxis(prune_2_4_array(_k_last_but_one(value, spec)), -2, spec.k_axis)
        made[w.uid] = module.add_literal(np.ascontiguousarray(pruned))
        made[w.uid].tensor = w.tensor
    new = made[w.uid]
    inputs = list(ins.inputs)
    inputs[spec.weight] = new
    module.replace_inputs(ins, inputs)
    dense = np.asarray(value, np.float64)
    norm = float(np.linalg.norm(dense))
    removed = float(np.linalg.norm(dense - np.asarray(new.literal, np.float64))) / norm if norm else 0.0
    return dataclasses.replace(row, status="pruned", weight_rel_l2=removed)


def _k_last_but_one(value: np.ndarray, spec: Product) -> np.ndarray:
    """The weight with its reduction axis where the array functions group it (second to last)."""
    return np.moveaxis(value, spec.k_axis, -2)


def _ineligible(ins: Instruction, value: np.ndarray, dtype: DType, spec: Product, skip: frozenset[str],
                min_size: int) -> str:
    """Why the product's weight is left dense ('' if it is not)."""
    if skip & ({o.name for o in ins.origin} | {ins.tensor or ""}):
        return "skip_names"
    if dtype not in PRUNABLE_DTYPES:
        return f"{dtype.name} weight"
    if value.ndim < 2:
        return "a vector weight"
    k = value.shape[spec.k_axis]
    if k % 4:
        return f"K = {k} is no multiple of 4"
    if value.size < min_size:
        return f"{value.size} elements < min_size {min_size}"
    return ""


def _check_names(module: Module, names: Iterable[str]) -> frozenset[str]:
    """`names` as a set; an ArgumentError for one that names no ONNX node or tensor of the program."""
    if isinstance(names, str):
        raise ArgumentError(f"prune_2_4: skip_names is a list of ONNX node names, got the string {names!r}")
    wanted = frozenset(n.strip() for n in names if n.strip())
    known = {o.name for i in module.instructions for o in i.origin} | {i.tensor for i in module.instructions}
    unknown = sorted(wanted - known)
    if unknown:
        raise ArgumentError(f"prune_2_4: skip_names {', '.join(map(repr, unknown))} name no ONNX node of the model")
    return wanted
