"""The stable text form of the IR: `print_program` writes it, `parse_program` reads it back.

    module main
      %0 = @param[param_name="x"] : float32[1,3,224,224]
      %1 = @literal[b64:AAAA...] : float32[64,3,7,7]
      %2 = convolution[padding=(3, 3, 3, 3), stride=(2, 2)](%0, %1) : float32[1,64,112,112]
      %3 = if(%c) <then_0, else_0> : (float32[2], int64[])
      @return(%2)

Instructions are numbered across the whole program so submodules can name outer values.
Large literals print as base64 of their bytes (or a digest with `full=False`, which cannot be read back).
A `literal_writer` may store them elsewhere instead (the compiled-file format does): the text then says
`@literal[ref:KEY]` and `parse_program` asks its `literal_reader(KEY, shape)` for the array.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import hashlib
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import IRError
from .builtin import Literal
from .dtypes import DType
from .limits import check_nesting
from .module import Instruction
from .op import Op, get_op_class
from .shape import AnyShape, Dim, OptionalShape, SequenceShape, Shape, TupleShape
from .symbolic import Sym

if TYPE_CHECKING:
    from .module import Module
    from .program import Program

INLINE_LITERAL_MAX = 16
_REF_KEY = re.compile(r"[\w./-]+")
# literal_writer(array) -> KEY; literal_reader(KEY, shape) -> the array, of that shape and dtype
LiteralWriter = Callable[[np.ndarray], str]
LiteralReader = Callable[[str, Shape], np.ndarray]


# -- values -----------------------------------------------------------------------------------------
def format_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (int, str)):
        return repr(v)
    if isinstance(v, (Shape, TupleShape, SequenceShape, OptionalShape)):
        return f"shape({str(v)!r})"
    if isinstance(v, tuple):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    raise IRError(f"cannot print attribute value {v!r} of type {type(v).__name__}")


def parse_value(text: str) -> Any:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise IRError(f"bad attribute value {text!r}") from e
    return _value(node, text)


def _value(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple) or isinstance(node, ast.List):
        return tuple(_value(e, text) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, text)
    if isinstance(node, ast.Name):
        if node.id in ("inf", "nan"):
            return float(node.id)
        try:
            return DType(node.id)
        except ValueError:
            pass
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "shape"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
        return parse_shape(node.args[0].value)
    raise IRError(f"bad attribute value {ast.unparse(node)!r} in {text!r}")


# -- shapes -----------------------------------------------------------------------------------------
_DIM = re.compile(r"\{(\d+)\.\.(\d+|\?)(?::([\d,]+))?(?:@([\w*+-]+))?\}|(\d+)")


def parse_shape(text: str) -> AnyShape:
    text = text.strip()
    if text.startswith("("):
        inner = text[1:-1].strip()
        return TupleShape(tuple(parse_shape(p) for p in _split_top(inner) if p.strip()))
    if text.startswith("opt<") and text.endswith(">"):
        return OptionalShape(parse_shape(text[4:-1]))  # type: ignore[arg-type]
    if text.startswith("seq") and text.endswith(">"):
        return _parse_sequence_shape(text)
    m = re.fullmatch(r"(\w+)\[([^\]]*)\](?:@\[([^\]]*)\])?", text)
    if not m:
        raise IRError(f"bad shape {text!r}")
    try:
        dtype = DType(m.group(1))
    except ValueError:
        raise IRError(f"bad dtype in shape {text!r}") from None
    dims = []
    for part in _split_top(m.group(2)):
        part = part.strip()
        if not part:
            continue
        d = _DIM.fullmatch(part)
        if not d:
            raise IRError(f"bad dimension {part!r} in {text!r}")
        dims.append(_dim_of(d, text))
    if m.group(3) is not None:
        return Shape.of(dtype, [d.min for d in dims], [int(x) for x in m.group(3).split(",") if x])
    return Shape(dtype, tuple(dims))


def _parse_sequence_shape(text: str) -> SequenceShape:
    """seq<float32[2,{0..?}]>, seq[3]<int64[4]>; an element of unknown rank prints as float32[*]."""
    m = re.fullmatch(r"seq(?:\[([^\]]*)\])?<(.*)>", text)
    if not m:
        raise IRError(f"bad sequence shape {text!r}")
    length = Dim(0, None)
    if m.group(1) is not None:
        d = _DIM.fullmatch(m.group(1).strip())
        if not d:
            raise IRError(f"bad sequence length in {text!r}")
        length = _dim_of(d)
    elem_text = m.group(2).strip()
    if elem_text.endswith("[*]"):
        try:
            return SequenceShape(DType(elem_text[:-3]), None, length)
        except ValueError:
            raise IRError(f"bad dtype in shape {text!r}") from None
    elem = parse_shape(elem_text)
    if not isinstance(elem, Shape):
        raise IRError(f"a sequence holds tensors: {text!r}")
    return SequenceShape(elem.dtype, elem, length)


def _dim_of(d: re.Match, text: str = "") -> Dim:
    if d.group(5) is not None:
        return Dim.fixed(int(d.group(5)))
    hi = None if d.group(2) == "?" else int(d.group(2))
    opts = tuple(int(x) for x in d.group(3).split(",")) if d.group(3) else ()
    try:
        sym = Sym.parse(d.group(4)) if d.group(4) else None
    except ValueError as e:
        raise IRError(f"bad symbolic dim in {text!r}: {e}") from None
    return Dim(int(d.group(1)), hi, opts, sym)


# the characters the bracket scanners act on; the rest of a line is skipped over by the regex engine
_STRUCTURE = re.compile(r"""[][(){}<>"',]""")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    parts, depth, start, quote = [], 0, 0, None
    for m in _STRUCTURE.finditer(text):
        c, k = m.group(), m.start()
        if quote:
            if c == quote and text[k - 1] != "\\":
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif depth == 0:  # a separator
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


