"""onnx/wire.py: a model's bytes split into its message and its initializers' raw data, read as the
whole message would have been read (onnx/loading.py read_model, onnx/node.py tensor_to_array)."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

import fusegraph
from fusegraph.errors import ModelLoadError
from fusegraph.onnx.loading import load_model, read_model
from fusegraph.onnx.node import tensor_to_array
from fusegraph.onnx.wire import SPLIT_MIN_BYTES, _encode_varint, split_weights
from tests.util import make_model

RNG = np.random.default_rng(0)
WEIGHTS = {  # one of each plain type, large enough to be split, odd lengths to misalign the next
    "f32": RNG.standard_normal((3, 7, 13)).astype(np.float32),
    "f16": RNG.standard_normal(577).astype(np.float16),
    "bf16": RNG.standard_normal(531).astype(ml_dtypes.bfloat16),
    "f64": RNG.standard_normal(131),
    "i8": RNG.integers(-128, 127, 1101).astype(np.int8),
    "u8": RNG.integers(0, 255, 1099).astype(np.uint8),
    "i16": RNG.integers(-999, 999, 541).astype(np.int16),
    "u16": RNG.integers(0, 999, 543).astype(np.uint16),
    "i32": RNG.integers(-999, 999, 283).astype(np.int32),
    "u32": RNG.integers(0, 999, 285).astype(np.uint32),
    "i64": RNG.integers(-999, 999, 137),
    "u64": RNG.integers(0, 999, 139).astype(np.uint64),
    "b": RNG.integers(0, 2, 1071).astype(bool),
    "small": np.arange(100, dtype=np.int64),  # under SPLIT_MIN_BYTES: stays in the message
}


def _model(weights=WEIGHTS) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [k], [f"o_{k}"]) for k in weights]
    nodes.append(helper.make_node("Relu", ["x"], ["y"]))
    outs = ["y", *(f"o_{k}" for k in weights)]
    return make_model(nodes, {"x": np.zeros((2,), np.float32)}, outs, dict(weights))


def test_every_plain_initializer_reads_as_numpy_helper_reads_it():
    data = _model().SerializeToString()
    proto, weights = read_model(data)
    whole = onnx.load_from_string(data)
    split = {k for k, t in enumerate(whole.graph.initializer) if len(t.raw_data) >= SPLIT_MIN_BYTES}
    assert set(weights.spans) == split and len(split) == len(WEIGHTS) - 1
    for k, (cut, full) in enumerate(zip(proto.graph.initializer, whole.graph.initializer)):
        got, want = tensor_to_array(cut, weights.get(k)), numpy_helper.to_array(full)
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
        assert got.flags.aligned and not got.flags.writeable  # as numpy_helper's
        if k in split:  # the message lost only the raw data
            assert not cut.HasField("raw_data")
            cut.raw_data = bytes(weights.get(k))
        assert cut == full
    proto.graph.ClearField("initializer")
    whole.graph.ClearField("initializer")
    assert proto == whole


def test_a_model_from_bytes_computes_what_its_message_computes(tmp_path):
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    x = {"x": np.array([-1.0, 2.0], np.float32)}
    want = fusegraph.parse_onnx(model).compile("ref").run(x)
    for source in (model.SerializeToString(), str(path), bytearray(model.SerializeToString())):
        got = fusegraph.parse_onnx(source).compile("ref").run(x)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)


def test_what_is_not_plain_or_not_alone_stays_in_the_message():
    model = _model({})
    model.graph.initializer.extend([
        helper.make_tensor("i4", onnx.TensorProto.INT4, [3000], RNG.integers(-8, 7, 3000)),  # packed
        helper.make_tensor("fd", onnx.TensorProto.FLOAT, [1000], RNG.standard_normal(1000)),  # float_data
        numpy_helper.from_array(np.array(["a" * 2000]), "s"),
        numpy_helper.from_array(RNG.standard_normal(400).astype(np.float32), "plain"),
        numpy_helper.from_array(RNG.standard_normal(400).astype(np.float32), "twice"),
    ])
    data = model.SerializeToString()
    assert set(split_weights(data)[1]) == {3, 4}
    # a second raw_data field: protobuf keeps the last; the split must not pick either
    last = numpy_helper.from_array(RNG.standard_normal(400).astype(np.float32)).raw_data
    data = _with_extra_field(data, "twice", _encode_varint(9 << 3 | 2) + _encode_varint(len(last)) + last)
    assert set(split_weights(data)[1]) == {3}
    proto, weights = read_model(data)
    for k, want in enumerate(onnx.load_from_string(data).graph.initializer):
        got = tensor_to_array(proto.graph.initializer[k], weights.get(k))
        assert got.tolist() == numpy_helper.to_array(want).tolist()
    assert numpy_helper.to_array(proto.graph.initializer[4]).tobytes() == last


def _with_extra_field(data: bytes, name: str, field: bytes) -> bytes:
    """`data` with `field` appended to the initializer named `name` (re-encoding the lengths)."""
    model = onnx.load_from_string(data)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.ClearField("initializer")
    graph_rest = out.graph.SerializeToString()
    inits = b""
    for t in model.graph.initializer:
        body = t.SerializeToString() + (field if t.name == name else b"")
        inits += _encode_varint(5 << 3 | 2) + _encode_varint(len(body)) + body
    graph = graph_rest + inits
    out.ClearField("graph")
    return out.SerializeToString() + _encode_varint(7 << 3 | 2) + _encode_varint(len(graph)) + graph


def test_padded_length_prefixes_are_kept_as_written():
    # a writer may pad a varint (0x80 bytes): the split re-encodes lengths it changes, not others
    model = _model({"w": RNG.standard_normal(300).astype(np.float32)})
    model.graph.ClearField("initializer")
    t = numpy_helper.from_array(RNG.standard_normal(300).astype(np.float32), "w").SerializeToString()
    padded = bytearray(_encode_varint(len(t)))
    padded[-1] |= 0x80
    padded.append(0)  # the same length in one byte more
    graph = model.graph.SerializeToString() + bytes([5 << 3 | 2]) + padded + t
    model.ClearField("graph")
    data = model.SerializeToString() + _encode_varint(7 << 3 | 2) + _encode_varint(len(graph)) + graph
    proto, weights = read_model(data)
    assert list(weights.spans) == [0]
    want = numpy_helper.to_array(onnx.load_from_string(data).graph.initializer[0])
    assert tensor_to_array(proto.graph.initializer[0], weights.get(0)).tobytes() == want.tobytes()


@pytest.mark.parametrize("cut", [1, 9, 100, 400])
def test_truncated_bytes_are_the_load_error_they_were(cut):
    data = _model().SerializeToString()[:-cut]
    assert split_weights(data) is None  # the last field overruns: protobuf's parse says so
    with pytest.raises(ModelLoadError):
        fusegraph.parse_onnx(data)


def test_raw_data_of_the_wrong_size_names_the_initializer():
    model = _model({"w": RNG.standard_normal(300).astype(np.float32)})
    model.graph.initializer[0].dims[:] = [301]
    with pytest.raises(ModelLoadError, match=r"initializer 'w'.* cannot be read: its raw data holds 1200 bytes, its dims 1204"):
        fusegraph.parse_onnx(model.SerializeToString())


def test_several_graph_fields_are_parsed_whole():
    # protobuf merges them: the split leaves that to it
    model = _model({"w": RNG.standard_normal(300).astype(np.float32)})
    data = model.SerializeToString()
    extra = onnx.GraphProto(doc_string="merged").SerializeToString()
    twice = data + _encode_varint(7 << 3 | 2) + _encode_varint(len(extra)) + extra
    assert split_weights(data) is not None and split_weights(twice) is None
    assert onnx.load_from_string(twice).graph.doc_string == "merged"
    fusegraph.parse_onnx(twice)


def _outcome(read, data: bytes) -> tuple:
    """("ok", each initializer's dtype, shape and bytes) of read(data), or ("error",)."""
    try:
        tensors = read(data)
    except (ModelLoadError, onnx.onnx_cpp2py_export.checker.ValidationError, DecodeError, ValueError, TypeError,
            fusegraph.errors.ParseError):
        return ("error",)
    return ("ok", [(a.dtype.str, a.shape, a.tobytes()) for a in tensors])


def test_damaged_bytes_read_as_protobuf_reads_them_whole():
    """Differential: random damage to a model's bytes (bytes flipped, cut out, doubled) reads the same
    through the split as through protobuf's whole parse and numpy_helper: the same weights, or an
    error in both."""
    import random

    data = _model().SerializeToString()
    rng, splits = random.Random(7), 0

    def whole(d):
        proto = load_model(d)  # protobuf's parse of all of it, with the loader's checks
        return [tensor_to_array(t) for t in proto.graph.initializer]

    def split(d):
        proto, weights = read_model(d)
        return [tensor_to_array(t, weights.get(k)) for k, t in enumerate(proto.graph.initializer)]

    for _ in range(400):
        d = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(d))
            how = rng.choice(["flip", "cut", "double"])
            if how == "flip":
                d[at] ^= 1 << rng.randrange(8)
            elif how == "cut":
                del d[at:at + rng.randint(1, 8)]
            else:
                d[at:at] = d[at:at + rng.randint(1, 8)]
        d = bytes(d)
        splits += split_weights(d) is not None
        assert _outcome(split, d) == _outcome(whole, d)
    assert splits >= 50  # damage the walk takes apart (inside a weight, a node): the split was taken
