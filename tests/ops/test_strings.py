"""String ops (StringConcat, StringSplit, StringNormalizer, RegexFullMatch) against ONNX Runtime."""

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ParseError
from tests.util import make_model, node_check, run_fusegraph


def strings(*xs, shape=None):
    a = np.array(list(xs), dtype=object)
    return a.reshape(shape) if shape is not None else a


def test_concat_broadcasts():
    node_check("StringConcat", {"x": strings("cat", "", "的"), "y": strings("s")}, opset=20)
    node_check("StringConcat", {"x": strings("a", "b", shape=(2, 1)), "y": strings("x", "y", "z")}, opset=20)
    node_check("StringConcat", {"x": np.array("cat", dtype=object), "y": np.array("s", dtype=object)}, opset=20)


@pytest.mark.parametrize("attrs", [{}, {"delimiter": ""}, {"delimiter": "-"}, {"delimiter": "--"},
                                   {"maxsplit": 1}, {"maxsplit": 0}, {"delimiter": "-", "maxsplit": 2}])
def test_split(attrs):
    x = strings(" a b  c ", "o-n--x-", "  ", "a--b--c", "no_delim")
    node_check("StringSplit", {"x": x}, attrs, n_outputs=2, opset=20)


def test_split_empty_string_on_a_delimiter_is_one_empty_substring():
    # As ONNX's reference (Python's str.split); ONNX Runtime gives no substring.
    x = strings("", "a-b")
    model = make_model([helper.make_node("StringSplit", ["x"], ["y", "n"], delimiter="-")], {"x": x},
                       ["y", "n"], opset=20)
    y, n = run_fusegraph(model, {"x": x})
    assert y.tolist() == [["", ""], ["a", "b"]] and n.tolist() == [1, 2]


def test_split_2d_and_empty():
    node_check("StringSplit", {"x": strings("a b", "c", "d e f", "", shape=(2, 2))}, n_outputs=2, opset=20)
    got = run_fusegraph(make_model([helper.make_node("StringSplit", ["x"], ["y", "n"])],
                                   {"x": strings()}, ["y", "n"], opset=20), {"x": strings()})
    assert got[0].shape == (0, 0) and got[1].shape == (0,) and got[1].dtype == np.int64


# ONNX Runtime builds an en_US.UTF-8 locale for any case change and for case-insensitive stop words;
# this machine has none, so only case-sensitive, unchanged-case normalizers run there.
@pytest.mark.parametrize("stopwords", [None, ["monday"], ["Monday", "tuesday"]])
def test_normalizer_case_sensitive(stopwords):
    attrs = {"is_case_sensitive": 1, **({"stopwords": stopwords} if stopwords else {})}
    node_check("StringNormalizer", {"x": strings("monday", "Tuesday", "MONDAY")}, attrs, opset=10)
    node_check("StringNormalizer", {"x": strings("monday", "Tuesday", "MONDAY", shape=(1, 3))}, attrs, opset=10)


def normalize(x, **attrs):
    model = make_model([helper.make_node("StringNormalizer", ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=10)
    return run_fusegraph(model, {"x": x})[0].tolist()


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_normalizer_changes_case_without_a_locale(action):
    # fusegraph's case mapping is Unicode's (str.lower/upper): no locale needed.
    x = strings("Monday", "tuesday", "Straße", "ÉTÉ", shape=(1, 4))
    change = str.lower if action == "LOWER" else str.upper
    assert normalize(x, case_change_action=action, stopwords=["MONDAY"]) == \
        [[change(s) for s in ["tuesday", "Straße", "ÉTÉ"]]]


def test_normalizer_stopwords_ignore_case_by_default():
    assert normalize(strings("monday", "Tuesday", "MONDAY"), stopwords=["Monday"]) == ["Tuesday"]


def test_normalizer_all_dropped_gives_one_empty_string():
    assert normalize(strings("a", "A"), stopwords=["a"]) == [""]
    node_check("StringNormalizer", {"x": strings("a", "a", shape=(1, 2))},
               {"stopwords": ["a"], "is_case_sensitive": 1}, opset=10)


@pytest.mark.parametrize("pattern", [r"www\.[\w.-]+\.\bcom\b", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
                                     r"[a-c]*", r"\d+", r"(?i)ab+", r"\w+"])  # \w is ASCII, as in RE2
def test_regex_full_match(pattern):
    x = strings("www.google.com", "account@gmail.com", "abcabc", "", "123", "ABbb", "é1", shape=(7, 1))
    node_check("RegexFullMatch", {"x": x}, {"pattern": pattern}, opset=20)


def test_bad_regex_fails_at_parse_time():
    model = make_model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern="a(")],
                       {"x": strings("a")}, ["y"], opset=20)
    with pytest.raises(ParseError, match="regular expression"):
        fusegraph.parse_onnx(model)
