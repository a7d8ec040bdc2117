"""Compiled programs as .fgx files: `save` writes one, `load` gives back a program ready to run.

Saving prints the optimized IR with every large literal replaced by a reference to a raw weight blob
(deduplicated by content), adds the target's artifacts (`Target.export_artifacts`), and records in the
manifest the target, every compile option, the input/output specs and the program's metadata.

Loading checks the container, parses the IR with each weight mapped straight from the file (read-only,
no copy) and lets the target rebuild its executable (`Target.load`) without running a single pass:
the loaded program runs the same IR on the same bytes, so its outputs are bit-identical. Weight
checksums are verified before the first run (lazy, so `load` does not read the weights), at load with
`integrity="eager"`, and always at load when a verify key is given: a damaged or tampered file never
produces an output. The container itself is described in fgx_format.py and docs/fgx-format.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import secrets
from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np

from ..errors import (
    ArgumentError,
    CompiledFileError,
    CompileError,
    CustomOpError,
    FusegraphError,
    TargetError,
)
from ..ir.dtypes import DType
from ..ir.program import Program
from ..ir.shape import AnyShape, Shape
from ..ir.text import parse_program, print_program
from . import provenance_part, signing
from .fgx_format import ALIGNMENT, Container, ContainerWriter

INTEGRITY_MODES = ("lazy", "eager")
_ARTIFACT = "artifact/"
_WEIGHTS = "weights/"
# artifacts named weights/... are bulk data (a target's pre-packed weights): checked when weights are
_BULK_ARTIFACT = _ARTIFACT + _WEIGHTS


# -- saving -----------------------------------------------------------------------------------------
def save(program: Program, path: str | os.PathLike, *, sign_key: signing.Key | None = None) -> None:
    """Write the compiled `program` to `path`, signed with `sign_key` (or $FUSEGRAPH_SIGN_KEY) if given."""
    path = os.fspath(path)
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "xb") as f:
            _write(program, f, sign_key)
        # a new file, not an overwrite: programs already loaded from `path` keep mapping their own bytes
        os.replace(tmp, path)
    except OSError as e:
        raise CompiledFileError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_buffer(program: Program, *, sign_key: signing.Key | None = None) -> bytes:
    out = io.BytesIO()
    _write(program, out, sign_key)
    return out.getvalue()


def _write(program: Program, out: BinaryIO, sign_key: signing.Key | None) -> None:
    from .. import __version__
    from ..targets import get_target

    exe = program.executable
    if exe is None or program.target_name is None:
        raise CompileError("the program is not compiled: call program.compile(target) before saving it")
    key = signing.resolve_key(sign_key)
    target = get_target(program.target_name)
    writer = ContainerWriter(out, __version__)
    blobs: dict[str, str] = {}  # sha256 of the bytes -> blob key
    nbytes = 0

    def write_literal(value: np.ndarray) -> str:
        nonlocal nbytes
        raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        digest = hashlib.sha256(raw).hexdigest()
        if digest not in blobs:
            blobs[digest] = str(len(blobs))
            writer.add(_WEIGHTS + blobs[digest], "weights", memoryview(raw), digest)
            nbytes += raw.size
        return blobs[digest]

    ir = exe.program
    writer.add("ir", "ir", print_program(ir, literal_writer=write_literal).encode("utf-8"))
    writer.add(provenance_part.PART, provenance_part.KIND, provenance_part.dump(ir))
    artifacts = target.export_artifacts(exe)
    for name in sorted(artifacts):
        writer.add(_ARTIFACT + name, "artifact", artifacts[name])
    writer.finish({
        "format": "fgx",
        "fusegraph_version": __version__,
        "target": target.name,
        "options": {f.name: _jsonable(getattr(exe.options, f.name)) for f in dataclasses.fields(exe.options)},
        "inputs": [_spec(n, s) for n, s in ir.get_parameter_shapes().items()],
        "outputs": [_spec(n, s) for n, s in zip(ir.output_names, ir.get_output_shapes())],
        "metadata": dict(ir.metadata),
        "weights": {"blobs": len(blobs), "bytes": nbytes},
        "artifacts": sorted(artifacts),
        "custom_ops": _custom_ops(ir),
    }, key)


def _custom_ops(program: Program) -> list[dict[str, Any]]:
    """The custom ops the program uses, by IR name, domain, name and version: a loading process must
    have registered the same ones (their code is never in the file)."""
    from ..custom.definition import CustomOp

    seen: dict[str, dict[str, Any]] = {}
    for m in program.modules.values():
        for ins in m.instructions:
            if isinstance(ins.op, CustomOp) and ins.op.name not in seen:
                d = ins.op.definition
                seen[ins.op.name] = {"op": ins.op.name, "domain": d.domain, "name": d.name, "version": d.version}
    return [seen[k] for k in sorted(seen)]


def _check_custom_ops(c: Container) -> None:
    """CustomOpError, naming the op, unless every custom op the file records is registered here at its
    version (the IR would otherwise fail to parse with an unknown op name, saying less)."""
    from ..custom.definition import CustomOp
    from ..ir.op import registered_ops

    wanted = c.manifest.get("custom_ops", [])
    if not isinstance(wanted, list) or not all(
            isinstance(e, dict) and isinstance(e.get("op"), str) and type(e.get("version")) is int for e in wanted):
        raise c.error("its manifest's custom_ops is not a list of {op, domain, name, version}")
    ops = registered_ops()
    for e in wanted:
        cls = ops.get(e["op"])
        what = f"{e.get('domain')}.{e.get('name')} version {e['version']}"
        if cls is None or not issubclass(cls, CustomOp):
            raise CustomOpError(f"the program uses custom op {what}, which is not registered in this process: "
                                "import the module that defines it (fusegraph.custom_op) before loading")
        if cls.definition.version != e["version"]:
            raise CustomOpError(f"the program uses custom op {what}; this process registered version "
                                f"{cls.definition.version}")


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, DType):
        return v.value
    return v


def _spec(name: str, shape: AnyShape) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "shape": str(shape)}
    if isinstance(shape, Shape):  # spelled out for tools that read manifests without fusegraph
        spec["dtype"] = shape.dtype.value
        spec["dims"] = [{"min": d.min, "max": d.max, "optimals": list(d.optimals)} for d in shape.dims]
    return spec


# -- loading ----------------------------------------------------------------------------------------
def load(path: str | os.PathLike, *, verify_key: signing.Key | None = None, integrity: str = "lazy") -> Program:
    """Read a compiled program from an .fgx file; it is ready to `run`. With `verify_key` (or
    $FUSEGRAPH_SIGN_KEY) an unsigned or tampered file is refused."""
    return _load(Container.open(path), verify_key, integrity)


def load_buffer(data: bytes | bytearray | memoryview, *, verify_key: signing.Key | None = None,
                integrity: str = "lazy") -> Program:
    """`load` from bytes. Weights are views of `data` if it is 64-byte aligned, else of one aligned copy."""
    view = memoryview(data).cast("B")
    if np.frombuffer(view, np.uint8).ctypes.data % ALIGNMENT:
        aligned = np.empty(len(view) + ALIGNMENT, np.uint8)
        start = -aligned.ctypes.data % ALIGNMENT
        aligned[start:start + len(view)] = np.frombuffer(view, np.uint8)
        view = memoryview(aligned[start:start + len(view)])
    return _load(Container.from_buffer(view), verify_key, integrity)


def _load(c: Container, verify_key: signing.Key | None, integrity: str) -> Program:
    from .. import __version__

    if integrity not in INTEGRITY_MODES:
        raise ArgumentError(f"integrity must be one of {INTEGRITY_MODES}, not {integrity!r}")
    key = signing.resolve_key(verify_key)
    if key is not None:
        c.check_signature(key)
    target_name, options, metadata = _read_manifest(c)
    target = _target(c, target_name)
    kinds: dict[str, list[str]] = {"ir": [], "weights": [], "artifact": [], "meta": []}
    for name, part in c.parts.items():
        kinds[part.kind].append(name)
    if kinds["ir"] != ["ir"]:
        raise c.error(f"it must hold one IR part named 'ir', it holds {kinds['ir']}")
    # Checksums prove a file intact, not honest: anyone can recompute them. Only a verified signature
    # says a holder of the key wrote it; anything else is checked as hostile input (docs/fgx-format.md).
    trusted = key is not None
    eager = trusted or integrity == "eager"
    bulk = kinds["weights"] + [n for n in kinds["artifact"] if n.startswith(_BULK_ARTIFACT)]
    if kinds["meta"] not in ([], [provenance_part.PART]):
        raise c.error(f"its meta parts are {kinds['meta']}: this fusegraph knows only {provenance_part.PART!r}")
    c.verify(kinds["ir"] + kinds["meta"] + [n for n in kinds["artifact"] if n not in bulk] + (bulk if eager else []))
    # A signed IR's shapes were derived and verified when it was compiled: re-derive them unless the
    # signature holds and this fusegraph (these shape rules) wrote it, or when asked to check
    # everything. Kernels, buffers and the memory plan are sized from these shapes.
    as_written = trusted and integrity != "eager" and c.manifest.get("fusegraph_version") == __version__
    _check_custom_ops(c)
    program = _parse_ir(c, check_shapes=not as_written)
    program.metadata = metadata
    if kinds["meta"]:
        provenance_part.apply(program, c.part(provenance_part.PART), c.error)
    _check_specs(c, program)
    if not trusted:
        _check_parameters(c, program)
    artifacts = {n[len(_ARTIFACT):]: c.part(n) for n in kinds["artifact"]}
    use = target.check_memory(program, options)  # sized from the IR before a kernel is built
    # a dynamic program compiles per shape, later
    exe = target.rebuild(program, options, artifacts, trusted=trusted)
    exe.peak_memory = use
    program.executable, program.target_name = exe, target.name
    if not eager and bulk:
        exe.defer_check(lambda: c.verify(bulk))
    return program


def _read_manifest(c: Container) -> tuple[str, Any, dict[str, str]]:
    from ..targets import CompileOptions

    m = c.manifest
    target, opts, meta = m.get("target"), m.get("options"), m.get("metadata")
    if not isinstance(target, str) or not isinstance(opts, dict) or not isinstance(meta, dict):
        raise c.error("its manifest lacks the target, the compile options or the metadata")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise c.error("its manifest metadata is not a table of strings")
    fields = {f.name: f for f in dataclasses.fields(CompileOptions)}
    unknown = sorted(set(opts) - set(fields))
    if unknown:
        raise c.error(f"it was compiled with options {unknown}, which this fusegraph does not know "
                      f"(written by fusegraph {c.writer})")
    values = {name: _option(c, name, value, fields[name].default) for name, value in opts.items()}
    try:
        options = CompileOptions(**values)
    except ArgumentError as e:
        raise c.error(f"its manifest's {e}") from None
    return target, options, dict(meta)


def _option(c: Container, name: str, value: Any, default: Any) -> Any:
    if isinstance(default, tuple):
        ok = isinstance(value, list) and all(isinstance(x, str) for x in value)
        value = tuple(value) if ok else value
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif default is None:  # an optional setting: absent, or a plain scalar
        ok = value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool))
    else:
        ok = type(value) is type(default)
    if not ok:
        raise c.error(f"compile option {name}={value!r} in its manifest has the wrong type")
    return value


def _target(c: Container, name: str):
    from ..targets import get_target

    try:
        return get_target(name)
    except TargetError as e:
        raise TargetError(f"{c.source}: this program was compiled for target {name!r}, "
                          f"which cannot run here: {e}") from None


def _parse_ir(c: Container, check_shapes: bool) -> Program:
    def read_literal(key: str, shape: Shape) -> np.ndarray:
        part = c.parts.get(_WEIGHTS + key)
        if part is None or part.kind != "weights":
            raise c.error(f"its IR refers to weight blob {key!r}, which the file does not hold")
        if shape.dtype == DType.string:
            raise c.error(f"weight blob {key!r} is declared {shape}: string literals are stored in the IR")
        count = math.prod(shape.lens)
        if part.length != count * shape.dtype.itemsize:
            raise c.error(f"weight blob {key!r} holds {part.length} bytes, its literal {shape} needs "
                          f"{count * shape.dtype.itemsize}")
        # a read-only view of the mapped file: no copy, and pages load only when a kernel reads them
        return np.frombuffer(c.data, shape.dtype.np, count, part.offset).reshape(shape.lens)

    try:
        program = parse_program(str(c.part("ir"), "utf-8"), literal_reader=read_literal, check_shapes=check_shapes)
    except CompiledFileError:
        raise
    except (FusegraphError, ValueError, TypeError, AttributeError, KeyError, IndexError, ArithmeticError,
            RecursionError) as e:
        raise c.error(f"its IR cannot be read by this fusegraph (the file was written by fusegraph "
                      f"{c.writer}): {type(e).__name__}: {e}") from None
    # the parser builds well-formed modules; what it cannot promise is that the text was complete
    if "main" not in program.modules or any(m.return_ins is None for m in program.modules.values()):
        raise c.error("its IR is incomplete (no main module, or a module without @return)")
    return program


def _check_parameters(c: Container, program: Program) -> None:
    """The program's inputs are copied into buffers laid out as their shapes say: dense ones only."""
    for ins in program.main.parameters:
        if isinstance(ins.shape, Shape) and not ins.shape.standard:
            raise c.error(f"its IR gives input {ins.op.param_name!r} the strided shape {ins.shape}: "
                          f"program inputs are dense")


def _check_specs(c: Container, program: Program) -> None:
    """The manifest's input/output specs are for readers without fusegraph: they must match the IR."""
    ins, outs = c.manifest.get("inputs"), c.manifest.get("outputs")
    want_in = [[n, str(s)] for n, s in program.get_parameter_shapes().items()]
    want_out = [[n, str(s)] for n, s in zip(program.output_names, program.get_output_shapes())]
    for what, specs, want in (("inputs", ins, want_in), ("outputs", outs, want_out)):
        got = [[s.get("name"), s.get("shape")] for s in specs if isinstance(s, Mapping)] \
            if isinstance(specs, list) else None
        if got != want:
            raise c.error(f"the {what} in its manifest ({got}) disagree with its IR ({want})")
