"""DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix against ONNX Runtime; constant
windows and filter banks folded to literals; shapes for lengths known only at run time."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import fusegraph
from fusegraph.errors import ParseError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Dim, Shape
from tests.util import assert_close, make_model, node_check, run_fusegraph

rng = np.random.default_rng(0)
REAL = rng.standard_normal((2, 8, 3, 1)).astype(np.float32)
COMPLEX = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
TOL = {"rtol": 1e-4, "atol": 1e-4}


def i64(v):
    return np.array(v, np.int64)


def op_names(model, **kw):
    return [i.op.name for i in fusegraph.parse_onnx(model, **kw).main.instructions]


# -- DFT --------------------------------------------------------------------------------------------
# (inverse, onesided, input): forward real/complex, one-sided forward (real only), inverse, IRFFT
MODES = [(0, 0, REAL), (0, 0, COMPLEX), (0, 1, REAL), (1, 0, COMPLEX), (1, 1, COMPLEX)]


# IRFFT with a dft_length: test_irfft_with_length
@pytest.mark.parametrize("inverse,onesided,x,length", [m + (n,) for m in MODES for n in (None, 10)
                                                       if not (m[0] and m[1] and n)])
def test_dft_17(inverse, onesided, x, length):
    inits = {"len": i64(length)} if length is not None else None
    node_check("DFT", {"x": x}, {"axis": 1, "inverse": inverse, "onesided": onesided}, initializers=inits,
               opset=17, **TOL)


@pytest.mark.parametrize("inverse,onesided,x", MODES)
def test_dft_20_axis_input(inverse, onesided, x):
    names = ["x", "len", "axis"] if not (inverse and onesided) else ["x", "", "axis"]
    node_check("DFT", {"x": x}, {"inverse": inverse, "onesided": onesided},
               initializers={"len": i64(6), "axis": i64(-3)}, input_names=names, opset=20, **TOL)


def test_dft_20_default_axis_and_axis_at_run_time():
    node_check("DFT", {"x": REAL}, {}, opset=20, **TOL)
    node_check("DFT", {"x": REAL, "axis": i64(2)}, {"onesided": 1}, input_names=["x", "", "axis"], opset=20, **TOL)


def test_irfft_with_length():
    """The ONNX reference (numpy.fft.irfft: the first length//2+1 bins); ONNX Runtime reads it otherwise."""
    ins = {"x": COMPLEX}
    node = helper.make_node("DFT", ["x", "len"], ["y"], axis=1, inverse=1, onesided=1)
    model = make_model([node], ins, ["y"], {"len": i64(6)}, opset=17)
    assert_close(run_fusegraph(model, ins), ReferenceEvaluator(model).run(None, ins), **TOL)


def test_dft_shapes():
    x = Shape.of(DType.float32, [2, 8, 3, 1])
    assert make_op("dft", axis=1, onesided=True).infer_shape([x]).lens == (2, 5, 3, 2)
    assert make_op("dft", axis=1, inverse=True, onesided=True).infer_shape([x]).lens == (2, 14, 3, 1)
    # an axis known at run time: any signal dim may be the transformed one
    out = make_op("dft", axis=None, onesided=True).infer_shape([x, Shape.of(DType.int64, [])])
    assert out.dims == (Dim(2, 2), Dim(5, 8), Dim(2, 3), Dim.fixed(2))


def test_dft_errors():
    model = make_model([helper.make_node("DFT", ["x"], ["y"], axis=3)], {"x": REAL}, ["y"], opset=17)
    with pytest.raises(ParseError, match="axis 3 out of range"):
        fusegraph.parse_onnx(model)
    model = make_model([helper.make_node("DFT", ["x"], ["y"], onesided=1)], {"x": COMPLEX}, ["y"], opset=17)
    with pytest.raises(ParseError, match="real input"):
        fusegraph.parse_onnx(model)


# -- STFT -------------------------------------------------------------------------------------------
SIGNAL = rng.standard_normal((2, 64, 1)).astype(np.float32)
HANN = np.hanning(16).astype(np.float32)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_window(onesided):
    node_check("STFT", {"s": SIGNAL}, {"onesided": onesided}, initializers={"step": i64(8), "w": HANN},
               opset=17, **TOL)


def test_stft_frame_length_without_window():
    node_check("STFT", {"s": SIGNAL}, {}, initializers={"step": i64(6), "len": i64(16)},
               input_names=["s", "step", "", "len"], opset=17, **TOL)


def test_stft_step_and_length_at_run_time():
    node_check("STFT", {"s": SIGNAL, "step": i64(5), "len": i64(12)}, {}, input_names=["s", "step", "", "len"],
               opset=17, **TOL)


def test_stft_rank_2_real_signal():
    # torch.stft exports a [batch, length] signal with no trailing 1; ONNX Runtime reads it as real
    node_check("STFT", {"s": SIGNAL[..., 0]}, {}, initializers={"step": i64(8), "w": HANN}, opset=17, **TOL)


def test_stft_complex_signal():
    node_check("STFT", {"s": rng.standard_normal((1, 32, 2)).astype(np.float32)}, {"onesided": 0},
               initializers={"step": i64(4), "w": np.ones(8, np.float32)}, opset=17, **TOL)


# -- windows and the mel filter bank ----------------------------------------------------------------
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_window(op, periodic, dtype):
    node_check(op, {"n": np.array(9, np.int32)}, {"periodic": periodic, "output_datatype": dtype}, opset=17)


def test_window_of_constant_size_is_a_literal():
    node = helper.make_node("HannWindow", ["n"], ["y"])
    constant = make_model([node], {}, ["y"], {"n": i64(10)}, opset=17)
    assert "cosine_window" not in op_names(constant)
    assert "cosine_window" in op_names(make_model([node], {"n": i64(10)}, ["y"], opset=17))


@pytest.mark.parametrize("args", [(8, 16, 8000, 0.0, 4000.0), (10, 64, 16000, 100.0, 7000.0),
                                  (5, 31, 22050, 30.0, 11000.0)])
def test_mel_weight_matrix(args):
    ins = {k: np.array(v, np.int64 if k < "d" else np.float32) for k, v in zip("abcde", args)}
    node_check("MelWeightMatrix", ins, {}, opset=17)


def test_mel_weight_matrix_constant_float64():
    inits = {k: np.array(v, np.int32 if k < "d" else np.float32) for k, v in zip("abcde", (6, 32, 8000, 50., 3500.))}
    node = helper.make_node("MelWeightMatrix", list(inits), ["y"], output_datatype=TensorProto.DOUBLE)
    model = make_model([node], {}, ["y"], inits, opset=17)
    assert "mel_weight_matrix" not in op_names(model)
    node_check("MelWeightMatrix", {}, {"output_datatype": TensorProto.DOUBLE}, initializers=inits, opset=17)
