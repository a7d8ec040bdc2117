"""view_chain.py: movement chains composed as one strided view (or applied op by op when they are not
one), checked against torch running the same ops step by step."""

from __future__ import annotations

import pytest

from fusegraph.ops.movement import Contiguous, Reshape, Slice, Squeeze, Transpose
from fusegraph.targets.gpu.view_chain import apply, compose

torch = pytest.importorskip("torch")


def step_by_step(x, chain):
    for op, lens in chain:
        if op.name == "transpose":
            x = x.permute(op.perm)
        elif op.name == "slice":
            index = [slice(None)] * x.dim()
            for a, s, e, st in zip(op.axes, op.starts, op.ends, op.steps):
                index[a] = slice(s, e, st)
            x = x[tuple(index)]
        elif op.name == "contiguous":
            x = x.contiguous()
        else:
            x = x.reshape(lens)
    return x


# torch's MultiheadAttention export (L=5, N=2, H=3, D=4): the packed [L*N, 3*H*D] projection to q
MHA_Q = [(Reshape(dims=(1, 5, 2, 3, 12)), (1, 5, 2, 3, 12)), (Transpose(perm=(3, 1, 2, 0, 4)), (3, 5, 2, 1, 12)),
         (Reshape(dims=(3, 5, 2, 12)), (3, 5, 2, 12)), (Slice(axes=(0,), starts=(1,), ends=(2,), steps=(1,)), (1, 5, 2, 12)),
         (Reshape(dims=(5, 6, 4)), (5, 6, 4)), (Transpose(perm=(1, 0, 2)), (6, 5, 4)), (Contiguous(), (6, 5, 4)),
         (Reshape(dims=(2, 3, 5, 4)), (2, 3, 5, 4))]


@pytest.mark.parametrize("base, chain, view", [
    ((10, 36), MHA_Q, True),
    ((10, 36), MHA_Q + [(Transpose(perm=(0, 1, 3, 2)), (2, 3, 4, 5))], True),  # K^T
    ((4, 6), [(Transpose(perm=(1, 0)), (6, 4)), (Reshape(dims=(24,)), (24,))], False),  # a real copy
    ((4, 6), [(Reshape(dims=(2, 2, 3, 2)), (2, 2, 3, 2)), (Transpose(perm=(1, 0, 3, 2)), (2, 2, 2, 3)),
              (Slice(axes=(3,), starts=(0,), ends=(3,), steps=(2,)), (2, 2, 2, 2))], True),
    ((6, 1, 4), [(Squeeze(axes=(1,)), (6, 4)), (Reshape(dims=(3, 8)), (3, 8))], True),
    ((3, 5), [(Transpose(perm=(1, 0)), (5, 3)), (Reshape(dims=(3, 5)), (3, 5))], False),
])
def test_chains_match_torch_step_by_step(base, chain, view):
    x = torch.arange(float(torch.tensor(base).prod())).reshape(base)
    assert (compose(tuple(x.shape), x.stride(), chain) is not None) == view
    got, want = apply(x, chain), step_by_step(x, chain)
    assert got.shape == want.shape and torch.equal(got, want)
    if view:
        assert got.data_ptr() - 4 * got.storage_offset() == x.data_ptr()  # no copy: x's own storage


def test_a_view_follows_the_base_strides_at_run_time():
    x = torch.arange(360.0).reshape(10, 36)[:, :36].t().contiguous().t()  # column-major [10, 36]
    got = apply(x, MHA_Q)
    assert torch.equal(got, step_by_step(x, MHA_Q))
