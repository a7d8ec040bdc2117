"""How many threads a library kernel gets (LowerContext.threads_for): one under FORK_WORK, where a
fork waits for a sleeping worker; the work counted as the kernel does it (a pooling window clipped
to its input)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.kernels.dense import pooling_work
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(6)
n = helper.make_node


def _spy(monkeypatch, cls) -> list:
    made = []
    real_init = cls.__init__

    def spy(self, *args, **kwargs):
        made.append(kwargs.get("threads"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", spy)
    return made


@pytest.mark.parametrize("channels, threads", [(24, 1), (64, 2)])
def test_a_small_convolution_runs_on_the_calling_thread(monkeypatch, channels, threads):
    """A conv under FORK_WORK (2 x 16² x 24 x 24·9 = 2.7 MFLOP) gets a one-thread primitive in a two-thread
    program (forking for it waits for a sleeping worker); a larger one (19 MFLOP) gets both threads."""
    from fusegraph.targets.cpu import onednn
    from fusegraph.targets.cpu.lowering import FORK_WORK

    made = _spy(monkeypatch, onednn.Convolution)
    x = rng.standard_normal((1, channels, 16, 16), dtype=np.float32)
    w = rng.standard_normal((channels, channels, 3, 3), dtype=np.float32) * 0.1
    model = make_model([n("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["y"])],
                       {"x": x}, ["y"], {"w": w})
    assert (2.0 * x.size * w[0].size < FORK_WORK) == (threads == 1)
    exe = fusegraph.parse_onnx(model).compile("cpu", fusegraph.CompileOptions(threads=2))
    assert made and set(made) == {threads}
    assert_close(exe.run({"x": x}), run_ort(model, {"x": x}))



def test_pooling_work_counts_the_window_inside_the_input():
    assert pooling_work(320, (1, 1), (320, 320), (0, 0, 0, 0)) == 320
    assert pooling_work(8, (4, 4), (3, 3), (1, 1, 1, 1)) == 8 * 9
    assert pooling_work(48, (8, 8), (8, 8), (0, 0, 0, 0)) == 48 * 64


def test_an_average_pool_over_a_window_larger_than_its_input_runs_on_one_thread(monkeypatch):
    """An exported adaptive pool: AvgPool with a 320 x 320 window over a 1 x 1 map."""
    from fusegraph.targets.cpu import onednn

    made = _spy(monkeypatch, onednn.Pooling)
    x = rng.standard_normal((1, 320, 1, 1), dtype=np.float32)
    model = make_model([n("AveragePool", ["x"], ["y"], kernel_shape=[320, 320], strides=[320, 320], ceil_mode=1)],
                       {"x": x}, ["y"])
    exe = fusegraph.parse_onnx(model).compile("cpu", fusegraph.CompileOptions(threads=2))
    assert made == [1]
    assert_close(exe.run({"x": x}), run_ort(model, {"x": x}))
