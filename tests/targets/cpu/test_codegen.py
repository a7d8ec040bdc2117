"""Generated C kernels (fusegraph/targets/cpu/codegen) against the reference: every scalar function
and dtype vs numpy, random expressions vs ops.scalar.evaluate, strided and broadcast layouts, fused
reductions made by passes.fuse_reduce vs the ref interpreter, the float32 approximations' accuracy,
and the build's cache and errors. Kernels are compiled in a few batches and reused from the disk cache.
"""

from __future__ import annotations

import concurrent.futures
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import fusegraph
from fusegraph.errors import CompileError, InputError
from fusegraph.ir import DType
from fusegraph.ops.scalar import SCALAR_FUNCS, Call, Const, Var, evaluate, parse_expr
from fusegraph.passes import PassManager, generic_pipeline
from fusegraph.targets.cpu import codegen as cg
from fusegraph.targets.ref.interpreter import evaluate as ref_evaluate
from tests.util import make_model

try:
    cg.find_compiler()
except CompileError as e:
    pytest.skip(f"no C compiler: {e}", allow_module_level=True)

F32, F64, I32, I64, I8, U8, BOOL = (DType.float32, DType.float64, DType.int32, DType.int64, DType.int8,
                                    DType.uint8, DType.bool)
rng = np.random.default_rng(11)
INTEGER_FNS = {"add", "sub", "mul", "div", "fmod", "mod", "max", "min", "neg", "abs", "sign", "bitand", "bitor",
               "bitxor", "bitnot", "shl", "shr"}
EXACT_FLOAT_FNS = {"add", "sub", "mul", "div", "fmod", "mod", "max", "min", "neg", "abs", "sign", "sqrt",
                   "floor", "ceil", "round", "where"}


def build(sources, **kw) -> cg.Library:
    return cg.build_library(sources, **kw)


def values(dt: DType, n: int, role: str = "") -> np.ndarray:
    """Random values with the edge cases of the dtype mixed in."""
    if dt.is_float:
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 88.0,
                 -88.0, 100.0, -100.0, 1e30, 3.0, 0.9, -0.9]
        x = rng.standard_normal(n) * 3
    elif dt == DType.bool:
        return rng.integers(0, 2, n).astype(bool)
    else:
        info = np.iinfo(dt.np)
        lo, hi = (0, 70) if role == "shift" else (max(info.min, -100), min(info.max, 100))
        edges = [0, 1, -1, 2, -2, 7, info.min, info.max] if role != "shift" else [0, 1, 7, 8, 31, 32, 63, 64, 65]
        x = rng.integers(lo, hi, n)
        edges = [e for e in edges if info.min <= e <= info.max]
    x = x.astype(dt.np)
    x[:len(edges)] = np.array(edges).astype(dt.np)
    return rng.permutation(x)


def scalar_cases():
    """(fn, input dtypes) for every scalar function and each dtype numpy defines it for."""
    cases = []
    for fn, f in SCALAR_FUNCS.items():
        dts = [F32, F64, I32, I64, BOOL] + ([I8, U8] if fn in INTEGER_FNS else [])
        for dt in dts:
            ins = [BOOL, dt, dt] if fn == "where" else [dt] * f.arity
            try:
                r = evaluate(Call(fn, tuple(Var(i) for i in range(f.arity))), [np.ones(1, d.np) for d in ins])
            except TypeError:
                continue  # numpy refuses it (e.g. sub of booleans, bitand of floats)
            if DType.from_numpy(np.asarray(r).dtype) in cg.c_expr.C_TYPES:  # not float16 (exp of bool)
                cases.append((fn, tuple(ins)))
    for a in (F32, F64, I32, I64, I8, U8, BOOL):
        for b in (F32, F64, I32, I64, U8, BOOL):
            cases.append((f"convert_{b.value}", (a,)))
    return cases


CASES = scalar_cases()