# -- ops --------------------------------------------------------------------------------------------
def format_op(op: Op) -> str:
    attrs = op.attributes()
    if not attrs:
        return op.name
    return op.name + "[" + ", ".join(f"{k}={format_value(v)}" for k, v in attrs.items()) + "]"


def format_literal(value: np.ndarray, full: bool = True, writer: LiteralWriter | None = None) -> str:
    if value.dtype == object:
        return "[" + ", ".join(repr(str(x)) for x in value.reshape(-1)) + "]"
    if value.size <= INLINE_LITERAL_MAX:
        return "[" + ", ".join(format_value(_py(x)) for x in value.reshape(-1).tolist()) + "]"
    if writer is not None:
        key = writer(value)
        if not _REF_KEY.fullmatch(key):
            raise IRError(f"literal writer gave a bad key {key!r}")
        return f"[ref:{key}]"
    raw = np.ascontiguousarray(value).tobytes()
    if not full:
        return f"[sha1:{hashlib.sha1(raw).hexdigest()[:12]}]"
    return "[b64:" + base64.b64encode(raw).decode() + "]"


def _py(x):
    return float(x) if isinstance(x, float) or (hasattr(x, "dtype") and x.dtype.kind == "f") else x


def _parse_literal(body: str, shape: Shape, reader: LiteralReader | None = None) -> np.ndarray:
    body = body.strip()
    dt = shape.dtype.np
    if body.startswith("sha1:"):
        raise IRError("literal data was elided from this text (printed with full=False)")
    if body.startswith("ref:"):
        if reader is None:
            raise IRError(f"literal {body} is stored outside this text: parse it with a literal_reader")
        arr = reader(body[4:], shape)
        if arr.dtype != dt or arr.shape != shape.lens:
            raise IRError(f"literal {body} holds {arr.dtype}{list(arr.shape)}, the text says {shape}")
        return arr
    if body.startswith("b64:"):
        raw = base64.b64decode(body[4:])
        arr = np.frombuffer(raw, dtype=dt)
        if arr.size != math.prod(shape.lens):
            raise IRError(f"literal holds {arr.size} elements, shape {shape} needs {math.prod(shape.lens)}")
        return arr.reshape(shape.lens).copy()
    items = parse_value("[" + body + "]") if body else ()
    if shape.dtype == DType.string:
        return np.array(items, dtype=object).reshape(shape.lens)
    arr = np.array(items, dtype=np.float64 if shape.dtype.is_float else None)
    return arr.astype(dt).reshape(shape.lens)


# -- programs ---------------------------------------------------------------------------------------
def print_program(program: Program, full: bool = True, literal_writer: LiteralWriter | None = None) -> str:
    names: dict[int, str] = {}
    lines: list[str] = []
    counter = 0
    for mod in program.modules_in_order():
        header = f"module {mod.name}" + (f" parent {mod.parent.name}" if mod.parent is not None else "")
        lines.append(header)
        for ins in mod.instructions:
            names[ins.uid] = f"%{counter}"
            counter += 1
            lines.append("  " + _format_ins(ins, names, full, literal_writer))
    return "\n".join(lines) + "\n"


