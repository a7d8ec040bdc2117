"""Cold compiles of the architecture corpus (benchmarks/gpu_models.py's `--prepare`): every row compiled
in processes of its own (`prepare`), with `--apart` each engine alone (`compile_alone`), the rows'
exports made (`export_ahead`) and the shared libraries read (`warm_page_cache`) before the first;
`cold_table` reads what those runs wrote. The children are gpu_models.py's own command line.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

GPU_MODELS = str(Path(__file__).with_name("gpu_models.py"))  # the script each child runs


def onnx_file(folder: str, name: str, batch: int) -> Path:
    return Path(folder) / f"{name}_{batch}.onnx"


def export_rows(rows: list[tuple[str, int]], folder: str) -> None:
    """Each row's ONNX export written to `folder` (`onnx_file`), for `compile_alone` to read; no GPU."""
    from benchmarks.gpu_vs_torch import build, export_onnx

    for name, batch in rows:
        _, export, inputs, names, _ = build(name, batch)
        onnx_file(folder, name, batch).write_bytes(export_onnx(export, inputs, names))


def compile_alone(name: str, batch: int, engine: str, fp16_io: bool = False, log_to: str | None = None,
                  onnx_dir: str | None = None) -> dict:
    """One engine's compile of one row, the only compile of this process, as a new machine meets it
    (`prepare(apart=True)` gives the process empty caches): the clock starts once CUDA is set up
    (a context on the device), the engine's modules are imported (fusegraph's gpu target and Triton;
    torch's dynamo and inductor, Triton with them) and its input is at hand (fusegraph: the ONNX
    bytes; torch: the fp16 module and inputs on the device), and stops once the compiled program's
    result is on the device: fusegraph's parse and compile; torch.compile's first three calls
    (reduce-overhead records its graph on the later ones); eager's first call. No other engine has
    warmed the libraries the two share (Triton's hash of itself and its driver, cuBLAS, cuDNN) for it.
    fusegraph reads the row's export from `onnx_dir` where `export_rows` wrote it, else exports it."""
    from benchmarks._common import phase_summary, write_compile_log
    from benchmarks.gpu_vs_torch import build, export_onnx, half_on_device

    exported = onnx_file(onnx_dir, name, batch) if onnx_dir and engine == "fusegraph" else None
    onnx_bytes = exported.read_bytes() if exported is not None and exported.exists() else None
    if onnx_bytes is None:
        timed, export, inputs, names, convnet = build(name, batch)
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    out: dict = {"engine": engine}
    if engine == "fusegraph":
        import triton  # noqa: F401 - imported before the clock, as torch's compiler is

        import fusegraph
        import fusegraph.targets.gpu  # noqa: F401

        if onnx_bytes is None:
            onnx_bytes = export_onnx(export, inputs, names)
        t0 = time.perf_counter()
        program = fusegraph.parse_onnx(onnx_bytes)
        out["parse_s"] = round(time.perf_counter() - t0, 3)
        program.compile(fusegraph.get_target("gpu"), fusegraph.CompileOptions(fp16=True, fp16_io=fp16_io))
        torch.cuda.synchronize()
        out["compile_s"] = round(time.perf_counter() - t0, 2)
        out["phases_s"] = phase_summary(program.executable)
        if log_to:
            write_compile_log(program.executable, log_to)
        return out
    for module in ("torch._dynamo", "torch._inductor.compile_fx"):  # before the clock, as fusegraph's gpu target
        importlib.import_module(module)

    model, targs = half_on_device(timed, inputs, convnet, dev)
    torch.cuda.synchronize()
    with torch.no_grad():
        t0 = time.perf_counter()
        fn = model if engine == "eager" else torch.compile(model, mode=engine)
        for _ in range(1 if engine == "eager" else 3):
            fn(*targs)
        torch.cuda.synchronize()
        out["compile_s"] = round(time.perf_counter() - t0, 2)
    return out


def warm_page_cache() -> None:
    """Read once every shared library the engines load (torch's, the NVIDIA wheels' cuBLAS and cuDNN,
    Triton's), so that no row's first engine pays the disk for the others that follow it in the
    same call: every row's compiles then find them in memory, as on a machine that ran anything."""
    t0, size = time.perf_counter(), 0
    for package in ("torch", "triton", "nvidia"):
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(root).rglob("*.so*"):
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 24):
                        size += len(chunk)
    print(f"read {size / 2**30:.1f} GiB of shared libraries in {time.perf_counter() - t0:.1f} s", flush=True)


