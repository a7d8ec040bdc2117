"""What the model-taking commands share: their options, the default target, and load -> parse -> compile."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import time
from typing import Any

import numpy as np

from ..errors import TargetError


def default_target() -> str:
    """"cpu" where this build has it, else the numpy reference target "ref"."""
    from ..targets import get_target

    try:
        get_target("cpu")
    except TargetError:
        return "ref"
    return "cpu"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_model_options(p: argparse.ArgumentParser) -> None:
    from .models import builtin_names

    names = ", ".join(builtin_names()) or "none yet"
    p.add_argument("model", metavar="MODEL", help=f"an .onnx file, or a built-in model ({names})")
    g = p.add_argument_group("input shapes")
    g.add_argument("--input-dim", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix the shape of input NAME, e.g. input=1,3,224,224 (repeatable)")
    g.add_argument("--dyn-input-dim", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="make input NAME dynamic: a dim is N, [MIN..MAX] or [MIN..MAX:OPT], e.g. "
                        "input=[1..32],3,[224..640],[224..640]; one compile runs every shape in the ranges, "
                        "generated inputs take OPT (else MAX) unless --input-dim picks their shape (repeatable)")
    g.add_argument("--default-dim", type=positive_int, metavar="N",
                   help="value of symbolic dims not set otherwise (default 1)")
    g.add_argument("--batch", type=positive_int, metavar="N",
                   help="first dim of inputs whose first dim is symbolic")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")


def add_target_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", metavar="T", help="ref, cpu or gpu (default: cpu where available, else ref)")
    p.add_argument("--fp16", action="store_true",
                   help="compute in float16 (quantize_fp16; inputs, outputs and reductions stay float32)")
    p.add_argument("--keep-fp32", metavar="OP[,OP...]", default="",
                   help="with --fp16: also compute these ops in float32 (names as `fusegraph ops` lists them)")
    p.add_argument("--fp16-io", action="store_true",
                   help="with --fp16: float32 inputs and outputs become float16 too (as ONNX Runtime's "
                        "keep_io_types=False): .npy inputs must be float16")


_RANGE = re.compile(r"\[(\d+)\.\.(\d+)(?::(\d+(?:,\d+)*))?\]")


def parse_dyn_dim_specs(specs: list[str]) -> dict[str, list[Any]]:
    """`["x=[1..32],3,[224..640:320]"]` -> `{"x": [Dim(1, 32), Dim(3, 3), Dim(224, 640, (320,))]}`."""
    from ..errors import InputError
    from ..ir.shape import Dim

    out: dict[str, list[Any]] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        example = "NAME=D0,D1,... with each dim N, [MIN..MAX] or [MIN..MAX:OPT] (e.g. x=[1..32],3,[224..640])"
        if not sep or not name or not value:
            raise InputError(f"bad --dyn-input-dim {spec!r}: expected {example}")
        dims = []
        for text in re.findall(r"\[[^\]]*\]|[^,]+", value):  # commas inside [..] separate optimals
            m = _RANGE.fullmatch(text)
            if text.isdigit():
                dims.append(Dim.fixed(int(text)))
            elif m is None:
                raise InputError(f"bad --dyn-input-dim {spec!r}: {text!r} is not a dim; expected {example}")
            else:
                lo, hi = int(m[1]), int(m[2])
                opts = tuple(int(v) for v in m[3].split(",")) if m[3] else ()
                if lo > hi or any(not lo <= o <= hi for o in opts):
                    raise InputError(f"bad --dyn-input-dim {spec!r}: {text} needs MIN <= OPT <= MAX")
                dims.append(Dim(lo, hi, opts))
        if name in out:
            raise InputError(f"--dyn-input-dim names input {name!r} twice")
        out[name] = dims
    return out


def compile_options(args: argparse.Namespace, **fields: Any) -> Any:
    """The CompileOptions the command line asks for (--fp16, --keep-fp32), with `fields` set."""
    from ..errors import InputError
    from ..targets import CompileOptions

    fp16 = bool(getattr(args, "fp16", False))
    keep = tuple(sorted({n.strip() for n in getattr(args, "keep_fp32", "").split(",") if n.strip()}))
    if keep and not fp16:
        raise InputError("--keep-fp32 names ops to keep in float32 under --fp16: add --fp16")
    fp16_io = bool(getattr(args, "fp16_io", False))
    if fp16_io and not fp16:
        raise InputError("--fp16-io makes float32 inputs and outputs float16 under --fp16: add --fp16")
    return CompileOptions(fp16=fp16, keep_fp32=keep, fp16_io=fp16_io, **fields)


def add_input_options(p: argparse.ArgumentParser) -> None:
    from .inputs import FILLS

    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="read input NAME from a .npy file (repeatable); its shape fixes the input's")
    p.add_argument("--fill", default="random", choices=FILLS,
                   help="value of inputs not given: random (built-in models: realistic samples; "
                        "integers: below the tables they index, else 0..9), 0 or 1 (default random)")


@dataclasses.dataclass
class Loaded:
    source: Any                 # models.ModelSource
    program: Any                # fusegraph Program, compiled when a target was asked for
    files: dict[str, np.ndarray]
    samples: dict[str, np.ndarray] | None
    target: str | None = None
    parse_s: float = 0.0
    compile_s: float = 0.0
    start_ns: int = 0  # time.perf_counter_ns() when parsing began (a trace's compile phases)
    bounds: dict[str, int] = dataclasses.field(default_factory=dict)  # integer input -> tables' length
    run_dims: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # generated inputs of dynamic ones

    def run(self, feeds: dict[str, np.ndarray]) -> list[Any]:
        """The program's outputs for `feeds`, with a status line while it runs."""
        from .report import status

        with status(f"running on {self.target}"):
            return self.program.run(feeds)

    def inputs(self, fill: str = "random", seed: int = 0) -> dict[str, np.ndarray]:
        from .inputs import build_inputs

        specs = self.program.get_parameter_shapes()
        return build_inputs(specs, files=self.files, samples=self._samples_for(specs, seed), fill=fill, seed=seed,
                            bounds=self.bounds, lens=self.run_dims)

    def _samples_for(self, specs: dict[str, Any], seed: int) -> dict[str, np.ndarray] | None:
        """A built-in model's samples at the shape a dynamic program's inputs run at (the first
        dynamic input's: batch, then the sequence of a [batch, seq] or the size of a square image)."""
        from .inputs import concrete_lens

        dynamic = [n for n, s in specs.items() if getattr(s, "is_dynamic", False)]
        if not dynamic or self.samples is None:
            return self.samples
        lens = list(self.run_dims.get(dynamic[0]) or concrete_lens(specs[dynamic[0]]))
        sizes = {"seq": lens[1]} if len(lens) == 2 else {"image_size": lens[2]} if len(lens) == 4 and lens[2] == lens[3] else {}
        return self.source.sample_inputs(lens[0], seed, **sizes)


