"""The figures the generic pipeline must reach on the built-in ResNet-50 (issue 4)."""

import fusegraph
from fusegraph import models
from fusegraph.passes import generic_pipeline
from fusegraph.passes.analyze import analyze

ARITHMETIC = ("mul", "div", "sub", "sqrt")


def test_resnet50_figures():
    p = fusegraph.parse_onnx(models.get_model("resnet50"))
    a = analyze(p, generic_pipeline())
    assert a.final.instructions <= 0.77 * a.parsed.instructions  # >= 23% fewer
    assert a.final.arena_bytes <= 1.05 * a.final.max_live_bytes
    # no batch-norm arithmetic left: every pointwise body is bias-add + relu (+ residual add)
    bodies = [i.op.body_text for i in p.main.instructions if i.op.name == "fused_pointwise"]
    bodies += [i.op.name for i in p.main.instructions if i.op.kind.value == "pointwise" and i.op.name != "fused_pointwise"]
    assert bodies and not any(f in b for b in bodies for f in ARITHMETIC), bodies


def test_a_given_manager_honours_the_options_disabled_passes():
    # a caller that records passes (perf --trace, analyze) passes its own manager: the options'
    # disabled passes must still be skipped, not only by managers run_pipeline makes itself
    from fusegraph.models import get_model
    from fusegraph.passes import generic_pipeline
    from fusegraph.passes.manager import PassManager, run_pipeline
    from fusegraph.targets import CompileOptions

    program = fusegraph.parse_onnx(get_model("bert_small"))
    manager = PassManager()
    run_pipeline(program, generic_pipeline(), CompileOptions(disabled_passes=("fuse_pointwise",)), manager)
    ran = {r.name for r in manager.records}
    assert "fuse_pointwise" not in ran and "eliminate_dead_code" in ran