def out_dtype(expr, in_dtypes) -> DType:
    return DType.from_numpy(np.asarray(evaluate(expr, [np.ones(1, d.np) for d in in_dtypes])).dtype)


def _expr(fn: str, n: int):
    return Call(fn, tuple(Var(i) for i in range(n)))


@pytest.fixture(scope="module")
def scalar_lib():
    srcs = []
    for fn, ins in CASES:
        e = _expr(fn, len(ins))
        srcs.append(cg.pointwise_kernel(e, ins, out_dtype(e, ins), 1, (1,) * len(ins)))
    half = len(srcs) // 2  # two translation units, compiled side by side on a cold cache
    parts = [(CASES[:half], srcs[:half]), (CASES[half:], srcs[half:])]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        libs = list(pool.map(lambda part: build(part[1], threads=1), parts))
    return {case: lib[s.name] for (cases, part), lib in zip(parts, libs) for case, s in zip(cases, part)}


@pytest.mark.parametrize("fn,ins", CASES, ids=[f"{f}-{'-'.join(d.value for d in i)}" for f, i in CASES])
def test_scalar_function_matches_numpy(scalar_lib, fn, ins):
    n = 1500
    if fn.startswith("convert_") and ins[0].is_float and DType(fn[8:]).is_int:
        args = [np.clip(np.nan_to_num(values(ins[0], n)), -100, 100).astype(ins[0].np)]  # in range: C-defined
        if DType(fn[8:]) == U8:
            args[0] = np.abs(args[0])
    else:
        args = [values(d, n, "shift" if fn in ("shl", "shr") and k == 1 else "") for k, d in enumerate(ins)]
    if fn == "pow" and ins[0].is_int:
        args = [rng.integers(-4, 5, n).astype(ins[0].np), rng.integers(0, 6, n).astype(ins[1].np)]
    e = _expr(fn, len(ins))
    want = np.asarray(evaluate(e, args)).astype(out_dtype(e, ins).np)
    got = scalar_lib[(fn, ins)](np.empty(n, want.dtype), *args)
    if want.dtype.kind != "f" or fn in EXACT_FLOAT_FNS or fn.startswith("convert_"):
        np.testing.assert_array_equal(got, want)
    else:  # libm / numpy SIMD / our float32 approximations: a few ulp apart
        np.testing.assert_allclose(got, want, rtol=2e-6 if want.dtype == np.float32 else 1e-13, atol=1e-38)


# -- float32 approximations --------------------------------------------------------------------------
def test_fast_float32_functions_within_1e6_relative(scalar_lib):
    """exp/erf/tanh/sigmoid approximations vs float64 math, over 2^20 float32s (normal results)."""
    mag = np.exp(rng.uniform(np.log(1e-30), np.log(110.0), 1 << 19)).astype(np.float32)
    x = np.concatenate([mag, -mag, np.linspace(-6, 6, 1 << 18, dtype=np.float32)])
    x64 = x.astype(np.float64)
    refs = {"exp": np.exp(x64), "tanh": np.tanh(x64), "sigmoid": 1 / (1 + np.exp(-x64)),
            "erf": np.frompyfunc(math.erf, 1, 1)(x64).astype(np.float64)}
    for fn, ref in refs.items():
        got = scalar_lib[(fn, (F32,))](np.empty_like(x), x).astype(np.float64)
        ok = np.isfinite(ref) & (np.abs(ref) >= np.finfo(np.float32).tiny) & (np.abs(ref) < 3.4e38)
        rel = np.abs(got[ok] - ref[ok]) / np.abs(ref[ok])
        assert rel.max() < 1e-6, f"{fn}: max relative error {rel.max():.3g} at {x[ok][rel.argmax()]}"
        tiny = np.abs(ref) < np.finfo(np.float32).tiny  # denormal results: absolute error
        assert np.abs(got[tiny] - ref[tiny]).max(initial=0) < 1e-44


