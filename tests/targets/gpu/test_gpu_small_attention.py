"""triton_attention.small_attention, the attention step's short-sequence candidate (issue 23: Swin's
49-token windows), against torch's math attention: strided q, k, v views of one projection, masks
read through their broadcast strides, grouped-query heads, rows in several blocks, head dims that
are not powers of two; then in a compiled model against ONNX Runtime. On a CUDA machine the device
runs it; elsewhere Triton's interpreter (the gpu_target fixture's)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort


@pytest.fixture
def device(gpu_target):
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _packed(b, n, h, hkv, d, device):
    import torch

    x = torch.randn(b, n, (h + 2 * hkv) * d, device=device).half()
    q, k, v = x.split([h * d, hkv * d, hkv * d], -1)
    return (q.reshape(b, n, h, d).transpose(1, 2), k.reshape(b, n, hkv, d).transpose(1, 2),
            v.reshape(b, n, hkv, d).transpose(1, 2))


@pytest.mark.parametrize("b, n, h, hkv, d, bias", [
    (4, 49, 3, 3, 32, "heads"),      # Swin: a relative position bias [1, H, L, S]
    (2, 49, 2, 2, 32, "full"),       # Swin's shifted windows: a mask for every window and head
    (2, 100, 2, 2, 24, "padding"),   # two row blocks, a head dim of 24, a key padding mask [B, 1, 1, S]
    (2, 20, 4, 1, 16, None),         # grouped-query heads, no mask
])
def test_small_attention_matches_math_attention(device, b, n, h, hkv, d, bias):
    import torch
    import torch.nn.functional as F

    from fusegraph.targets.gpu.triton_attention import small_attention

    torch.manual_seed(0)
    q, k, v = _packed(b, n, h, hkv, d, device)
    shape = {"heads": (1, h, n, n), "full": (b, h, n, n), "padding": (b, 1, 1, n), None: None}[bias]
    mask = None if shape is None else torch.randn(shape, device=device).half()
    if bias == "padding":
        mask[:, ..., n - 7:] = -65504.0
    got = small_attention(q, k, v, mask, None)
    kk, vv = (x.repeat_interleave(h // hkv, 1) for x in (k, v))
    want = F.scaled_dot_product_attention(q.float(), kk.float(), vv.float(),
                                          attn_mask=None if mask is None else mask.float())
    assert got.dtype == torch.float16 and got.shape == q.shape
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
    assert got.transpose(1, 2).is_contiguous()  # q's [B, L, H, D] memory order


def test_small_attention_refuses_what_it_does_not_take(device):
    import torch

    from fusegraph.targets.gpu.triton_attention import small_attention

    q, k, v = _packed(1, 200, 2, 2, 16, device)  # 200 keys: more than one key block
    with pytest.raises(RuntimeError):
        small_attention(q, k, v, None, None)
    with pytest.raises(RuntimeError):  # float32: the library keeps it exact
        small_attention(*(x.float() for x in _packed(1, 8, 2, 2, 16, device)), None, None)
    assert torch.float16 == q.dtype


def test_a_model_whose_attention_runs_the_small_kernel_matches_onnxruntime(gpu_target, monkeypatch):
    """The step forced onto the small kernel (the tuner picks it only where it is the fastest on the
    device): q, k, v from the pattern's view chains, a constant relative bias, fp16."""
    from fusegraph.targets.gpu import lower_attention

    chosen = []

    def choose(self, q, k, v, bias, dead):
        chosen.append(1)
        self.run = self._small()
        return self.run
    monkeypatch.setattr(lower_attention.TunedAttention, "_choose", choose)
    rng = np.random.default_rng(5)
    b, h, n, d = 3, 2, 49, 16
    x = {"q": rng.standard_normal((b, h, n, d)).astype(np.float32),
         "k": rng.standard_normal((b, h, n, d)).astype(np.float32),
         "v": rng.standard_normal((b, h, n, d)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["ss"]),
             helper.make_node("Add", ["ss", "m"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inits = {"c": np.array(d ** -0.5, np.float32), "m": rng.standard_normal((1, h, n, n)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert [s.kind for s in p.executable.plan.steps].count("attention") == 1
    assert_close(p.run(x), run_ort(model, x), rtol=2e-2, atol=2e-2)
    assert chosen


@pytest.mark.parametrize("shape, kv, dtype, alone", [
    ((32, 12, 128, 64), (32, 12, 128, 64), "float16", True),    # GPT-2, DistilBERT b32: small won 2x
    ((64, 3, 49, 32), (64, 3, 49, 32), "float16", True),        # Swin's windows
    ((32, 8, 128, 64), (32, 4, 128, 64), "bfloat16", True),     # grouped-query heads
    ((2, 12, 128, 128), (2, 12, 128, 128), "float16", False),   # heads past SMALL_ALONE_DIM: timed
    ((2, 12, 128, 64), (2, 12, 256, 64), "float16", False),     # keys past MAX_KEYS: SDPA's
    ((2, 12, 128, 64), (2, 12, 128, 64), "float32", False),     # float32: SDPA's
])
def test_which_heads_take_the_small_kernel_untimed(shape, kv, dtype, alone):
    import torch

    from fusegraph.targets.gpu.lower_attention import small_alone

    q, k = torch.zeros(shape, dtype=getattr(torch, dtype)), torch.zeros(kv, dtype=getattr(torch, dtype))
    assert small_alone(q, k) is alone


def test_small_attention_reads_dead_rows_as_zero_queries(device):
    """Rows marked dead (every key masked) weigh all keys alike: the mean of v, as the zeroed query
    gives SDPA (lower_attention.zero_rows); per batch row and per query row."""
    import torch

    from fusegraph.targets.gpu.triton_attention import small_attention

    torch.manual_seed(1)
    q, k, v = _packed(2, 30, 2, 2, 16, device)
    for dead in (torch.tensor([True, False], device=device).reshape(2, 1, 1, 1),
                 torch.rand(2, 1, 30, 1, device=device) > 0.5):
        got = small_attention(q, k, v, None, None, dead)
        want = small_attention(torch.where(dead, 0.0, q.float()).half(), k, v, None, None)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        rows = dead.expand(2, 2, 30, 1)[..., 0]
        mean = v.float().mean(-2, keepdim=True).expand_as(q)
        torch.testing.assert_close(got.float()[rows], mean[rows], rtol=2e-2, atol=2e-2)


def test_padded_rows_on_the_small_kernel_match_onnxruntime(gpu_target, monkeypatch):
    """transformers' eager padding mask with a batch row all padding (its queries' keys all masked),
    fp16, the step forced onto the small kernel: its rows get the model's uniform weights."""
    from fusegraph.targets.gpu import lower_attention
    from tests.targets.gpu.test_gpu_attention_masks import _hf_eager_model

    def choose(self, q, k, v, bias, dead):
        assert dead is not None  # float16 and a runtime mask: the rows are found each run
        self.run = self._small()
        return self.run
    monkeypatch.setattr(lower_attention.TunedAttention, "_choose", choose)
    model, x = _hf_eager_model()
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert_close(p.run(x), run_ort(model, x), rtol=2e-2, atol=2e-2)


def test_the_small_kernel_compiles_with_the_other_kernels(gpu_target, monkeypatch, tmp_path):
    """The small kernel, a tuning candidate, compiles in the warm-up's compile-all phase beside every
    step's kernels (its compile hook), not when the warm-up's run times it (GPT-2 b1 on the H200 waited
    0.8 s there). On a CUDA machine: the compile log's spans."""
    import torch

    from fusegraph.targets.gpu import kernels, lower_attention

    run = lower_attention.TunedAttention(None, None, False)._small()
    assert callable(run.compile)
    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)  # tuned afresh: the candidates are timed
    rng = np.random.default_rng(2)
    b, h, n, d = 2, 2, 40, 32
    x = {"q": rng.standard_normal((b, h, n, d)).astype(np.float32),
         "k": rng.standard_normal((b, h, d, n)).astype(np.float32),
         "v": rng.standard_normal((b, h, n, d)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    p = fusegraph.parse_onnx(make_model(nodes, x, ["y"]))
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert [s.kind for s in p.executable.plan.steps].count("attention") == 1
    assert_close(p.run(x), run_ort(make_model(nodes, x, ["y"]), x), rtol=2e-2, atol=2e-2)
    if not torch.cuda.is_available():
        pytest.skip("the compile scopes and their log need a CUDA device")
    log = p.executable.compile_log
    phase = next((t0, t1) for name, lane, t0, t1 in log if name == "compile kernels")
    small = [(t0, t1) for name, lane, t0, t1 in log if name == "compile attention_small"]
    assert small and all(phase[0] <= t0 <= t1 <= phase[1] for t0, t1 in small)
    from fusegraph.targets.gpu import compile_pool

    if compile_pool.workers_wanted():  # a generated module: its compile runs in a worker, off the GIL
        assert any(name == "worker attention_small" for name, _, _, _ in log)
    # 32-dim heads over 40 keys: the small kernel's, untimed, and SDPA never called
    assert list(p.executable.tuning.values()) == [{"name": "small"}]
    assert not any(name.startswith("tune attention") for name, _, _, _ in log)
    assert not any(name == "library first calls while compiling" for name, _, _, _ in log)
