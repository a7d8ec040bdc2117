"""2:4 sparse matmuls on the tensor cores (cuSPARSELt through torch), each chosen by timing against
the dense kernel at compile (the steps sparse_patterns.py marks).

cuSPARSELt's sparse operand is the FIRST one, and it must be 2:4 along its rows. y = x W with W
[K, N] 2:4 along K is therefore computed transposed: y^T = W^T x^T, with W^T [N, K] compressed once
(its rows are W's columns, 2:4 along K) and x^T a free view of the rows x [M, K]. transpose_result
makes cuSPARSELt write y^T column-major, which is y [M, N] row-major: no copy either way. The bias
epilogue is cuSPARSELt's own (a bias per row of y^T, i.e. per output column); other epilogues
(GELU, residual adds) run as the reader's Triton pointwise kernel on the product, as the library
path of EpilogueGemm does (torch's _cslt_sparse_mm takes no activation).

The candidates are timed by the tuner (autotune.py) on the real tensors in the warm-up run, before
the CUDA graph is captured; the choice is cached and saved with the program like a GEMM template's.
A candidate that cannot run here (no cuSPARSELt in this torch build, an unsupported shape) raises,
is dropped, and the dense kernel stays. The dense weight stays on the device beside the compressed
one, since the dense kernel may be the one chosen.
"""

from __future__ import annotations

from typing import Any

from .device import torch
from .gemm_runner import EpilogueGemm
from .lowering import lowering

SPARSE = "cusparselt"  # the sparse candidate's name (the dense one is autotune.LIBRARY)
DENSE_ROWS = 8  # x^T's columns (the rows M) in multiples of this: cuSPARSELt's dense minimum, 16-bit types


def compress(w_t: Any) -> Any:
    """W^T [N, K], 2:4 along its rows, in cuSPARSELt's compressed form (values and metadata)."""
    return torch()._cslt_compress(w_t)


def sparse_mm(packed: Any, x_t: Any, bias: Any) -> Any:
    """(W^T x^T)^T = x W as a new row-major [M, N] tensor, + bias [N] when given. cuSPARSELt's
    default algorithm: its algorithm search (`_cslt_sparse_mm_search`, `_C._cusparselt.mm_search`)
    fails with an internal error on the H200 with torch 2.11 + CUDA 13, and leaves the CUDA context
    unusable for every later call, so it is never called."""
    return torch()._cslt_sparse_mm(packed, x_t, bias=bias, transpose_result=True)


class SparseWeight:
    """x [..., K] -> x W [M, N] (+ bias) for a constant 2:4 weight W [K, N], compressed at the first
    call (in the warm-up run: the weight's device tensor is known from then on)."""

    def __init__(self):
        self.packed: Any = None

    def __call__(self, x: Any, w: Any, bias: Any = None) -> Any:
        t = torch()
        k, n = w.shape
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        pad = -m % DENSE_ROWS
        if pad:  # rows cuSPARSELt cannot take: zero rows added, their products dropped
            x2 = t.nn.functional.pad(x2, (0, 0, 0, pad))
        b = None if bias is None else bias.reshape(n)
        if self.packed is None:
            self.packed = compress(w.t().contiguous())
        y = sparse_mm(self.packed, x2.t(), b)
        return y[:m] if pad else y


class SparseChoice:
    """One sparse step: the first call (made while compiling, before graph capture) asks the tuner
    whether the sparse or the dense candidate is faster on these very tensors; later calls run it."""

    def __init__(self, ctx, step, dense: Any, sparse: Any):
        self.ctx, self.step = ctx, step
        self.dense, self.sparse = dense, sparse
        self.tuning: dict[str, dict] = {}
        self.chosen: str | None = None
        self.run: Any = None

    @property
    def sources(self) -> dict[str, str]:
        return dict(getattr(self._chosen_runner(), "sources", {}))

    @property
    def gemm_kernels(self) -> list[Any]:
        return list(getattr(self._chosen_runner(), "gemm_kernels", []))

    def _chosen_runner(self) -> Any:
        return self.dense if self.chosen != SPARSE else getattr(self.sparse, "epilogue", None)

    def __call__(self, *args: Any) -> Any:
        return (self.run or self._choose(args))(*args)

    def _choose(self, args: tuple) -> Any:
        """The chosen candidate's run, kept for later calls (in autotune's compile_all pass: a run for
        this call, nothing kept)."""
        from .autotune import LIBRARY, Candidate

        if self.ctx.tuner is None:
            from .autotune import Tuner

            self.ctx.tuner = Tuner.for_device(self.ctx.device)
        mm = next(m for m in self.step.members if m.op.name == "dot")
        a, w = mm.inputs
        m, (k, n) = a.shape.elements // a.shape.lens[-1], w.shape.lens
        body = self.step.data.get("body", "")
        key = f"2:4 {self.step.kind} {m}x{n}x{k} {mm.shape.dtype.value} {body} {','.join(self.step.data.get('roles', ()))}"
        candidates = [Candidate(LIBRARY, lambda: self.dense), Candidate(SPARSE, lambda: self.sparse)]
        name, run = self.ctx.tuner.choose(key, candidates, args)
        if name is not None:
            self.chosen, self.run = name, run
            self.tuning[key] = {"name": name}
        return run


