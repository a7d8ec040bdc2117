"""What a served model compiles, and when: every batch bucket at load; the config's `precision`
parameter reaches the compiler (fp16 answers within fp16's tolerance of ONNX Runtime, and are not the
float32 program's); an unknown precision is a config error."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.util import FEATURES, mlp_model, ort_reference, skip_without_serve_deps

skip_without_serve_deps()


def _served(tmp_path, precision: str | None):
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.model import ServedModel

    path = tmp_path / f"{precision}.onnx"
    onnx.save(mlp_model(), path)
    entry = cfg.single_file_entry(path)
    if precision is not None:
        entry.config.parameters["precision"].string_value = precision
    return ServedModel(entry, 1, path, "ref", cores=1)


def test_every_batch_bucket_is_compiled_at_load(tmp_path, monkeypatch):
    import fusegraph

    compiled = []
    compile_ = fusegraph.Program.compile

    def counting(self, *args, **kwargs):
        compiled.append([s.lens[0] for s in self.get_parameter_shapes().values()])
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(fusegraph.Program, "compile", counting)
    model = _served(tmp_path, None)
    assert model.buckets == [1, 2, 4]  # a generated config: max_batch_size 4
    assert compiled == [[1], [2], [4]]
    x = np.random.default_rng(2).standard_normal((3, FEATURES)).astype(np.float32)
    np.testing.assert_allclose(model.execute({"x": x}, 3)["y"], ort_reference(mlp_model(), x)["y"], rtol=1e-5,
                               atol=1e-5)
    assert len(compiled) == 3  # a batch of 3 ran on buckets compiled before


def test_a_cpu_batch_is_cut_into_buckets_it_fills_a_gpu_batch_padded(tmp_path):
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.model import ServedModel

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    entry = cfg.single_file_entry(path)
    entry.config.max_batch_size = 8
    model = ServedModel(entry, 1, path, "ref", cores=1)
    assert model.buckets == [1, 2, 4, 8]
    assert [model.pieces(n) for n in (1, 3, 5, 7, 8)] == [[1], [2, 1], [4, 1], [4, 2, 1], [8]]
    runs = []
    for b in model.buckets:  # record the batch each program is run at
        prog = model.program(b)
        prog.run = (lambda run: lambda inputs: runs.append(len(next(iter(inputs.values())))) or run(inputs))(prog.run)
    x = np.random.default_rng(4).standard_normal((7, FEATURES)).astype(np.float32)
    got = model.execute({"x": x}, 7)
    assert runs == [4, 2, 1]
    want = ort_reference(mlp_model(), x)
    for name in ("y", "s"):
        assert got[name].shape[0] == 7
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    model.target = "gpu"  # the decision only: a GPU pads to the smallest bucket that holds the batch
    assert [model.pieces(n) for n in (1, 3, 5, 7)] == [[1], [4], [8], [8]]


def test_fp16_precision_compiles_the_program_in_float16(tmp_path):
    from tests.corpus.compare import REL_L2_TOL

    x = np.random.default_rng(3).standard_normal((4, FEATURES)).astype(np.float32)
    want = ort_reference(mlp_model(), x)["y"]
    fp32 = _served(tmp_path, None).execute({"x": x}, 4)["y"]
    fp16 = _served(tmp_path, "fp16").execute({"x": x}, 4)["y"]
    assert fp16.dtype == np.float32  # the config's data types stay the model's
    assert np.linalg.norm(fp16 - want) / np.linalg.norm(want) < REL_L2_TOL["fp16"]
    np.testing.assert_allclose(fp32, want, rtol=1e-5, atol=1e-5)
    assert not np.array_equal(fp16, fp32)  # float16 rounding shows: the option took effect


def test_fp16_io_precision_serves_float16_inputs_and_outputs(tmp_path):
    from tests.corpus.compare import REL_L2_TOL

    x = np.random.default_rng(4).standard_normal((4, FEATURES)).astype(np.float16)
    want = ort_reference(mlp_model(), x.astype(np.float32))["y"]
    from fusegraph.serve import config as cfg

    model = _served(tmp_path, "fp16_io")
    declared = [cfg.pb().DataType.Name(t.data_type) for t in [*model.config.input, *model.config.output]]
    assert set(declared) == {"TYPE_FP16"} and [s.datatype.config_name for s in model.inputs] == ["TYPE_FP16"]
    got = model.execute({"x": x}, 4)["y"]
    assert got.dtype == np.float16
    assert np.linalg.norm(got.astype(np.float32) - want) / np.linalg.norm(want) < REL_L2_TOL["fp16"]


def test_unknown_precision_is_a_config_error(tmp_path):
    from fusegraph.serve.errors import ModelConfigError

    with pytest.raises(ModelConfigError, match="precision 'fp12'; expected one of fp32, fp16, fp16_io"):
        _served(tmp_path, "fp12")


def test_solo_threads_compiles_a_second_program_set_that_solo_batches_run_on(tmp_path):
    import onnx

    from fusegraph.serve import config as cfg
    from fusegraph.serve.errors import ModelConfigError
    from fusegraph.serve.model import ServedModel

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    entry = cfg.single_file_entry(path)
    entry.config.instance_group.add(kind=cfg.pb().ModelInstanceGroup.KIND_CPU, count=2)
    entry.config.parameters["solo_threads"].string_value = "2"
    model = ServedModel(entry, 1, path, "cpu", cores=2)
    assert (model.threads, model.solo_threads) == (1, 2)
    for b in model.buckets:
        shared, solo = model.program(b), model.program(b, solo=True)
        assert (shared.executable.threads, solo.executable.threads) == (1, 2)
    runs = []
    for b in model.buckets:
        for solo in (False, True):
            prog = model.program(b, solo)
            prog.run = (lambda run, key: lambda inputs: runs.append(key) or run(inputs))(prog.run, (b, solo))
    x = np.random.default_rng(5).standard_normal((3, FEATURES)).astype(np.float32)
    want = ort_reference(mlp_model(), x)["y"]
    np.testing.assert_allclose(model.execute({"x": x}, 3, solo=True)["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.execute({"x": x}, 3)["y"], want, rtol=1e-5, atol=1e-5)
    assert runs == [(2, True), (1, True), (2, False), (1, False)]
    entry.config.parameters["solo_threads"].string_value = "two"
    with pytest.raises(ModelConfigError, match="parameter solo_threads 'two'"):
        ServedModel(entry, 1, path, "cpu", cores=2)