def export_ahead(rows: list[tuple[str, int]], env: dict[str, str]) -> str:
    """A new folder holding every row's ONNX export, made before any clock runs (`export_rows`) by
    processes of two threads each, half as many as the CPUs, so that `compile_alone`'s fusegraph
    processes only read theirs. A row whose export failed is only reported: its fusegraph process
    exports it again and reports the error."""
    from benchmarks._common import last_line

    folder = tempfile.mkdtemp(prefix="gpu_models_onnx_")
    jobs = max(1, min(len(rows), (os.cpu_count() or 1) // 2))
    threads = {**env, "OMP_NUM_THREADS": "2"}  # (tracing is mostly Python: more processes, fewer threads each)

    def export(row: tuple[str, int]) -> None:
        done = subprocess.run([sys.executable, GPU_MODELS, "--rows", f"{row[0]}:{row[1]}", "--export-to", folder],
                              env=threads, capture_output=True, text=True)
        if done.returncode:
            print(f"export {row[0]}:{row[1]} failed: {last_line(done.stderr)[:200]}",
                  flush=True)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        list(pool.map(export, rows))
    print(f"exported {len(rows)} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    return folder


def prepare(rows: list[tuple[str, int]], jobs: int, modes: str, out_dir: str | None,
            fresh: bool = False, fp16_io: bool = False, logs: bool = False, apart: bool = False) -> dict[str, dict]:
    """Compile every row in `jobs` processes at once (see the module's docstring); their cold compile
    times (or the error a row's compile raised) by "name:batch", written to gpu_models_cold-<host>.json
    as each row finishes. `fresh`: each row's process with empty caches of its own (fusegraph's,
    Triton's, inductor's), as a new machine has; else the rows share them. `logs` (with `out_dir`):
    each row's fusegraph compile log there too, <name>_<batch>_log.json. `apart` (with `fresh`): each
    engine of a row in a process of its own (`compile_alone`), fusegraph's first, then each mode's,
    every row's export made first (`export_ahead`) and each removed once its row is done, the
    libraries read into memory before the first (`warm_page_cache`)."""
    from benchmarks._common import last_line, write_results

    home = tempfile.mkdtemp(prefix="gpu_models_prepare_")  # the children's fusegraph autotuning cache
    env = {**os.environ, "HOME": home, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

    onnx_dir = export_ahead(rows, env) if apart else None
    if apart:
        warm_page_cache()

    def child(row: tuple[str, int], engine: str | None) -> dict:
        args = [sys.executable, GPU_MODELS, "--rows", f"{row[0]}:{row[1]}", "--modes", modes, "--compile-only"]
        args += ["--fp16-io"] if fp16_io else []
        args += ["--log-dir", out_dir] if logs and out_dir else []
        args += ["--engine", engine] if engine else []
        args += ["--onnx-dir", onnx_dir] if onnx_dir and engine == "fusegraph" else []
        own = env
        if fresh:
            new = tempfile.mkdtemp(prefix="gpu_models_fresh_")
            own = {**env, "HOME": new, "TRITON_CACHE_DIR": f"{new}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{new}/inductor"}
        done = subprocess.run(args, env=own, capture_output=True, text=True)
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {"error": last_line(done.stderr, "no output")[:300]}

    def one(row: tuple[str, int]) -> dict:
        if not apart:
            return child(row, None)
        results = {engine: child(row, engine) for engine in ["fusegraph", *modes.split(",")]}
        onnx_file(onnx_dir, *row).unlink(missing_ok=True)
        failed = [f"{engine}: {r['error']}" for engine, r in results.items() if "error" in r]
        if failed:
            return {"error": "; ".join(failed)[:300]}
        merged = {"compile_s": {engine: r["compile_s"] for engine, r in results.items()}, "apart": True}
        merged["fusegraph_parse_s"] = results["fusegraph"]["parse_s"]
        merged["fusegraph_phases_s"] = results["fusegraph"]["phases_s"]
        return merged

    payload: dict = {"jobs": jobs, "fresh": fresh, "apart": apart, "rows": {}}
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(one, row): row for row in rows}
        for done in concurrent.futures.as_completed(futures):
            name, batch = futures[done]
            result = done.result()
            payload["rows"][f"{name}:{batch}"] = result.get("compile_s", result.get("error"))
            for field in ("fusegraph_phases_s", "fusegraph_parse_s"):
                if result.get(field):
                    payload.setdefault(field, {})[f"{name}:{batch}"] = result[field]
            payload["seconds"] = round(time.perf_counter() - t0, 1)
            path = write_results("gpu_models_cold", payload)
            if out_dir:
                (Path(out_dir) / path.name).write_text(path.read_text())
            print(f"compiled {name}:{batch} {payload['rows'][f'{name}:{batch}']}", flush=True)
    print(ratio_table(payload["rows"]), flush=True)
    return payload["rows"]


def cold_table(paths: list[str]) -> str:
    """The cold compiles that `--prepare ... --apart` runs wrote (gpu_models_cold JSON files, later ones
    winning a row measured twice) as `ratio_table`."""
    measured: dict[str, dict] = {}
    for path in paths:
        measured |= {row: t for row, t in json.loads(Path(path).read_text())["rows"].items() if isinstance(t, dict)}
    return ratio_table(measured)


def ratio_table(rows: dict[str, dict | str]) -> str:
    """Cold compiles by "name:batch" (a row's failure, a string, is skipped) as a markdown table in the
    corpus's order, each row's fusegraph / reduce-overhead ratio against issue 23's 1/3, the worst,
    and the rows of the corpus not measured."""
    from benchmarks.gpu_models import MODELS

    lines = ["| row | fusegraph s | reduce-overhead s | ratio |", "| --- | --- | --- | --- |"]
    ratios, missing = {}, []
    for row in (f"{n}:{b}" for n, m in MODELS.items() for b in m.batches):
        times = rows.get(row)
        if not (isinstance(times, dict) and times.get("fusegraph") and times.get("reduce-overhead")):
            missing.append(row)
            continue
        fg, ro = times["fusegraph"], times["reduce-overhead"]
        ratios[row] = fg / ro
        mark = "**" if fg / ro > 1 / 3 else ""
        lines.append(f"| {row} | {fg:.2f} | {ro:.2f} | {mark}{fg / ro:.2f}{mark} |")
    if ratios:
        worst = max(ratios, key=ratios.__getitem__)
        lines.append(f"\n{len(ratios)} rows; above 1/3: {sum(r > 1 / 3 for r in ratios.values())}; "
                     f"worst {worst} {ratios[worst]:.2f}")
    if missing:
        lines.append(f"not measured: {', '.join(missing)}")
    return "\n".join(lines)
