"""Compiled Triton kernels saved in a .fgx (binaries.py): which saved entries a load may use, the
private cache folder they are served from, and, on a GPU, a load in a fresh process that compiles
no kernel at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import helper


@pytest.fixture(autouse=True)
def _set_up(gpu_target):
    """The gpu target's set-up (Triton's interpreter without a GPU) before anything imports triton:
    Triton decides at import whether its library functions are interpreted."""

KEY = "ab" * 32  # a Triton cache key: 64 hex digits
SIGN_KEY = "binaries-test-key"


def artifacts(identity: dict | None, files: dict[str, bytes]) -> dict[str, memoryview]:
    from fusegraph.targets.gpu.binaries import IDENTITY, PREFIX

    out = {PREFIX + name: memoryview(data) for name, data in files.items()}
    if identity is not None:
        out[IDENTITY] = memoryview(json.dumps(identity).encode())
    return out


def this_stack(arch: int = 90) -> dict:
    import triton

    return {"triton": triton.__version__, "arch": arch}


GOOD = {f"{KEY}/k.json": b'{"name": "k"}', f"{KEY}/k.cubin": b"\x7fELF..."}


def fake_compiled(folder, key: str, name: str, files: dict[str, bytes | None]) -> SimpleNamespace:
    """A stand-in for Triton's CompiledKernel: its cache entry's files written under `folder`
    (None: listed but missing, as after Triton's cache was cleaned)."""
    group = {}
    for suffix, data in files.items():
        path = folder / f"{key[:4]}{name}{suffix}"
        if data is not None:
            path.write_bytes(data)
        group[name + suffix] = str(path)
    return SimpleNamespace(hash=key, name=name, metadata=SimpleNamespace(target=SimpleNamespace(arch=90)),
                           metadata_group=group)


def test_only_entries_of_this_triton_and_architecture_are_used():
    from fusegraph.targets.gpu.binaries import usable_entries

    assert set(usable_entries(artifacts(this_stack(), GOOD), 90)) == {KEY}
    assert usable_entries(artifacts(this_stack(), GOOD), 80) == {}        # another GPU architecture
    assert usable_entries(artifacts(this_stack(), GOOD), None) == {}      # no CUDA device
    assert usable_entries(artifacts({"triton": "0.0", "arch": 90}, GOOD), 90) == {}
    assert usable_entries(artifacts(None, GOOD), 90) == {}                # an older file: sources only
    odd = {f"{KEY}/../evil.json": b"{}", f"{'cd' * 32}/k.json": b"{}",  # a path out, a half entry
           "nothex/k.json": b"{}", f"{'ef' * 32}/k.json": b"{}", f"{'ef' * 32}/k.cubin": b"", **GOOD}
    assert set(usable_entries(artifacts(this_stack(), odd), 90)) == {KEY, "ef" * 32}


def test_saved_kernels_serve_from_a_folder_of_their_own(tmp_path, monkeypatch):
    from triton import knobs
    from triton.runtime.cache import get_cache_manager

    from fusegraph.targets.gpu import binaries, kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(binaries, "cuda_arch", lambda device: 90)
    before = knobs.cache.dir
    for _ in range(2):  # the second load finds the entries written by the first
        with binaries.saved_kernels(artifacts(this_stack(), GOOD), device=None) as n:
            assert n == 1 and knobs.cache.dir.startswith(str(tmp_path / "triton_bin"))
            group = get_cache_manager(KEY).get_group("k.json")
            assert {name: open(path, "rb").read() for name, path in group.items()} == {
                "k.json": GOOD[f"{KEY}/k.json"], "k.cubin": GOOD[f"{KEY}/k.cubin"]}
        assert knobs.cache.dir == before
    assert len(list((tmp_path / "triton_bin").iterdir())) == 1
    with binaries.saved_kernels(artifacts(this_stack(80), GOOD), device=None) as n:
        assert n == 0 and knobs.cache.dir == before


def test_of_a_gemm_templates_kernels_only_the_chosen_ones_are_saved(tmp_path, monkeypatch):
    from fusegraph.targets.gpu import binaries, kernels

    def compiled(key, name):
        return fake_compiled(tmp_path, key, name, {".json": b"{}", ".cubin": key.encode()})

    won, lost, pw1, pw2 = (compiled("a1" * 32, "mm"), compiled("b2" * 32, "mm"), compiled("c3" * 32, "pw"),
                           compiled("d4" * 32, "pw"))  # two configs of a template; two specializations
    fns = {"mm": SimpleNamespace(device_caches={0: ({"64": won, "128": lost}, None)}),
           "pw": SimpleNamespace(device_caches={0: ({"a": pw1, "b": pw2}, None)})}
    monkeypatch.setattr(kernels, "loaded_module", lambda source: SimpleNamespace(**fns))
    saved = {n.split("/")[1] for n in binaries.export_binaries({"mm": "...", "pw": "..."}, [won]) if "/" in n}
    assert saved == {won.hash, pw1.hash, pw2.hash}
    saved = {n.split("/")[1] for n in binaries.export_binaries({"mm": "...", "pw": "..."}) if "/" in n}
    assert saved == {won.hash, lost.hash, pw1.hash, pw2.hash}  # no choice recorded: all of them


def test_launcher_signatures_are_type_names_or_nothing():
    from fusegraph.targets.gpu.binaries import LAUNCHERS, launcher_signatures

    def recorded(value) -> dict[str, memoryview]:
        return {LAUNCHERS: memoryview(value if isinstance(value, bytes) else json.dumps(value).encode())}

    assert launcher_signatures(recorded([["*fp32", "*bf16", "i64", "u1", "fp32", "constexpr"], []])) == [
        ("*fp32", "*bf16", "i64", "u1", "fp32", "constexpr"), ()]
    assert launcher_signatures({}) == []
    for bad in (b"not json", {"a": 1}, [["*fp32"], "i32"], [["i32); system(\"rm\"); (int"]], [[["i32"]]], [[3]]):
        assert launcher_signatures(recorded(bad)) == []


def test_a_load_builds_the_recorded_launchers_beforehand(tmp_path, monkeypatch):
    from fusegraph.targets.gpu import binaries, kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(binaries, "cuda_arch", lambda device: 90)
    built = []
    monkeypatch.setattr(binaries, "build_launchers", built.append)
    files = {**artifacts(this_stack(), GOOD), binaries.LAUNCHERS: memoryview(b'[["*fp16", "i32"]]')}
    with binaries.saved_kernels(files, device=None):
        assert built == [[("*fp16", "i32")]]
    with binaries.saved_kernels({**files, binaries.IDENTITY: memoryview(b'{"triton": "0.0", "arch": 90}')}, None):
        assert len(built) == 1  # kernels of another Triton compile from source: nothing to prepare


def test_launchers_are_built_from_tritons_own_template(monkeypatch, tmp_path):
    import triton.runtime.build as build
    from triton.backends.nvidia import driver as nvidia

    from fusegraph.targets.gpu import binaries

    built = []
    monkeypatch.setattr(build, "compile_module_from_src", lambda src, name, **kw: built.append((name, src)))
    monkeypatch.setattr(binaries, "_built", {})  # the signatures this process built
    monkeypatch.setattr(nvidia, "library_dirs", lambda: [])
    signatures = [("*fp16", "*fp16", "i32", "constexpr"), ("*fp32", "i64")]
    monkeypatch.setattr(binaries, "_driver_started", lambda: False)
    if not hasattr(nvidia, "make_launcher"):  # Triton 3.8: no such template; nothing is prebuilt
        binaries.build_launchers(signatures)
        assert built == []
        (tmp_path / "driver.c").write_text("/* the driver's utilities */")
        nvidia = SimpleNamespace(make_launcher=lambda constants, signature, meta: repr(signature),
                                       dirname=str(tmp_path), library_dirs=lambda: [], include_dirs=[], libraries=[])
        monkeypatch.setattr(binaries, "_launcher_template", lambda: nvidia)  # 3.6's, as far as this module uses it
    binaries.build_launchers(signatures)
    launchers = [("__triton_launcher", nvidia.make_launcher({}, dict(enumerate(s)), None)) for s in signatures]
    utils = ("cuda_utils", (Path(nvidia.dirname) / "driver.c").read_text())
    assert sorted(built) == sorted([*launchers, utils])
    built.clear()
    binaries.build_launchers(signatures)
    binaries.build_launcher(signatures[0])  # (a compile thread's, as its kernel is done)
    assert built == []  # built once a process
    from triton import knobs

    with knobs.cache.scope():  # another Triton cache (a loaded file's folder): built there too
        knobs.cache.dir = str(tmp_path / "cache")
        binaries.build_launcher(signatures[0])
    assert [name for name, _ in built] == ["__triton_launcher"]
    built.clear()
    monkeypatch.setattr(binaries, "_built", {})
    monkeypatch.setattr(binaries, "_driver_started", lambda: True)  # set up already: its extension is loaded
    binaries.build_launchers(signatures)
    assert sorted(name for name, _ in built) == ["__triton_launcher"] * 2


def test_a_launcher_asked_for_while_it_builds_is_waited_for(monkeypatch):
    """A compile thread asking for its kernel's launcher while compile_pool.early_launcher's thread
    builds it returns once that build is done, not before (the first launch would build it again,
    on the launching thread); a failed build is tried again by the next asker."""
    import threading

    from fusegraph.targets.gpu import binaries

    release, started, answered, builds = threading.Event(), threading.Event(), threading.Event(), []

    def build(nvidia, source, name):
        builds.append(name)
        if len(builds) == 1:
            started.set()
            release.wait(10)
        if len(builds) == 2:
            raise RuntimeError("the compiler failed")
    template = SimpleNamespace(make_launcher=lambda constants, signature, meta: repr(signature))
    monkeypatch.setattr(binaries, "_launcher_template", lambda: template)
    monkeypatch.setattr(binaries, "_build", build)
    monkeypatch.setattr(binaries, "_built", {})
    first = threading.Thread(target=binaries.build_launcher, args=(("*fp16", "i32"),))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: (binaries.build_launcher(("*fp16", "i32")), answered.set()))
    second.start()
    assert not answered.wait(0.3)  # waiting for the first build
    release.set()
    assert answered.wait(10) and builds == ["__triton_launcher"]
    first.join(10)
    second.join(10)
    with pytest.raises(RuntimeError):
        binaries.build_launcher(("*fp32",))
    binaries.build_launcher(("*fp32",))  # tried again
    assert builds == ["__triton_launcher"] * 3