# -- random expressions -------------------------------------------------------------------------------
UNARY = ["neg", "abs", "exp", "tanh", "erf", "sigmoid", "floor", "round", "sqrt", "sign"]
BINARY = ["add", "sub", "mul", "div", "max", "min", "pow", "mod"]


@st.composite
def expressions(draw, depth: int = 4):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return Var(draw(st.integers(0, 2)))
        return Const(draw(st.sampled_from([0.5, 2.0, -1.0, 3, 0, 1e-3])))
    kind = draw(st.sampled_from(["u", "b", "b", "where", "convert"]))
    if kind == "u":
        return Call(draw(st.sampled_from(UNARY)), (draw(expressions(depth - 1)),))
    if kind == "where":
        cond = Call(draw(st.sampled_from(["lt", "ge", "eq"])), (draw(expressions(depth - 1)), Var(0)))
        return Call("where", (cond, draw(expressions(depth - 1)), draw(expressions(depth - 1))))
    if kind == "convert":
        return Call(f"convert_{draw(st.sampled_from(['float32', 'int32', 'float64']))}", (draw(expressions(depth - 1)),))
    return Call(draw(st.sampled_from(BINARY)), (draw(expressions(depth - 1)), draw(expressions(depth - 1))))


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.lists(expressions(), min_size=6, max_size=6),
       st.sampled_from([(F32, F32, F32), (F32, I32, F64), (F64, F64, I64)]))
def test_random_expressions_match_evaluate(exprs, in_dtypes):
    exprs = [parse_expr(str(e)) for e in exprs]  # also through the text form, as fused bodies travel
    args = [values(d, 700) for d in in_dtypes]
    args = [np.clip(np.nan_to_num(a), -50, 50).astype(a.dtype) for a in args]  # float->int casts in range
    srcs = [cg.pointwise_kernel(e, in_dtypes, out_dtype(e, in_dtypes), 1, (1, 1, 1)) for e in exprs]
    lib = build(srcs, threads=1)
    for e, s in zip(exprs, srcs):
        with np.errstate(all="ignore"):
            want = np.asarray(evaluate(e, args)).astype(s.out_dtype.np)
        got = lib[s.name](np.empty(700, want.dtype), *args)
        finite = np.isfinite(want) if want.dtype.kind == "f" else np.ones(want.shape, bool)
        # a tiny difference upstream may flip a floor/round/compare: allow a few elements to differ
        close = np.isclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert (close | ~finite).mean() >= 0.99, f"{e}: {np.flatnonzero(~close)[:5]}"


# -- layouts and threads -------------------------------------------------------------------------------
GELU = parse_expr("mul(mul(add(x0, x1), add(erf(mul(add(x0, x1), 0.7071067811865476)), 1.0)), 0.5)")
AXPY = parse_expr("add(mul(x0, 3.0), x1)")


@pytest.fixture(scope="module")
def layout_lib():
    srcs = {(e_name, nd, inner): cg.pointwise_kernel(e, [F32, F32], F32, nd, inner)
            for e_name, e in [("gelu", GELU), ("axpy", AXPY)]
            for nd, inner in [(1, (1, 1)), (2, (1, 0)), (2, (1, 1)), (3, (None, 1)), (4, (1, 0))]}
    lib = build(list(srcs.values()), threads=2)
    return {k: lib[s.name] for k, s in srcs.items()}