def _register(ctx, step, dense, sparse):
    runner = SparseChoice(ctx, step, dense, sparse)
    ctx.kernels.append(runner)  # its choice is recorded with the program (ctx.tuning)
    return runner


@lowering("sparse_dot", mode="value", cublas=True, note="2:4 cuSPARSELt or cuBLAS, timed at compile")
def sparse_dot(ctx, step):
    t, kernel, lens = torch(), SparseWeight(), step.ins.shape.lens
    return _register(ctx, step, lambda a, w: t.matmul(a, w), lambda a, w: kernel(a, w).view(lens))


@lowering("sparse_gemm_bias", mode="value", cublas=True, note="2:4 cuSPARSELt or cuBLASLt, with the bias epilogue, timed at compile")
def sparse_gemm_bias(ctx, step):
    t, kernel, lens = torch(), SparseWeight(), step.ins.shape.lens
    n = lens[-1]

    def dense(a, w, bias):
        return t.addmm(bias.reshape(n), a.reshape(-1, a.shape[-1]), w).view(lens)

    return _register(ctx, step, dense, lambda a, w, bias: kernel(a, w, bias).view(lens))


class SparseEpilogue:
    """cuSPARSELt's product, then the reader's body as one Triton pointwise kernel into `out`."""

    def __init__(self, step):
        from .launch import PointwiseLauncher

        d = step.data
        mm, user = step.members[-1], step.ins
        self.roles, self.kernel = d["roles"], SparseWeight()
        var_types = [mm.shape.dtype if r == "acc" else x.shape.dtype for r, x in zip(self.roles, user.inputs)]
        self.epilogue = PointwiseLauncher(d["body"], var_types, user.shape.dtype)

    def __call__(self, out, a, w, *ops):
        y = self.kernel(a, w).view(out.shape)
        it = iter(ops)
        self.epilogue(out, *[y if r == "acc" else next(it) for r in self.roles])


@lowering("sparse_gemm_epilogue", mode="into", cublas=True,
          note="2:4 cuSPARSELt then the epilogue's Triton kernel, or the dense epilogue GEMM: timed at compile")
def sparse_gemm_epilogue(ctx, step):
    return _register(ctx, step, EpilogueGemm(ctx, step), SparseEpilogue(step))


# -- sparse constants (ops/sparse.py): no unstructured sparse kernel here, so made dense on the device
@lowering("sparse_to_dense", mode="into", note="the nonzeros scattered into zeros")
def sparse_to_dense(ctx, step):
    def run(out, values, indices):
        out.zero_()
        out.view(-1)[indices] = values
    return run


@lowering("sparse_matmul", mode="into", cublas=True, note="its weight made dense once on the device, then cuBLAS")
def sparse_matmul(ctx, step):
    t, op = torch(), step.ins.op
    dense: list[Any] = []  # W [k, n], built at the first call (the warm-up run)

    def run(out, a, values, indices=None):
        if not dense:
            if indices is None:  # the two-input form: its weight is dense already
                dense.append(values)
            else:
                w = t.zeros(op.k * op.n, dtype=values.dtype, device=values.device)
                w[indices] = values
                dense.append(w.view(op.k, op.n))
        w = dense[0]
        a2 = a.reshape(-1, w.shape[0])
        if not a.dtype.is_floating_point:  # integer products are exact in float64 (as the dot lowering)
            out.copy_(t.matmul(a2.to(t.float64), w.to(t.float64)).view(out.shape))
        elif out.is_contiguous():
            t.matmul(a2, w, out=out.view(-1, w.shape[1]))
        else:
            out.copy_(t.matmul(a2, w).view(out.shape))
    return run