def test_launchers_that_cannot_be_built_are_left_to_the_first_launch():
    from fusegraph.targets.gpu.binaries import build_launchers

    build_launchers([("*fp32", "i32")])  # without a CUDA driver: no launcher, no error


LOAD_AND_RUN = textwrap.dedent("""
    import os, sys
    import numpy as np
    import fusegraph
    p = fusegraph.load(sys.argv[1])
    x = np.load(sys.argv[2])
    np.save(sys.argv[3], p.run({"x": x})[0])
""")


def test_an_unsigned_files_binaries_are_never_served(monkeypatch, gpu_target):
    """Nothing ties a saved cubin to its source but the writer's word: only a verified signature is."""
    import contextlib

    import fusegraph
    from fusegraph.targets.gpu import binaries
    from tests.util import make_model

    given = []

    @contextlib.contextmanager
    def spy(artifacts, device):
        given.append(dict(artifacts))
        yield 0

    monkeypatch.setattr(binaries, "saved_kernels", spy)
    x = np.ones((2, 8), np.float32)
    p = fusegraph.parse_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"]))
    p.compile(gpu_target)
    files = artifacts(this_stack(), GOOD)
    gpu_target.load(p, p.executable.options, files)
    gpu_target.load(p, p.executable.options, files, trusted=True)
    assert given == [{}, files]


