from fusegraph.passes import (
    eliminate_common_subexpression,
    eliminate_dead_code,
    eliminate_identity,
    propagate_constant,
    simplify_reshapes,
)
from fusegraph.passes.propagate_constant import GROWTH_LIMIT_BYTES

from .util import apply, body


def test_dead_code_removed_params_kept():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2]
          %1 = @param[param_name='unused'] : float32[2]
          %2 = exp(%0) : float32[2]
          %3 = relu(%0) : float32[2]
          @return(%3)
    """, eliminate_dead_code)
    assert body(text) == ["@param[param_name='x'] : float32[2]", "@param[param_name='unused'] : float32[2]",
                          "relu(%0) : float32[2]", "@return(%3)".replace("%3", "%2")]


def test_identity_ops_removed():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2,3]
          %1 = identity(%0) : float32[2,3]
          %2 = convert[to=float32](%1) : float32[2,3]
          %3 = reshape[dims=(2, 3)](%2) : float32[2,3]
          %4 = transpose[perm=(0, 1)](%3) : float32[2,3]
          %5 = relu(%4) : float32[2,3]
          @return(%5)
    """, eliminate_identity, eliminate_dead_code)
    assert body(text) == ["@param[param_name='x'] : float32[2,3]", "relu(%0) : float32[2,3]", "@return(%1)"]


def test_cse_merges_equal_instructions_and_small_literals():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2]
          %1 = @literal[1.0, 2.0] : float32[2]
          %2 = @literal[1.0, 2.0] : float32[2]
          %3 = add(%0, %1) : float32[2]
          %4 = add(%0, %2) : float32[2]
          %5 = mul(%3, %4) : float32[2]
          @return(%5)
    """, eliminate_common_subexpression, eliminate_dead_code)
    assert body(text)[-2:] == ["mul(%2, %2) : float32[2]", "@return(%3)"]


def test_different_attributes_are_not_merged():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2]
          %1 = leaky_relu[alpha=0.1](%0) : float32[2]
          %2 = leaky_relu[alpha=0.2](%0) : float32[2]
          %3 = add(%1, %2) : float32[2]
          @return(%3)
    """, eliminate_common_subexpression, eliminate_dead_code)
    assert len(body(text)) == 5


def test_constants_folded():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2]
          %1 = @literal[1.0, 4.0] : float32[2]
          %2 = sqrt(%1) : float32[2]
          %3 = add(%2, %2) : float32[2]
          %4 = mul(%0, %3) : float32[2]
          @return(%4)
    """, propagate_constant, eliminate_dead_code)
    assert body(text) == ["@param[param_name='x'] : float32[2]", "@literal[2.0, 4.0] : float32[2]",
                          "mul(%0, %1) : float32[2]", "@return(%2)"]


def test_huge_broadcast_not_folded():
    n = GROWTH_LIMIT_BYTES  # a scalar broadcast to 4 MiB stays a broadcast
    _, text = apply(f"""
        module main
          %0 = @param[param_name='x'] : float32[{n}]
          %1 = @literal[3.0] : float32[]
          %2 = broadcast[out_lens=({n},)](%1) : float32[{n}]@[0]
          %3 = exp(%2) : float32[{n}]
          %4 = add(%0, %3) : float32[{n}]
          @return(%4)
    """, propagate_constant, eliminate_dead_code, check=False)
    assert "broadcast" in text and "exp" in text


def test_reshape_and_transpose_chains_collapse():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2,3,4]
          %1 = reshape[dims=(6, 4)](%0) : float32[6,4]
          %2 = reshape[dims=(24,)](%1) : float32[24]
          %3 = transpose[perm=(1, 0, 2)](%0) : float32[3,2,4]@[4,12,1]
          %4 = transpose[perm=(1, 0, 2)](%3) : float32[2,3,4]
          %5 = transpose[perm=(2, 0, 1)](%0) : float32[4,2,3]@[1,12,4]
          %6 = transpose[perm=(0, 2, 1)](%5) : float32[4,3,2]@[1,4,12]
          @return(%2, %4, %6)
    """, simplify_reshapes, eliminate_dead_code)
    lines = body(text)
    assert "reshape[dims=(24,)](%0) : float32[24]" in lines
    assert "transpose[perm=(2, 1, 0)](%0) : float32[4,3,2]@[1,4,12]" in lines
    assert lines[-1] == "@return(%1, %0, %2)"  # the double transpose became x itself