def _format_ins(ins: Instruction, names: dict[int, str], full: bool,
                writer: LiteralWriter | None = None) -> str:
    from .builtin import Literal, Return

    args = ", ".join(names.get(i.uid, f"%?{i.uid}") for i in ins.inputs)
    if isinstance(ins.op, Return):
        return f"@return({args})"
    if isinstance(ins.op, Literal):
        head = ins.op.name + format_literal(ins.op.value, full, writer)
    else:
        head = format_op(ins.op)
    if ins.op.name == "@param":
        head = f'@param[param_name={ins.op.param_name!r}]'
    text = f"{names[ins.uid]} = {head}"
    if ins.inputs:
        text += f"({args})"
    if ins.module_args:
        text += " <" + ", ".join(m.name for m in ins.module_args) + ">"
    return f"{text} : {ins.shape}"


_LINE = re.compile(r"(%\d+) = ([^\[\(<:\s]+)")
# A line without nesting in its attributes, quotes or submodules: `%3 = op[a=(1, 2)](%1, %2) : shape`
_PLAIN_LINE = re.compile(r"(%\d+) = ([^\[\(<:\s]+)(?:\[([^\[\]<>\"']*)\])?(?:\(([%\d, ]*)\))? : ([^<>]+)")


def parse_program(text: str, literal_reader: LiteralReader | None = None, check_shapes: bool = True) -> Program:
    """Read the text form back. With `check_shapes=False` every instruction takes the shape the text
    gives instead of re-deriving it, in text order: only for text that this fusegraph printed and that
    is known intact (a compiled file's checksummed IR), where re-deriving would only repeat the work."""
    from .program import Program

    program = Program.__new__(Program)
    program.__init__(empty=True)
    # First split the text into modules; then parse each module, parsing a control-flow
    # instruction's submodules just before the instruction (its shape rule reads them).
    blocks: dict[str, list[tuple[int, str]]] = {}
    current: Module | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("module "):
            parts = line.split()
            parent = program.get_or_create_module(parts[3]) if len(parts) == 4 and parts[2] == "parent" else None
            current = program.get_or_create_module(parts[1])
            current.parent = parent
            blocks.setdefault(current.name, [])
            continue
        if current is None:
            raise IRError(f"line {lineno}: instruction outside a module")
        blocks[current.name].append((lineno, line))
    check_nesting(program.modules.values())  # before the recursive parse below: a cycle or a depth past it
    values: dict[str, Instruction] = {}
    parsed: set[str] = set()
    memo: dict[str, Any] = {}  # shape and op texts already read (see _read)

    def parse_module(name: str) -> None:
        if name in parsed:
            return
        parsed.add(name)
        mod = program.get_or_create_module(name)
        for lineno, line in blocks.get(name, []):
            try:
                _parse_ins(line, mod, program, values, parse_module, reader=literal_reader,
                           check_shapes=check_shapes, memo=memo)
            except IRError as e:
                raise (e if str(e).startswith("line ") else IRError(f"line {lineno}: {e}")) from None

    for name in blocks:
        parse_module(name)
    return program


def _parse_ins(line: str, mod: Module, program: Program, values: dict[str, Instruction],
               parse_module: Callable[[str], None] = lambda name: None, *,
               reader: LiteralReader | None = None, check_shapes: bool = True,
               memo: dict[str, Any] | None = None) -> None:
    if line.startswith("@return"):
        inner = line[len("@return("):-1]
        mod.add_return(*[_lookup(values, a) for a in _split_top(inner) if a.strip()])
        return
    m = _PLAIN_LINE.fullmatch(line)
    if m:  # most lines: the regex alone splits them
        name, opname, attrs_text, args, shape_text = m.groups()
        inputs = [_lookup(values, a) for a in args.split(",")] if args else []
        _add_ins(mod, name, opname, attrs_text or "", inputs, [], shape_text, values, reader, check_shapes, memo)
        return
    m = _LINE.match(line)
    if not m:
        raise IRError(f"cannot read {line!r}")
    name, opname = m.group(1), m.group(2)
    rest = line[m.end():]
    attrs_text = ""
    if rest.startswith("["):
        end = _matching(rest, 0)
        attrs_text, rest = rest[1:end], rest[end + 1:]
    inputs: list[Instruction] = []
    if rest.startswith("("):
        end = _matching(rest, 0)
        inputs = [_lookup(values, a) for a in _split_top(rest[1:end]) if a.strip()]
        rest = rest[end + 1:]
    rest = rest.strip()
    module_args = []
    if rest.startswith("<"):
        end = _matching(rest, 0)
        module_args = [program.get_or_create_module(n.strip()) for n in rest[1:end].split(",")]
        for sub in module_args:
            parse_module(sub.name)
        rest = rest[end + 1:].strip()
    if not rest.startswith(":"):
        raise IRError(f"missing ': shape' in {line!r}")
    _add_ins(mod, name, opname, attrs_text, inputs, module_args, rest[1:], values, reader, check_shapes, memo)


