"""Planted faults for the verify --per-layer / --bisect and reduce tests: a wrong rewrite (a pass
that turns the first add into a subtraction) and a wrong kernel (the cpu's pooling off by 5%)."""

from __future__ import annotations

import pytest

from fusegraph.ir.op import make_op

BROKEN: list = []  # the ONNX nodes of the instruction break_one_add rewrote (the answer to find)


def break_one_add(module) -> bool:
    """A wrong rewrite: the first `add` becomes a `sub` (the kind of slip a real pass makes)."""
    for ins in module:
        if ins.op.name == "add" and ins.users:
            BROKEN[:] = [n.name for n in ins.origin]
            module.replace(ins, module.insert(ins, make_op("sub"), *ins.inputs))
            return True
    return False


@pytest.fixture
def wrong_rewrite(monkeypatch):
    """The cpu pipeline starts with `break_one_add`."""
    from fusegraph.targets.cpu.target import CpuTarget

    passes = CpuTarget.passes
    monkeypatch.setattr(CpuTarget, "passes", lambda self, options: [break_one_add, *passes(self, options)])


@pytest.fixture
def wrong_kernel(monkeypatch):
    """The cpu's pooling kernels give 1.05 times the right value."""
    from fusegraph.targets.cpu import lowering

    factory = lowering.LOWERINGS["pooling"]

    def bad(ins, ctx):
        fn = factory(ins, ctx)

        def run(args, out):
            r = fn(args, out)
            r *= 1.05  # in place: a kernel given an output buffer returns it (views of it are fixed)
            return r

        return run

    monkeypatch.setitem(lowering.LOWERINGS, "pooling", bad)
    monkeypatch.setitem(lowering.LOWERINGS, "pooling_channels_last", bad)


@pytest.fixture
def compile_error(monkeypatch):
    """The cpu target cannot lower a product with an epilogue (as if its kernel were missing)."""
    from fusegraph.errors import CompileError
    from fusegraph.targets.cpu import lowering

    def missing(ins, ctx):
        raise CompileError(f"cpu target: no kernel for {ins.op.name} (planted)")

    monkeypatch.setitem(lowering.LOWERINGS, "dot_epilogue", missing)
    monkeypatch.setitem(lowering.LOWERINGS, "dot", missing)
