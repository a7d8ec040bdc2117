"""The real all-MiniLM-L6-v2 export (tests/helpers/minilm.py) is valid ONNX and faithful to PyTorch."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tests.helpers import minilm

pytestmark = pytest.mark.slow

_REASON = minilm.minilm_unavailable_reason()
needs_minilm = pytest.mark.skipif(bool(_REASON), reason=_REASON or "available")


def test_sample_inputs_are_realistic() -> None:
    inputs = minilm.sample_inputs(batch=3, seq=128, seed=0)
    assert set(inputs) == set(minilm.INPUT_NAMES)
    for value in inputs.values():
        assert value.dtype == np.int64 and value.shape == (3, 128)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert (ids[:, 0] == minilm.CLS_ID).all()
    assert mask[0].all(), "the first row fills the whole sequence"
    for row in range(3):
        n = int(mask[row].sum())
        assert mask[row, :n].all() and not mask[row, n:].any()
        assert ids[row, n - 1] == minilm.SEP_ID
        assert (ids[row, n:] == minilm.PAD_ID).all()
        assert ((ids[row, 1 : n - 1] > minilm.SEP_ID) & (ids[row, 1 : n - 1] < minilm.VOCAB_SIZE)).all()
    assert not inputs["token_type_ids"].any()
    again = minilm.sample_inputs(batch=3, seq=128, seed=0)
    assert all(np.array_equal(inputs[k], again[k]) for k in inputs)


@pytest.fixture(scope="module")
def onnx_path():
    if _REASON:
        pytest.skip(_REASON)
    path = minilm.minilm_onnx_path()
    assert path is not None and path.is_file()
    return path


@pytest.fixture(scope="module")
def torch_model():
    return minilm.load_torch_model()


@needs_minilm
def test_export_is_valid_onnx(onnx_path) -> None:
    import onnx

    model = onnx.load(str(onnx_path))
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain: o.version for o in model.opset_import}.get("", None) == minilm.OPSET
    assert [i.name for i in model.graph.input] == list(minilm.INPUT_NAMES)
    assert [o.name for o in model.graph.output] == list(minilm.OUTPUT_NAMES)
    for value in model.graph.input:
        dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert dims == ["batch", "sequence"]
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["MatMul"] == 48 and ops["Softmax"] == 6 and ops["LayerNormalization"] == 13
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)


@needs_minilm
@pytest.mark.parametrize(("batch", "seq"), [(1, 128), (3, 37)])
def test_onnxruntime_matches_pytorch(onnx_path, torch_model, batch: int, seq: int) -> None:
    ort = pytest.importorskip("onnxruntime")
    inputs = minilm.sample_inputs(batch=batch, seq=seq, seed=batch)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = dict(zip(minilm.OUTPUT_NAMES, session.run(list(minilm.OUTPUT_NAMES), inputs), strict=True))
    want = minilm.torch_reference(inputs, torch_model)
    assert got["last_hidden_state"].shape == (batch, seq, minilm.HIDDEN_SIZE)
    assert got["pooler_output"].shape == (batch, minilm.HIDDEN_SIZE)
    for name in minilm.OUTPUT_NAMES:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-4, err_msg=name)


@needs_minilm
def test_export_is_deterministic(tmp_path, onnx_path) -> None:
    path = minilm.export_minilm(tmp_path / "again.onnx")
    assert path.read_bytes() == onnx_path.read_bytes()