def _add_ins(mod: Module, name: str, opname: str, attrs_text: str, inputs: list[Instruction],
             module_args: list[Module], shape_text: str, values: dict[str, Instruction],
             reader: LiteralReader | None, check_shapes: bool, memo: dict[str, Any] | None) -> None:
    shape = _read(memo, parse_shape, shape_text)
    if opname == "@literal" and not check_shapes:
        ins = mod._attach(Instruction(Literal(_parse_literal(attrs_text, shape, reader)), [], shape), None)
    elif opname == "@literal":  # in text order, as written (positions name literals: cpu/artifacts.py)
        value = np.asarray(_parse_literal(attrs_text, shape, reader))
        if value.shape != tuple(shape.lens):
            value = value.reshape(shape.lens)
        op = Literal(value)
        derived = op.compute_shape([])
        if str(derived) != str(shape):
            raise IRError(f"@literal: text says {shape}, its value is {derived}")
        ins = mod._attach(Instruction(op, [], shape), None)
    elif opname == "@param":
        pname = parse_value(attrs_text.split("=", 1)[1])
        ins = mod.add_parameter(pname, shape)
    else:
        op = _read(memo, parse_op, f"{opname}[{attrs_text}]")
        if not check_shapes:
            ins = mod._attach(Instruction(op, inputs, shape, module_args), None)
        else:
            ins = _add_checked(mod, op, inputs, module_args, shape, memo)
    values[name] = ins


def _add_checked(mod: Module, op: Op, inputs: list[Instruction], module_args: list[Module], shape: AnyShape,
                 memo: dict[str, Any] | None) -> Instruction:
    """Add an instruction with the shape its op's rule gives, which must be the text's. A rule's result
    is remembered by the op and its inputs' shapes, all objects of `memo` (one per text, kept alive
    there, so their ids stay theirs): a model repeats its layers, and the rule runs once per kind."""
    key = None
    if memo is not None and not module_args:  # a rule that reads submodules is not a function of shapes
        key = ("rule", id(op), *(id(i.shape) for i in inputs))
        seen = memo.get(key)
        if seen is not None and seen[0] is shape:
            return mod._attach(Instruction(op, inputs, shape, module_args), None)
    ins = mod.add(op, *inputs, module_args=module_args)
    if str(ins.shape) != str(shape):
        raise IRError(f"{op.name}: text says {shape}, the shape rule gives {ins.shape}")
    ins.shape = shape  # equal, and memo's object: the key of the instructions that read it
    if key is not None:
        memo[key] = (shape, op, [i.shape for i in inputs])
    return ins


def parse_op(text: str) -> Op:
    """The inverse of `format_op`: `name[key=value, ...]` (or `name`) -> the op."""
    opname, _, attrs_text = text.partition("[")
    cls = get_op_class(opname)
    kwargs = {}
    for item in _split_top(attrs_text[:-1]):
        if item.strip():
            key, _, val = item.partition("=")
            kwargs[key.strip()] = parse_value(val)
    unknown = set(kwargs) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise IRError(f"op {opname} has no attributes {sorted(unknown)}")
    return cls(**kwargs)


def _read(memo: dict[str, Any] | None, parse: Callable[[str], Any], text: str) -> Any:
    """parse(text), remembered in `memo`: a program repeats its shapes and ops, whose values are immutable."""
    if memo is None:
        return parse(text)
    key = f"{parse.__name__}:{text}"
    if key not in memo:
        memo[key] = parse(text)
    return memo[key]


def _lookup(values: dict[str, Instruction], ref: str) -> Instruction:
    ref = ref.strip()
    if ref not in values:
        raise IRError(f"undefined value {ref}")
    return values[ref]


def _matching(text: str, start: int) -> int:
    pairs = {"[": "]", "(": ")", "<": ">", "{": "}"}
    open_c, close_c = text[start], pairs[text[start]]
    depth, quote = 0, None
    for m in _STRUCTURE.finditer(text, start):
        c, k = m.group(), m.start()
        if quote:
            if c == quote and text[k - 1] != "\\":
                quote = None
        elif c in "\"'":
            quote = c
        elif c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return k
    raise IRError(f"unbalanced {open_c!r} in {text!r}")