@pytest.mark.gpu
@pytest.mark.parametrize("signed", [True, False])
def test_a_signed_load_in_a_fresh_process_compiles_no_kernel(tmp_path, signed):
    from tests.util import make_model

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Erf", ["m"], ["e"]),
             helper.make_node("Mul", ["e", "m"], ["g"]), helper.make_node("ReduceMean", ["g"], ["y"], axes=[1])]
    model = make_model(nodes, {"x": rng.standard_normal((8, 64)).astype(np.float32)}, ["y"], {"w": w})
    import fusegraph

    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("gpu"))
    x = rng.standard_normal((8, 64)).astype(np.float32)
    want = p.run({"x": x})[0]
    fgx = tmp_path / "m.fgx"
    fusegraph.save(p, fgx, sign_key=SIGN_KEY if signed else None)
    np.save(tmp_path / "x.npy", x)
    home = tmp_path / "home"  # empty caches: fusegraph's (under HOME) and Triton's
    env = {**os.environ, "HOME": str(home), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("FUSEGRAPH_SIGN_KEY", None)
    if signed:  # the load verifies the signature: only then are the file's binaries run
        env["FUSEGRAPH_SIGN_KEY"] = SIGN_KEY
    subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(fgx), str(tmp_path / "x.npy"),
                    str(tmp_path / "y.npy")], env=env, check=True)
    assert np.load(tmp_path / "y.npy").tobytes() == want.tobytes()
    if not signed:  # an unsigned file's kernels compile from the sources generated here
        assert not (home / ".cache" / "fusegraph" / "triton_bin").exists()
        assert any((tmp_path / "triton").iterdir())
        return
    (served,) = (home / ".cache" / "fusegraph" / "triton_bin").iterdir()
    from fusegraph.runtime.fgx_format import Container
    from fusegraph.runtime.serialize import _ARTIFACT

    container = Container.open(fgx)
    parts = container.parts
    saved = {n.split("/")[-2] for n in parts if n.startswith(_ARTIFACT + "triton_bin/")}
    # the one matmul's GEMM template: at most its chosen config's kernel, not every candidate's
    assert len([n for n in parts if n.startswith(_ARTIFACT + "triton_bin/") and n.endswith(".cubin")
                and n.split("/")[-1].startswith("mm_")]) <= 1
    # no kernel compiled beside them (Triton may still build its host-side launcher stubs there)
    compiled = [d for d in served.iterdir() if any(f.suffix == ".cubin" for f in d.iterdir())]
    assert saved and len(compiled) == len(saved)
    # one launcher per recorded signature: those the load built beforehand are the ones the
    # launches used (a launch building its own would have added another)
    signatures = json.loads(bytes(container.part(_ARTIFACT + "triton_launchers.json")))
    launchers = list(served.rglob("__triton_launcher*.so"))
    assert signatures and len(launchers) == len(signatures)
    assert not (tmp_path / "triton").exists() or not any((tmp_path / "triton").iterdir())


