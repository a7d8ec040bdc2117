"""`custom_op`: one definition of a user's operator, built on the internal registries.

The definition becomes
  * an op class in the op registry (ir/op.py), a frozen dataclass whose fields are the typed
    attributes, named `custom.<domain>.<name>` in the IR (its text form and .fgx files say that);
  * an ONNX converter for (domain, name) (onnx/registry.py), so a node of that domain parses;
  * entries in the cpu and gpu lowering tables where it brings kernels (custom/cpu.py, custom/gpu.py).
The ref target runs its numpy reference, as for every op; `verify` compares targets with it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import ArgumentError, ExecutionError, ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, get_op_class, register_op, registered_ops
from ..ir.shape import AnyShape, Shape, TupleShape
from .attrs import Attr
from .kernels import CKernel, TorchKernel, TritonKernel

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOMAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
PREFIX = "custom."


class CustomOp(Op):
    """Base of the op classes `custom_op` makes; the definition is `definition`."""

    kind = OpKind.OPAQUE
    definition: ClassVar[CustomOpDef]

    def __post_init__(self) -> None:
        d = self.definition
        for name, attr in d.attributes.items():  # the dataclass is frozen: normalized values set once
            object.__setattr__(self, name, attr.normalize(d.qualified, name, getattr(self, name)))

    @property
    def attrs(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.definition.attributes}

    def compute_shape(self, inputs: Sequence[AnyShape]) -> AnyShape:
        d = self.definition
        try:
            out = d.shape(list(inputs), **self.attrs)
        except ShapeError:
            raise
        except (ValueError, TypeError, IndexError, KeyError, ArithmeticError) as e:
            raise ShapeError(f"custom op {d.qualified}: its shape rule failed on inputs "
                             f"({', '.join(map(str, inputs))}): {type(e).__name__}: {e}") from e
        if isinstance(out, (list, tuple)):
            out = TupleShape(tuple(out))
        if not isinstance(out, (Shape, TupleShape)):
            raise ShapeError(f"custom op {d.qualified}: its shape rule returned {out!r}, not a Shape")
        return out

    # the rule receives the inputs' Shapes as they are, their dims ranges where dynamic
    compute_dynamic_shape = compute_shape

    def compute(self, args: list[np.ndarray]) -> Any:
        d = self.definition
        out = d.reference(*args, **self.attrs)
        return check_result(self, args, out)


def check_result(op: CustomOp, args: Sequence[Any], out: Any) -> Any:
    """`out` (a kernel's result on `args`) as the shape rule says it must be: an ExecutionError
    naming the op when its count, dtype or lens differ."""
    d = op.definition
    want = op.compute_shape([Shape.of(DType.from_numpy(np.asarray(a).dtype), np.shape(a)) for a in args])
    shapes = want.elements if isinstance(want, TupleShape) else (want,)
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(shapes):
        raise ExecutionError(f"custom op {d.qualified}: a kernel returned {len(outs)} outputs, its shape rule "
                             f"says {len(shapes)}")
    checked = []
    for k, (o, s) in enumerate(zip(outs, shapes)):
        o = np.asarray(o)
        if o.dtype != s.dtype.np or o.shape != tuple(s.lens):
            raise ExecutionError(f"custom op {d.qualified}: output {k} is {o.dtype}{list(o.shape)}, its shape "
                                 f"rule says {s}")
        checked.append(o)
    return tuple(checked) if isinstance(want, TupleShape) else checked[0]


@dataclasses.dataclass(frozen=True)
class CustomOpDef:
    """A registered custom op (what `custom_op` returns). `op_class` is its op in the registry."""

    name: str
    domain: str
    version: int
    attributes: Mapping[str, Attr]
    shape: Callable[..., Any]
    reference: Callable[..., Any]
    cpu: CKernel | Callable[..., Any] | None
    gpu: TorchKernel | TritonKernel | None
    host_fallback: bool
    doc: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.name}"

    @property
    def op_name(self) -> str:
        return PREFIX + self.qualified

    @property
    def op_class(self) -> type[CustomOp]:
        return get_op_class(self.op_name)  # type: ignore[return-value]

    def __call__(self, **attrs: Any) -> CustomOp:
        """An instance of the op (attributes checked), e.g. for building IR by hand."""
        unknown = set(attrs) - set(self.attributes)
        if unknown:
            raise ArgumentError(f"custom op {self.qualified} has no attributes {sorted(unknown)}")
        return self.op_class(**attrs)


def custom_op(name: str, *, domain: str, shape: Callable[..., Any], reference: Callable[..., Any],
              attributes: Mapping[str, Attr] | None = None, version: int = 1,
              cpu: CKernel | Callable[..., Any] | None = None, gpu: TorchKernel | TritonKernel | None = None,
              host_fallback: bool = False, doc: str = "") -> CustomOpDef:
    """Define and register the operator `name` of ONNX domain `domain` (see docs/custom-ops.md).

    shape(inputs, **attrs) -> Shape or a list of Shapes: `inputs` are fusegraph Shapes, their dims
      ranges (`Dim(min, max)`) where dynamic; raise ShapeError for inputs the op does not take.
    reference(*arrays, **attrs) -> array(s): the numpy definition (the ref target runs it; `verify`
      and the tests compare every target with it).
    cpu, gpu: optional kernels (custom/kernels.py). A target without one runs the reference on the
      host, with a warning naming the op, only if `host_fallback`; otherwise compiling for it is a
      CompileError naming the op.
    Registering the same name, domain and version again replaces the definition (a module imported
    twice, a notebook cell run again); another version of a registered op is an error."""
    if not _NAME.fullmatch(name) or not _DOMAIN.fullmatch(domain):
        raise ArgumentError(f"custom op name {name!r} / domain {domain!r}: expected an identifier and a dotted "
                            "identifier (e.g. 'YoloDecode', 'com.example.vision')")
    if domain in ("", "ai.onnx", "ai.onnx.ml", "com.microsoft"):
        raise ArgumentError(f"custom op {name}: domain {domain!r} is ONNX's or ONNX Runtime's; use your own")
    if type(version) is not int or version < 1:
        raise ArgumentError(f"custom op {domain}.{name}: version must be an int >= 1, got {version!r}")
    attributes = dict(attributes or {})
    for key, attr in attributes.items():
        if not _NAME.fullmatch(key) or not isinstance(attr, Attr):
            raise ArgumentError(f"custom op {domain}.{name}: attribute {key!r} must be an identifier mapped to an Attr")
    if not (cpu is None or isinstance(cpu, CKernel) or callable(cpu)):
        raise ArgumentError(f"custom op {domain}.{name}: cpu must be a CKernel or a callable, got {cpu!r}")
    if not (gpu is None or isinstance(gpu, (TorchKernel, TritonKernel))):
        raise ArgumentError(f"custom op {domain}.{name}: gpu must be a TorchKernel or a TritonKernel, got {gpu!r}")
    d = CustomOpDef(name, domain, version, attributes, shape, reference, cpu, gpu, host_fallback, doc)
    _register(d)
    return d


# targets' modules that lower custom ops: told of each new definition if already imported (each
# installs every registered custom op when it is imported), so defining an op imports no target
TARGET_HOOKS = ("fusegraph.targets.cpu.kernels.custom", "fusegraph.targets.gpu.lower_custom")


def _install(d: CustomOpDef) -> None:
    for name in TARGET_HOOKS:
        module = sys.modules.get(name)
        if module is not None:
            module.install(d)


def _register(d: CustomOpDef) -> None:
    from . import onnx

    old = registered_ops().get(d.op_name)
    if old is not None:
        if not issubclass(old, CustomOp) or old.definition.version != d.version \
                or set(old.definition.attributes) != set(d.attributes):
            raise ArgumentError(f"custom op {d.qualified} is already registered (version "
                                f"{getattr(getattr(old, 'definition', None), 'version', '?')}, other attributes "
                                "or not a custom op): a new definition needs a new version or name")
        old.definition, old.host_fallback = d, d.host_fallback  # type: ignore[misc]
        _install(d)
        return
    fields = [(k, Any, dataclasses.field(default=None)) for k in d.attributes]
    cls = dataclasses.make_dataclass(
        f"Custom_{d.domain.replace('.', '_')}_{d.name}", fields, bases=(CustomOp,), frozen=True,
        namespace={"name": d.op_name, "definition": d, "host_fallback": d.host_fallback,
                   "__doc__": d.doc or f"custom op {d.qualified} (version {d.version})"})
    register_op(cls)
    onnx.register_converter(d)
    _install(d)


def custom_ops() -> dict[str, CustomOpDef]:
    """Every registered custom op's definition, by its IR op name."""
    return {n: c.definition for n, c in registered_ops().items() if issubclass(c, CustomOp)}  # type: ignore[attr-defined]


def uses_custom_ops(program: Any) -> list[str]:
    """The qualified names of the custom ops `program` holds (ONNX Runtime cannot run those)."""
    names = {ins.op.definition.qualified for m in program.modules.values() for ins in m.instructions
             if isinstance(ins.op, CustomOp)}
    return sorted(names)
