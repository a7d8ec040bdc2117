"""Per-step profiles on ref and cpu: provenance through fusion, roll-ups, the Chrome trace, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fusegraph
from fusegraph.driver import cli
from fusegraph.ir.op import OpKind
from fusegraph.profile import by_kernel, by_onnx_op, chrome_trace, step_rows
from tests.util import target_or_skip

from .models import feeds, small_cnn

NODES = {"conv", "relu", "mul", "add", "sigmoid", "pool", "flatten", "fc", "tanh"}


def _compiled(target: str):
    p = fusegraph.parse_onnx(small_cnn())
    p.compile(target_or_skip(target))
    return p


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_every_step_names_its_onnx_nodes(target):
    p = _compiled(target)
    prof = p.executable.profile(feeds(), runs=3)
    assert len(prof.runs) == 3
    named = set()
    for info in prof.steps:
        named |= {n.name for n in info.origin}
    # every ONNX node is computed by some step, and fusion kept each name (flatten may be a view)
    assert NODES - {"flatten"} <= named
    assert all(info.origin for info in prof.steps)  # layout copies included: no "(compiler)" step
    times = prof.step_times()
    assert all(len(ts) == 3 and min(ts) >= 0 for ts in times.values())
    total = sum(r.share for r in by_kernel(prof))
    assert total == pytest.approx(1.0)


def test_fusion_merges_provenance_on_cpu():
    p = _compiled("cpu")
    computing = [i for i in p.main.instructions if i.op.kind is not OpKind.BUILTIN]
    fused = [i for i in computing if len(i.origin) > 1]
    assert fused, "the pointwise chain and the conv epilogue fuse: some instruction computes several nodes"
    # relu, mul, add and sigmoid end in one kernel (an epilogue or a fused pointwise step)
    assert any({"relu", "mul"} <= {n.name for n in i.origin} for i in fused)


def test_profiled_run_gives_the_plain_outputs():
    p = _compiled("cpu")
    expected = p.run(feeds())
    rec = p.executable.recorder()
    rec.begin_run()
    got = p.executable.execute_observed(feeds(), rec)
    np.testing.assert_array_equal(got[0], expected[0])


def test_rollup_by_onnx_op_groups_fused_types():
    prof = _compiled("cpu").executable.profile(feeds(), runs=2)
    keys = {r.key for r in by_onnx_op(prof)}
    assert any("Conv" in k for k in keys) and any("MatMul" in k for k in keys)
    rows = step_rows(prof)
    assert rows == sorted(rows, key=lambda r: -r.seconds)


def test_chrome_trace_structure():
    prof = _compiled("ref").executable.profile(feeds(), runs=2)
    prof.meta["phases"] = [("parse", 0, 1000), ("pass x", 1000, 3000)]
    trace = json.loads(json.dumps(chrome_trace(prof, "small")))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == 2 * len(prof.steps)
    assert {e["cat"] for e in events} == {"compile", "run", "kernel"}
    for e in events:
        assert isinstance(e["ts"], float) and e["dur"] >= 0 and e["pid"] == 1
    runs = [e for e in events if e["cat"] == "run"]
    for k in kernels:  # every kernel lies inside a run on the same lane: Perfetto nests them
        assert any(r["ts"] <= k["ts"] and k["ts"] + k["dur"] <= r["ts"] + r["dur"] + 1e-3 for r in runs)
    assert any("conv" in k["args"]["onnx_nodes"] for k in kernels)


def test_compile_phases_of_other_lanes_get_their_own_named_threads():
    prof = _compiled("ref").executable.profile(feeds(), runs=1)
    prof.meta["phases"] = [("parse", 0, 1000, "compile"), ("lower", 1000, 9000, "compile"),
                           ("compile mm_a", 2000, 5000, "compile thread 0"), ("compile mm_b", 2500, 6000, "compile thread 1"),
                           ("compile mm_c", 5000, 7000, "compile thread 0")]
    trace = chrome_trace(prof, "small")
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    spans = {e["name"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "compile"}
    assert spans["parse"] == spans["lower"] == 1
    assert names[spans["compile mm_a"]] == names[spans["compile mm_c"]] == "compile thread 0"
    assert names[spans["compile mm_b"]] == "compile thread 1" and spans["compile mm_a"] != spans["compile mm_b"]
    assert len(set(names)) == len(names)  # no lane shares a thread id with another


def test_phase_spans_are_recorded_only_inside_a_recording_and_from_other_threads():
    import threading

    from fusegraph.profile import phases

    with phases.span("nobody records this"):
        pass
    with phases.recording() as log:
        with phases.span("outer"):
            with phases.span("inner"):
                pass
        handed = phases.current()
        worker = threading.Thread(target=lambda: handed.add("in a thread", "worker", 5, 9))
        worker.start()
        worker.join()
        with phases.recording() as nested:
            with phases.span("apart"):
                pass
    assert [s[0] for s in log.spans] == ["inner", "outer", "in a thread"] and log.spans[2][1:] == ("worker", 5, 9)
    (inner, _, i0, i1), (outer, lane, o0, o1) = log.spans[:2]
    assert lane == phases.MAIN and o0 <= i0 <= i1 <= o1
    assert [s[0] for s in nested.spans] == ["apart"] and phases.current() is None


def test_perf_profile_and_trace_cli(tmp_path, capsys):
    import onnx

    target_or_skip("cpu")  # the CLI's default target

    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(), model)
    trace, js = tmp_path / "t.json", tmp_path / "p.json"
    rc = cli.main(["perf", str(model), "-n", "2", "--warmup", "1", "--profile", "--trace", str(trace),
                   "--profile-json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "by ONNX op type" in out and "by kernel" in out and "slowest steps" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "compile" and e["name"].startswith("pass ") for e in events)
    assert any(e.get("cat") == "kernel" for e in events)
    data = json.loads(js.read_text())
    assert data["runs"] == 2 and data["steps"] and data["by_onnx_op"]


def test_trace_command_writes_compile_phases_and_runs(tmp_path, capsys):
    import onnx

    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(), model)
    out = tmp_path / "trace.json"
    assert cli.main(["trace", str(model), "--target", "ref", "-o", str(out), "-n", "2"]) == 0
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    phases = [e["name"] for e in events if e["cat"] == "compile"]
    assert phases[0] == "parse" and phases[-1] == "lower" and "pass eliminate_dead_code" in phases
    assert sum(e["cat"] == "run" for e in events) == 2
    compile_end = max(e["ts"] + e["dur"] for e in events if e["cat"] == "compile")
    assert all(e["ts"] >= compile_end - 1e-3 for e in events if e["cat"] == "run")  # runs follow the compile


def test_a_step_covering_several_instructions_names_all_their_nodes():
    # the gpu target runs a GEMM and its epilogue as one step whose instruction is the epilogue's:
    # the step must carry the GEMM's node and FLOPs too (the 'fc' MatMul went missing from gpu profiles)
    from fusegraph.passes.flops import instruction_flops
    from fusegraph.profile import step_info

    p = fusegraph.parse_onnx(small_cnn())
    by_name = {n.name: i for i in p.main.instructions for n in i.origin if len(i.origin) == 1}
    dot, tanh = by_name["fc"], by_name["tanh"]
    alone = step_info(tanh, instruction_flops)
    assert {n.name for n in alone.origin} == {"tanh"}
    both = step_info(tanh, instruction_flops, [dot, tanh])
    assert [n.name for n in both.origin] == ["fc", "tanh"]
    assert both.flops == instruction_flops(dot) + instruction_flops(tanh) > alone.flops