def test_export_keeps_each_compiled_kernels_binary_and_metadata(tmp_path, monkeypatch):
    from fusegraph.targets.gpu import binaries, kernels

    kept = fake_compiled(tmp_path, KEY, "k", {".json": b"{}", ".cubin": b"ELF", ".ptx": b"// ptx"})
    kept.src = SimpleNamespace(signature={"x": "*fp16", "n": "i32", "BLOCK": "constexpr"})
    gone = fake_compiled(tmp_path, "cd" * 32, "g", {".json": b"{}", ".cubin": None})  # Triton's cache cleaned since
    fn = SimpleNamespace(device_caches={0: ({"spec": kept, "other": gone}, None)})
    monkeypatch.setattr(kernels, "loaded_module", lambda source: SimpleNamespace(k=fn))
    out = binaries.export_binaries({"k": "source of k"})
    assert sorted(out) == [binaries.IDENTITY, f"{binaries.PREFIX}{KEY}/k.cubin", f"{binaries.PREFIX}{KEY}/k.json",
                           binaries.LAUNCHERS]
    assert binaries.launcher_signatures({n: memoryview(d) for n, d in out.items()}) == [("*fp16", "i32", "constexpr")]
    entries = binaries.usable_entries({n: memoryview(d) for n, d in out.items()}, 90)
    assert {f: bytes(d) for f, d in entries[KEY].items()} == {"k.json": b"{}", "k.cubin": b"ELF"}
    monkeypatch.setattr(kernels, "loaded_module", lambda source: None)  # the interpreter: nothing compiled
    assert binaries.export_binaries({"k": "source of k"}) == {}


def test_a_gpu_file_without_a_gpu_is_a_clear_error(gpu_target, tmp_path, capsys):
    import torch

    import fusegraph
    from fusegraph.driver import cli
    from fusegraph.errors import TargetError
    from tests.util import make_model

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    x = {"x": np.ones((2, 8), np.float32)}
    p = fusegraph.parse_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])], x, ["y"]))
    p.compile(gpu_target)  # the interpreted gpu target: a gpu program, built without a GPU
    fgx = tmp_path / "m.fgx"
    fusegraph.save(p, fgx)
    with pytest.raises(TargetError, match="no CUDA device"):
        fusegraph.load(fgx)
    code = cli.main(["run", str(fgx)])
    err = capsys.readouterr().err
    assert code != 0 and "no CUDA device" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
