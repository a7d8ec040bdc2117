"""`matmul_nbits` and `matmul_bnb4` (ops/nbits.py): shape rules, references against a plain per-element
dequantization written here, and the IR text round trip (the packed weights survive it)."""

import numpy as np
import pytest

from fusegraph.errors import ShapeError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.program import Program
from fusegraph.ir.shape import Shape
from fusegraph.ir.text import parse_program, print_program
from fusegraph.ops.nbits import BNB4_TABLES

rng = np.random.default_rng(5)
F32, U8 = DType.float32, DType.uint8


def slow_nbits(a, b, scales, zp, k, n, block):
    """W[n, k] = (q - zp) * scale one element at a time: code k of row n is nibble k % 2 (low first)
    of byte k // 2 of the row's blocks."""
    blocks = -(-k // block)
    row = b.reshape(n, -1)
    w = np.zeros((n, k), np.float32)
    for i in range(n):
        for j in range(k):
            q = (int(row[i, j // 2]) >> (4 * (j % 2))) & 15
            g = j // block
            if zp is None:
                z = 8.0
            elif zp.dtype == np.uint8:
                per_row = zp.size // n
                z = float((int(zp[i * per_row + g // 2]) >> (4 * (g % 2))) & 15)
            else:
                z = float(zp[i * blocks + g])
            w[i, j] = np.float32(np.float32(q) - np.float32(z)) * scales[i * blocks + g]
    return a.astype(np.float64) @ w.T.astype(np.float64)


@pytest.mark.parametrize("zero_points", ["none", "packed", "float"])
def test_nbits_reference(zero_points):
    k, n, block = 40, 5, 16
    blocks = 3
    b = rng.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8)
    scales = rng.uniform(0.1, 1, n * blocks).astype(np.float32)
    zp = {"none": None, "packed": rng.integers(0, 256, n * 2).astype(np.uint8),
          "float": rng.uniform(0, 15, n * blocks).astype(np.float32)}[zero_points]
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    op = make_op("matmul_nbits", k=k, n=n, bits=4, block_size=block)
    got = op.compute([a, b, scales] + ([] if zp is None else [zp]))
    assert got.shape == (2, 3, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, slow_nbits(a, b, scales, zp, k, n, block), rtol=1e-5, atol=1e-5)


def test_bnb4_reference():
    k, n, block = 32, 3, 16
    b = rng.integers(0, 256, n * k // 2).astype(np.uint8)
    absmax = rng.uniform(0.5, 2, n * k // block).astype(np.float32)
    a = rng.standard_normal((4, k)).astype(np.float32)
    flat = [(int(b[i // 2]) >> (4 if i % 2 == 0 else 0)) & 15 for i in range(n * k)]  # high nibble first
    w = np.array([BNB4_TABLES[1][c] * absmax[i // block] for i, c in enumerate(flat)], np.float32).reshape(n, k)
    got = make_op("matmul_bnb4", k=k, n=n, block_size=block, quant_type=1).compute([a, b, absmax])
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes,why", [
    ([Shape.of(F32, [2, 40]), Shape.of(U8, [5, 3, 8]), Shape.of(F32, [14])], "scales"),
    ([Shape.of(F32, [2, 40]), Shape.of(U8, [5, 3, 7]), Shape.of(F32, [15])], "b must be uint8"),
    ([Shape.of(F32, [2, 41]), Shape.of(U8, [5, 3, 8]), Shape.of(F32, [15])], "a must be float"),
    ([Shape.of(F32, [2, 40]), Shape.of(U8, [5, 3, 8]), Shape.of(F32, [15]), Shape.of(U8, [15])], "zero points"),
    ([Shape.of(F32, [2, 40]), Shape.of(U8, [5, 3, 8]), Shape.of(DType.float16, [15])], "scales"),
])
def test_nbits_shape_errors(shapes, why):
    with pytest.raises(ShapeError, match=why):
        make_op("matmul_nbits", k=40, n=5, bits=4, block_size=16).compute_shape(shapes)


def test_nbits_shape():
    op = make_op("matmul_nbits", k=40, n=5, bits=4, block_size=16)
    out = op.compute_shape([Shape.of(F32, [2, 7, 40]), Shape.of(U8, [120]), Shape.of(F32, [15]), Shape.of(U8, [10])])
    assert out == Shape.of(F32, [2, 7, 5])
    with pytest.raises(ShapeError, match="k a multiple of block_size"):
        make_op("matmul_bnb4", k=40, n=5, block_size=16).compute_shape(
            [Shape.of(F32, [2, 40]), Shape.of(U8, [100]), Shape.of(F32, [13])])


def test_nbits_text_round_trip():
    """The op and its packed uint8 literal print and parse back unchanged."""
    p = Program()
    m = p.main
    a = m.add_parameter("a", Shape.of(F32, [1, 40]))
    b = m.add_literal(rng.integers(0, 256, (5, 3, 8)).astype(np.uint8))
    s = m.add_literal(rng.uniform(0.1, 1, 15).astype(np.float32))
    m.add_return(m.add(make_op("matmul_nbits", k=40, n=5, bits=4, block_size=16), a, b, s))
    text = print_program(p)
    assert "matmul_nbits" in text and "block_size=16" in text
    assert print_program(parse_program(text)) == text