def load(args: argparse.Namespace, *, target: str | None = None, options: Any = None, manager: Any = None,
         warn_defaults: bool = False, prepare: Any = None) -> Loaded:
    """Resolve MODEL, parse it with the shapes the options ask for, and compile it for `target`
    (`manager`, a PassManager, records the passes). `warn_defaults`: once it compiled, name on stderr
    the symbolic dims that took the default 1. `prepare(program)` runs between parse and compile
    (--int8: the quantizer)."""
    from .inputs import load_input_files
    from .models import resolve_model
    from .report import status

    files = load_input_files(getattr(args, "input", []))
    with status(f"loading {args.model}"):
        t0 = time.perf_counter()
        source = resolve_model(args.model)
        load_s = time.perf_counter() - t0
    if source.compiled is not None:
        if prepare is not None:
            from ..errors import InputError

            raise InputError(f"{args.model} is compiled already: quantize or prune the ONNX model instead")
        return _load_compiled(args, source, files, target, load_s)
    return load_source(args, source, files, target=target, options=options, manager=manager,
                       warn_defaults=warn_defaults, prepare=prepare)


def load_source(args: argparse.Namespace, source: Any, files: dict[str, np.ndarray], *, target: str | None = None,
                options: Any = None, manager: Any = None, warn_defaults: bool = False, prepare: Any = None) -> Loaded:
    """`load` of an ONNX ModelSource resolved already (verify --per-layer: the model with every tensor
    marked as an output)."""
    from ..errors import InputError, ShapeError
    from ..onnx import parse_onnx
    from .bounds import index_bounds
    from .inputs import defaulted_advice, graph_inputs, parse_dim_specs, resolve_input_dims
    from .report import note, status

    dims = parse_dim_specs(args.input_dim)
    dyn = parse_dyn_dim_specs(getattr(args, "dyn_input_dim", []))
    run_dims = {n: d for n, d in dims.items() if n in dyn}  # --input-dim of a dynamic input: its run shape
    samples = source.sample_inputs(args.batch or 1, args.seed)
    unknown = sorted(set(dyn) - {vi.name for vi in graph_inputs(source.proto)})
    if unknown:
        raise InputError(f"--dyn-input-dim: the model has no input(s) {unknown}")
    resolved = resolve_input_dims(source.proto, input_dims={n: d for n, d in dims.items() if n not in dyn},
                                  files=files, samples=samples, batch=args.batch, default_dim=args.default_dim)
    # a file or a sample of a dynamic input is one shape it runs at, not its parse shape
    map_dims = {n: d for n, d in resolved.dims.items() if n not in dyn}
    advice = defaulted_advice(resolved._replace(defaulted={n: a for n, a in resolved.defaulted.items() if n not in dyn}))
    with status(f"parsing {args.model}"):
        t0 = time.perf_counter()
        start_ns = time.perf_counter_ns()
        try:
            program = parse_onnx(source.proto, map_input_dims=map_dims, map_dyn_input_dims=dyn or None,
                                 default_dim_value=args.default_dim)
        except ShapeError as e:
            if not advice:
                raise
            raise ShapeError(f"{e} (the cause may be symbolic dims set by default: {'; '.join(advice)})") from None
        parse_s = time.perf_counter() - t0
    # before compiling: the passes may fold or fuse the gathers that tell an index's range
    loaded = Loaded(source, program, files, samples, parse_s=parse_s, start_ns=start_ns, bounds=index_bounds(program),
                    run_dims=run_dims)
    if prepare is not None:
        prepare(program)
    if target is not None:
        from ..targets import get_target

        tgt = get_target(target)
        with status(f"compiling for {target}"):
            t0 = time.perf_counter()
            program.compile(tgt, options, manager)
            loaded.compile_s = time.perf_counter() - t0
        loaded.target = target
    if warn_defaults and args.default_dim is None:  # an explicit --default-dim is the user's choice
        for line in advice:
            note(f"warning: {line}")
    return loaded