LAYOUTS = {  # name: (kernel key, output shape, inputs from a buffer of 2x the elements and a full array)
    "contiguous-1d": (("gelu", 1, (1, 1)), (100003,), lambda a, b: (a[:b.size].reshape(b.shape), b)),
    "row-bias": (("gelu", 2, (1, 0)), (128, 3072), lambda a, b: (a[:b.size].reshape(b.shape), b[0])),
    "column-bias": (("axpy", 2, (1, 0)), (300, 77), lambda a, b: (a[:b.size].reshape(b.shape), b[:, :1])),
    "transposed": (("axpy", 3, (None, 1)), (6, 50, 40), lambda a, b: (a[:b.size].reshape(6, 40, 50).transpose(0, 2, 1), b)),
    "every-other": (("axpy", 3, (None, 1)), (5, 7, 9), lambda a, b: (a[:2 * b.size].reshape(5, 7, 18)[:, :, ::2], b)),
    "pattern-mismatch": (("gelu", 2, (1, 0)), (64, 33), lambda a, b: (a[:b.size].reshape(33, 64).T, b)),
    "4d-broadcast": (("axpy", 4, (1, 0)), (2, 3, 4, 5000), lambda a, b: (a[:b.size].reshape(b.shape), b[..., :1])),
    "few-rows-split": (("gelu", 2, (1, 1)), (3, 50000), lambda a, b: (a[:b.size].reshape(b.shape), b)),
    "one-element": (("axpy", 1, (1, 1)), (1,), lambda a, b: (a[:1], b)),
    "empty": (("axpy", 2, (1, 1)), (0, 5), lambda a, b: (a[:0].reshape(0, 5), b)),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("threads", [1, 2])
def test_strided_and_broadcast_inputs(layout_lib, name, threads):
    key, shape, make = LAYOUTS[name]
    big = rng.standard_normal(2 * math.prod(shape) + 8).astype(np.float32)
    x0, x1 = make(big, rng.standard_normal(shape).astype(np.float32))
    x0v, x1v = np.broadcast_to(x0, shape), np.broadcast_to(x1, shape)
    want = evaluate(GELU if key[0] == "gelu" else AXPY, [x0v, x1v]).astype(np.float32)
    out = np.empty(shape, np.float32)
    layout_lib[key].bind(out, x0, x1, threads=threads)()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_layout_coalesces_and_classifies_inner_strides():
    lay = cg.coalesce((2, 3, 4), [(12, 4, 1), (0, 0, 1), (0, 1, 0)])
    assert lay.lens == (2, 3, 4) and lay.inner == (1, 1, 0)
    lay = cg.coalesce((2, 3, 4), [(12, 4, 1), (0, 0, 0)])
    assert lay.lens == (24,) and lay.strides == ((1,), (0,))
    assert cg.coalesce((1, 1), [(1, 1)]).lens == (1,)


# -- fused reductions ----------------------------------------------------------------------------------
def _init(*shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 0.5 + 1).astype(dtype)


def _programs():
    """name: (ONNX nodes, inputs, initializers, opset) whose fused_reduce bodies are tested."""
    x3 = rng.standard_normal((4, 16, 96)).astype(np.float32)
    scores = rng.standard_normal((2, 3, 64, 128)).astype(np.float32)
    mask = np.where(rng.random((2, 1, 1, 128)) < 0.2, -1e4, 0).astype(np.float32)
    nchw = rng.standard_normal((2, 8, 5, 7)).astype(np.float32)
    nan_rows = rng.standard_normal((6, 50)).astype(np.float32)
    nan_rows[2, 7] = np.nan
    n = helper.make_node
    return {
        "layernorm-residual": (
            [n("Add", ["x", "r"], ["s"]), n("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
            {"x": x3 + 3, "r": x3[::-1].copy()}, {"g": _init(96), "b": _init(96)}, 17),
        "softmax-scaled-masked": (
            [n("Mul", ["x", "c"], ["m"]), n("Add", ["m", "mask"], ["a"]), n("Softmax", ["a"], ["y"], axis=-1)],
            {"x": scores, "mask": mask}, {"c": np.array(0.125, np.float32)}, 17),
        "reduce-sum-exp-sqrt": (
            [n("Exp", ["x"], ["e"]), n("ReduceSum", ["e", "ax"], ["s"], keepdims=1), n("Sqrt", ["s"], ["y"])],
            {"x": x3}, {"ax": np.array([-1], np.int64)}, 17),
        "log-softmax-f64": (
            [n("Neg", ["x"], ["m"]), n("LogSoftmax", ["m"], ["y"], axis=-1)],
            {"x": rng.standard_normal((10, 33))}, {}, 17),
        "mean-over-hw": (
            [n("ReduceMean", ["x"], ["s"], axes=[2, 3], keepdims=1), n("Relu", ["s"], ["y"])],
            {"x": nchw}, {}, 17),
        "instance-norm": (
            [n("InstanceNormalization", ["x", "g", "b"], ["y"])], {"x": nchw}, {"g": _init(8), "b": _init(8)}, 17),
        "rms-norm": (
            [n("RMSNormalization", ["x", "g"], ["y"], axis=-1)], {"x": x3}, {"g": _init(96)}, 23),
        "max-int32": (
            [n("Add", ["x", "x"], ["s"]), n("ReduceMax", ["s"], ["y"], axes=[1], keepdims=1)],
            {"x": rng.integers(-1000, 1000, (7, 300)).astype(np.int32)}, {}, 17),
        "min-with-nan": (
            [n("Mul", ["x", "x"], ["s"]), n("ReduceMin", ["s"], ["y"], axes=[1], keepdims=1)],
            {"x": nan_rows}, {}, 17),
        "prod": (
            [n("Sigmoid", ["x"], ["s"]), n("ReduceProd", ["s"], ["y"], axes=[1], keepdims=1)],
            {"x": nan_rows[[0, 1, 3]]}, {}, 17),
        "layernorm-f16": (
            [n("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)], {"x": x3.astype(np.float16)},
            {"g": _init(96, dtype=np.float16), "b": _init(96, dtype=np.float16)}, 17),
        "softmax-f16": ([n("Mul", ["x", "x"], ["s"]), n("Softmax", ["s"], ["y"], axis=-1)],
                        {"x": x3.astype(np.float16) * 2}, {}, 17),
        "mean-int64": (
            [n("Add", ["x", "x"], ["s"]), n("ReduceMean", ["s"], ["y"], axes=[1], keepdims=1)],
            {"x": rng.integers(-50, 50, (9, 31)).astype(np.int64)}, {}, 17),
        "not-trailing": (
            [n("Exp", ["x"], ["e"]), n("ReduceSum", ["e", "ax"], ["y"], keepdims=1)],
            {"x": x3}, {"ax": np.array([1], np.int64)}, 17),
    }


PROGRAMS = _programs()


@pytest.fixture(scope="module")
def reduce_programs():
    """name: (program, feeds, {uid: KernelSource or CodegenUnsupported}, library) for each program."""
    out, sources = {}, []
    for name, (nodes, inputs, inits, opset) in PROGRAMS.items():
        model = make_model(nodes, inputs, ["y"], inits, opset=opset)
        p = fusegraph.parse_onnx(model)
        PassManager().run(p, generic_pipeline())
        kernels = {}
        for ins in p.main.instructions:
            if ins.op.name == "fused_reduce":
                try:
                    kernels[ins.uid] = cg.reduce_kernel(ins.module_args[0], ins.op.axes)
                    sources.append(kernels[ins.uid])
                except cg.CodegenUnsupported as e:
                    kernels[ins.uid] = e
        out[name] = (p, inputs, kernels)
    lib = build(sources, threads=2)
    return {k: (*v, lib) for k, v in out.items()}


@pytest.mark.parametrize("name", [k for k in PROGRAMS if k != "not-trailing"])
def test_fused_reduce_matches_ref_interpreter(reduce_programs, name):
    p, feeds, kernels, lib = reduce_programs[name]
    assert kernels and all(isinstance(k, cg.KernelSource) for k in kernels.values()), kernels
    env, checked = {}, 0
    for ins in p.main.instructions:
        if ins.op.name == "@param":
            env[ins.uid] = feeds[ins.op.param_name]
        elif ins.op.name == "@literal":
            env[ins.uid] = ins.op.value
        elif ins.op.name != "@return":
            args = [env[i.uid] for i in ins.inputs]
            env[ins.uid] = want = np.asarray(ref_evaluate(ins, args, env))
            if ins.uid in kernels:
                got = lib[kernels[ins.uid].name](np.empty(ins.shape.lens, ins.shape.dtype.np), *args)
                assert got.dtype == want.dtype
                if want.dtype.kind in "iub":
                    np.testing.assert_array_equal(got, want)
                elif want.dtype.itemsize == 2:  # half precision: within an ulp or so
                    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
                checked += 1
    assert checked == len(kernels)


def test_reduction_over_leading_axes_is_unsupported(reduce_programs):
    _, _, kernels, _ = reduce_programs["not-trailing"]
    (err,) = kernels.values()
    assert isinstance(err, cg.CodegenUnsupported) and isinstance(err, NotImplementedError)
    assert "trailing" in str(err)


@pytest.mark.parametrize("dtype,lens,log", [(F32, (7, 300), False), (F64, (5, 2, 33), True), (F32, (64, 1000), True)])
def test_standalone_softmax(dtype, lens, log):
    x = rng.standard_normal(lens).astype(dtype.np) * 5
    x.reshape(-1, lens[-1])[1] = -np.inf  # a row of -inf gives nan, as numpy
    x.reshape(-1, lens[-1])[2, 3] = np.nan
    src = cg.softmax_kernel(dtype, lens, log=log)
    op = fusegraph.ir.make_op("log_softmax" if log else "softmax", axis=len(lens) - 1)
    want = op.compute([x])
    got = build([src], threads=2)[src.name](np.empty(lens, dtype.np), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- build, cache and call contract -------------------------------------------------------------------------
def _axpy():
    return cg.pointwise_kernel(AXPY, [F32, F32], F32, 1, (1, 1))


def test_library_is_cached_and_exposes_its_source(tmp_path, monkeypatch):
    src = _axpy()
    lib = build([src, src], cache=tmp_path)
    assert lib.source.count(f"void {src.name}(") == 1 and src.name in lib.kernels
    assert (tmp_path / lib.path.name).exists() and lib.path.with_suffix(".c").read_text() == lib.source
    monkeypatch.setattr(cg.build, "_compile", lambda *a: pytest.fail("compiled again"))
    again = build([src], cache=tmp_path)
    assert again.path == lib.path
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(getattr(again, src.name)(np.empty(5, np.float32), x, x), 4 * x)


def test_cache_directory_is_created_private_and_must_stay_so(tmp_path):
    d = tmp_path / "new" / "kernels"
    build([_axpy()], cache=d)
    assert d.stat().st_mode & 0o777 == 0o700
    d.chmod(0o777)
    with pytest.raises(CompileError, match="not private"):
        build([_axpy()], cache=d)


def test_missing_compiler_is_a_typed_error(tmp_path):
    with pytest.raises(CompileError, match="fg-no-such-cc.*not on PATH"):
        build([_axpy()], cache=tmp_path, compiler="fg-no-such-cc")


def test_compiler_failure_names_the_kept_source(tmp_path):
    bad = cg.KernelSource("fg_bad", "this is not C;", (), (F32,), F32, ndim=1)
    with pytest.raises(CompileError, match="failed.c"):
        build([bad], cache=tmp_path)


def test_call_contract_errors():
    src = _axpy()
    k = build([src])[src.name]
    x = np.ones(4, np.float32)
    with pytest.raises(InputError, match="input 1 is float64"):
        k(np.empty(4, np.float32), x, x.astype(np.float64))
    with pytest.raises(InputError, match="2 inputs, given 1"):
        k(np.empty(4, np.float32), x)
    with pytest.raises(InputError, match="output"):
        k(np.empty(8, np.float32)[::2], x, x)
    with pytest.raises(InputError, match="do not broadcast"):
        k(np.empty(4, np.float32), x, np.ones(3, np.float32))
    with pytest.raises(cg.CodegenUnsupported, match="complex64"):
        cg.pointwise_kernel(AXPY, [DType.complex64, F32], F32, 1)


def test_fixed_shape_kernel_binds_only_its_layout(reduce_programs):
    p, feeds, kernels, lib = reduce_programs["reduce-sum-exp-sqrt"]
    (src,) = kernels.values()
    x = feeds["x"]
    want = np.sqrt(np.exp(x).sum(-1, keepdims=True))
    out = np.empty(src.out_lens, np.float32)
    lib[src.name].bind(out, x)()
    np.testing.assert_allclose(out, want, rtol=1e-5)
    with pytest.raises(InputError, match="expected"):
        lib[src.name].bind(out, np.asfortranarray(x))
    np.testing.assert_allclose(lib[src.name](out, np.asfortranarray(x)), want, rtol=1e-5)  # copied


def test_layernorm_accumulates_more_accurately_than_float32():
    """Rows far from zero: double accumulation keeps the float64 answer where float32 sums drift."""
    x = (rng.standard_normal((16, 768)) + 300).astype(np.float32)
    model = make_model([helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1)], {"x": x}, ["y"],
                       {"g": np.ones(768, np.float32)})
    p = fusegraph.parse_onnx(model)
    PassManager().run(p, generic_pipeline())
    (ins,) = [i for i in p.main.instructions if i.op.name == "fused_reduce"]
    src = cg.reduce_kernel(ins.module_args[0], ins.op.axes)
    args = [x if i.op.name == "@param" else i.op.value for i in ins.inputs]
    got = build([src])[src.name](np.empty(x.shape, np.float32), *args)
    x64 = x.astype(np.float64)
    exact = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    ref = np.asarray(ref_evaluate(ins, args, {}))
    assert np.abs(got - exact).max() <= np.abs(ref - exact).max()
    np.testing.assert_allclose(got, exact, atol=2e-5)


_FORK_PROBE = """
import os, sys, numpy as np
from fusegraph.ir import DType
from fusegraph.ops.scalar import parse_expr
from fusegraph.targets.cpu import codegen as cg
src = cg.pointwise_kernel(parse_expr("add(x0, x1)"), [DType.float32] * 2, DType.float32, 1, (1, 1))
k = cg.build_library([src], threads=4)[src.name]
tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
small = np.ones(1000, np.float32)
for _ in range(50):
    k(np.empty_like(small), small, small)
after_small = tasks()
big = np.ones(1 << 20, np.float32)
k(np.empty_like(big), big, big)
print(before, after_small, tasks())
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_small_kernels_never_fork_threads():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    res = subprocess.run([sys.executable, "-c", _FORK_PROBE], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "4"})
    assert res.returncode == 0, res.stderr
    before, after_small, after_big = map(int, res.stdout.split())
    assert after_small == before  # 1,000 elements: on the calling thread, no OpenMP team started
    assert after_big > before  # a million: the team of 4


def test_pointwise_kernel_for_an_instruction_runs_on_raw_addresses():
    """The target's path: shapes from the IR (a broadcast view), one bind at lowering, plain calls."""
    from fusegraph.ir import Shape

    x = rng.standard_normal((4, 8, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    shapes = [Shape.of(F32, (4, 8, 6)), Shape.of(F32, (4, 8, 6), (0, 0, 1))]
    src, layout = cg.pointwise_kernel_for(GELU, shapes, Shape.of(F32, (4, 8, 6)))
    assert layout.lens == (32, 6) and layout.inner == (1, 1)
    out = np.empty_like(x)
    step = build([src])[src.name].bind_addresses(out.ctypes.data, [x.ctypes.data, bias.ctypes.data], layout.dims())
    step()
    np.testing.assert_allclose(out, evaluate(GELU, [x, np.broadcast_to(bias, x.shape)]), rtol=1e-6, atol=1e-7)