def load_on_target(args: argparse.Namespace, options: Any = None, prepare: Any = None) -> Loaded:
    """`load` compiled for the target --target names (by default `default_target()`). The result's
    `target` is where it runs: a compiled .fgx file runs on the target it was compiled for."""
    return load(args, target=args.target or default_target(), options=options, warn_defaults=True, prepare=prepare)


def _load_compiled(args: argparse.Namespace, source: Any, files: dict[str, np.ndarray], target: str | None,
                   load_s: float) -> Loaded:
    """An .fgx file holds a program compiled already: its input shapes and its target were fixed then."""
    from ..errors import InputError
    from .bounds import index_bounds
    from .inputs import parse_dim_specs

    program = source.compiled
    dynamic = {n for n, s in program.get_parameter_shapes().items() if s.is_dynamic}
    run_dims = parse_dim_specs(args.input_dim)  # a dynamic program's inputs may take any shape in range
    fixed = [o for o, v in (("--input-dim", not set(run_dims) <= dynamic), ("--batch", args.batch),
                            ("--default-dim", args.default_dim),
                            ("--dyn-input-dim", getattr(args, "dyn_input_dim", None))) if v]
    if fixed:
        raise InputError(f"{args.model} is compiled, with its input shapes fixed: {', '.join(fixed)} cannot "
                         f"change them (compile the ONNX model again instead)")
    wanted, compiled = compile_options(args), program.executable.options
    if wanted.fp16 and not compiled.fp16:
        raise InputError(f"{args.model} is compiled in float32: --fp16 cannot change it (compile the ONNX "
                         f"model again with --fp16 instead)")
    if wanted.fp16_io and not compiled.fp16_io:
        raise InputError(f"{args.model} is compiled with float32 inputs and outputs: --fp16-io cannot change it "
                         f"(compile the ONNX model again with --fp16 --fp16-io instead)")
    if wanted.keep_fp32 and wanted.keep_fp32 != compiled.keep_fp32:
        raise InputError(f"{args.model} is compiled keeping {list(compiled.keep_fp32) or 'no op'} in float32 "
                         f"besides the defaults: --keep-fp32 cannot change it (compile the ONNX model again instead)")
    # a target the user did not ask for (the default) yields to the file's; any other must match it
    asked = target is not None and (getattr(args, "target", None) is not None or target != default_target())
    if asked and target != program.target_name:
        raise TargetError(f"{args.model} is compiled for target {program.target_name!r}; to run on {target!r}, "
                          f"compile the ONNX model for it (fusegraph compile MODEL --target {target})")
    first = next(iter(program.get_parameter_shapes().values()), None)
    batch = first.dims[0].min if getattr(first, "dims", None) else 1
    samples = source.sample_inputs(batch, args.seed)  # None unless it was compiled from a built-in model
    return Loaded(source, program, files, samples, target=program.target_name, parse_s=load_s,
                  bounds=index_bounds(program), run_dims=run_dims)
