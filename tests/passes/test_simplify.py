from fusegraph.passes import (
    eliminate_common_subexpression,
    eliminate_dead_code,
    eliminate_identity,
    propagate_constant,
    simplify_reshapes,
)
from fusegraph.passes.propagate_constant import GROWTH_LIMIT_BYTES

from .util import apply, body, program


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


def test_reductions_over_axes_of_length_one_removed():
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2,1,3]
          %1 = reduce_mean[axes=(1,)](%0) : float32[2,1,3]
          %2 = reduce_max[axes=(1,)](%1) : float32[2,1,3]
          %3 = reduce_sum[axes=(0, 1)](%2) : float32[1,1,3]
          @return(%3)
    """, eliminate_identity, eliminate_dead_code)
    # the sum over an axis of length 2 stays
    assert body(text) == ["@param[param_name='x'] : float32[2,1,3]", "reduce_sum[axes=(0, 1)](%0) : float32[1,1,3]",
                          "@return(%1)"]


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


def test_pointwise_on_broadcast_constant_folds_small():
    n = GROWTH_LIMIT_BYTES  # exp of a scalar broadcast to 4 MiB: computed once, broadcast again
    _, text = apply(f"""
        module main
          %0 = @param[param_name='x'] : float32[{n}]
          %1 = @literal[3.0] : float32[]
          %2 = broadcast[out_lens=({n},)](%1) : float32[{n}]@[0]
          %3 = exp(%2) : float32[{n}]
          %4 = add(%0, %3) : float32[{n}]
          @return(%4)
    """, propagate_constant, eliminate_dead_code)
    assert "exp" not in text and "@literal[20.085536" in text and f"broadcast[out_lens=({n},)]" in text


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


def test_algebra_identities():
    from fusegraph.passes import simplify_algebra

    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2,3]
          %1 = @literal[1.0] : float32[1]
          %2 = broadcast[out_lens=(2, 3)](%1) : float32[2,3]@[0,0]
          %3 = @literal[0.0, 0.0, 0.0] : float32[3]
          %4 = broadcast[out_lens=(2, 3)](%3) : float32[2,3]@[0,1]
          %5 = mul(%0, %2) : float32[2,3]
          %6 = add(%4, %5) : float32[2,3]
          %7 = relu(%6) : float32[2,3]
          @return(%7)
    """, simplify_algebra, eliminate_dead_code)
    assert body(text)[-2:] == ["relu(%0) : float32[2,3]", "@return(%1)"]


def test_division_becomes_a_product_only_when_the_reciprocal_is_exact():
    # x / 255 is DynamicQuantizeLinear's scale: x * (1/255) is an ulp off for some x, and the value
    # it quantizes then lands on the next integer. x / 4 is x * 0.25 exactly
    import numpy as np

    from fusegraph.passes import simplify_algebra
    from fusegraph.targets.ref.interpreter import run_module

    p, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[4096]
          %1 = @literal[255.0] : float32[1]
          %2 = broadcast[out_lens=(4096,)](%1) : float32[4096]@[0]
          %3 = div(%0, %2) : float32[4096]
          %4 = @literal[4.0] : float32[1]
          %5 = broadcast[out_lens=(4096,)](%4) : float32[4096]@[0]
          %6 = div(%0, %5) : float32[4096]
          @return(%3, %6)
    """, simplify_algebra, eliminate_dead_code)
    ops = [line.split("(")[0] for line in body(text) if line.startswith(("div", "mul"))]
    assert ops == ["div", "mul"], ops
    x = np.random.default_rng(0).random(4096, dtype=np.float32) * 100
    got = run_module(p.main, {"x": x})
    np.testing.assert_array_equal(got[0], x / np.float32(255))
    np.testing.assert_array_equal(got[1], x / np.float32(4))


def test_softmax_over_an_axis_of_length_one_is_its_arithmetic():
    # MobileViT's attention over one patch position: a reduction kernel over nothing before; the
    # same numbers as the reference's softmax, NaN for a non-finite x included
    import numpy as np

    from fusegraph.passes import simplify_algebra
    from fusegraph.targets.ref.interpreter import run_module

    text = """
        module main
          %0 = @param[param_name='x'] : float32[4,2,1]
          %1 = softmax[axis=2](%0) : float32[4,2,1]
          %2 = log_softmax[axis=2](%0) : float32[4,2,1]
          %3 = softmax[axis=1](%0) : float32[4,2,1]
          @return(%1, %2, %3)
    """
    p, out = apply(text, simplify_algebra, eliminate_dead_code)
    ops = [line.split("[")[0].split("(")[0] for line in body(out)]
    assert ops.count("softmax") == 1 and "log_softmax" not in ops and {"exp", "div", "log"} <= set(ops)
    x = np.random.default_rng(1).standard_normal((4, 2, 1)).astype(np.float32)
    x[0, 0, 0], x[1, 1, 0], x[2, 0, 0] = np.inf, -np.inf, np.nan
    for a, e in zip(run_module(p.main, {"x": x}), run_module(program(text).main, {"x": x}), strict=True):
        np.testing.assert_array_equal(a, e)


def test_batchnorm_arithmetic_folds_into_conv():
    import numpy as np

    from fusegraph.ir import DType, Program, Shape, make_op
    from fusegraph.passes import PassManager, simplify_pipeline
    from fusegraph.targets.ref.interpreter import run_module

    rng = np.random.default_rng(0)
    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [1, 3, 8, 8]))
    w = m.add_literal(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = m.add(make_op("convolution", padding=(1, 1, 1, 1), stride=(1, 1), dilation=(1, 1)), x, w)

    def channel_const(v):
        lit = m.add_literal(np.asarray(v, np.float32).reshape(4, 1, 1))
        return m.add(make_op("broadcast", out_lens=(1, 4, 8, 8)), lit)

    mean, var = rng.standard_normal(4), rng.random(4) + 0.5
    scale, bias = rng.standard_normal(4), rng.standard_normal(4)
    # y' = (y - mean) * rsqrt(var + eps) * scale + bias (the frontend folds it into one multiply-add;
    # a graph may spell it out). A division would stay one: see the next test
    t = m.add(make_op("sub"), y, channel_const(mean))
    t = m.add(make_op("mul"), t, m.add(make_op("rsqrt"), channel_const(var + 1e-5)))
    t = m.add(make_op("mul"), t, channel_const(scale))
    t = m.add(make_op("add"), t, channel_const(bias))
    m.add_return(m.add(make_op("relu"), t))
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    expected = run_module(m, feeds)[0]
    PassManager(verify="full").run(p, simplify_pipeline())
    ops = [i.op.name for i in m.instructions if not i.is_literal]
    assert ops == ["@param", "convolution", "broadcast", "add", "relu", "@return"], ops
    np.testing.assert_allclose(run_module(m, feeds)[0], expected, rtol=1e-4, atol=1e-5)


def test_zero_pad_folds_into_conv_padding():

    from fusegraph.passes import eliminate_pad

    w = ", ".join(["0.5"] * 8)
    _, text = apply(f"""
        module main
          %0 = @param[param_name='x'] : float32[1,2,5,5]
          %1 = @literal[{w}] : float32[1,2,2,2]
          %2 = pad[pads=(0, 0, 1, 0, 0, 0, 2, 1), mode='constant', value=0](%0) : float32[1,2,8,6]
          %3 = convolution[padding=(0, 1, 0, 1), stride=(1, 1), dilation=(1, 1), group=1](%2, %1) : float32[1,1,7,7]
          @return(%3)
    """, eliminate_pad, eliminate_dead_code)
    assert "pad[" not in text and "padding=(1, 1, 2, 2)" in text


def test_reflect_pad_is_kept():
    from fusegraph.passes import eliminate_pad

    w = ", ".join(["0.5"] * 8)
    _, text = apply(f"""
        module main
          %0 = @param[param_name='x'] : float32[1,2,5,5]
          %1 = @literal[{w}] : float32[1,2,2,2]
          %2 = pad[pads=(0, 0, 1, 1, 0, 0, 1, 1), mode='reflect', value=0](%0) : float32[1,2,7,7]
          %3 = convolution[padding=(0, 0, 0, 0), stride=(1, 1), dilation=(1, 1), group=1](%2, %1) : float32[1,1,6,6]
          @return(%3)
    """, eliminate_pad, eliminate_dead_code)
    assert "pad[" in text


def test_ops_on_broadcast_constants_fold():
    # a fill scattered into, then reshaped and transposed (Swin's shifted-window mask): all constant
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[2,4]
          %1 = @literal[0.0] : float32[]
          %2 = broadcast[out_lens=(4, 2)](%1) : float32[4,2]@[0,0]
          %3 = @literal[[1], [3]] : int64[2,1]
          %4 = @literal[[5.0, 6.0], [7.0, 8.0]] : float32[2,2]
          %5 = scatter_nd(%2, %3, %4) : float32[4,2]
          %6 = transpose[perm=(1, 0)](%5) : float32[2,4]@[1,2]
          %7 = add(%0, %6) : float32[2,4]
          @return(%7)
    """, propagate_constant, eliminate_dead_code)
    assert "scatter_nd" not in text and "transpose" not in text
    assert "@literal[0.0, 5.0, 0.0, 7.0, 0.0, 6.0, 0.0, 8.0] : float32[2,4]" in text


def test_repeated_value_stays_a_broadcast_scalar():
    # a reshape of a broadcast scalar folds to the scalar broadcast to the new shape, not a big literal
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[64,64]
          %1 = @literal[2.0] : float32[]
          %2 = broadcast[out_lens=(4096,)](%1) : float32[4096]@[0]
          %3 = reshape[dims=(64, 64)](%2) : float32[64,64]
          %4 = mul(%0, %3) : float32[64,64]
          @return(%4)
    """, propagate_constant, eliminate_dead_code)
    assert "reshape" not in text and "broadcast[out_lens=(64, 64)]" in text and "float32[4096]" not in text


def test_reshape_sandwich_around_pointwise_with_constant_goes():
    # Swin's shifted-window mask: viewed to [1, windows, heads, n, n], added, viewed back
    _, text = apply("""
        module main
          %0 = @param[param_name='x'] : float32[4,3,2,2]
          %1 = reshape[dims=(1, 4, 3, 2, 2)](%0) : float32[1,4,3,2,2]
          %2 = @literal[[[[1.0, 2.0], [3.0, 4.0]]], [[[5.0, 6.0], [7.0, 8.0]]], [[[1.0, 2.0], [3.0, 4.0]]], [[[5.0, 6.0], [7.0, 8.0]]]] : float32[4,1,2,2]
          %3 = broadcast[out_lens=(1, 4, 3, 2, 2)](%2) : float32[1,4,3,2,2]@[0,4,0,2,1]
          %4 = add(%1, %3) : float32[1,4,3,2,2]
          %5 = reshape[dims=(4, 3, 2, 2)](%4) : float32[4,3,2,2]
          %6 = exp(%5) : float32[4,3,2,2]
          @return(%6)
    """, simplify_reshapes, eliminate_dead_code)
    lines = body(text)
    assert not any(line.startswith("reshape") for line in lines)
    assert "@literal[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0] : float32[4,1,2,2]" in lines
    assert "add(%0, %2) : float32[4,3,2,2]" in lines


def test_reshape_sandwich_kept_when_the_shapes_differ_or_the_value_is_shared():
    for tail, returned in (("%5 = reshape[dims=(12, 4)](%4) : float32[12,4]", "%5"),  # not x's shape again
                           ("%5 = reshape[dims=(4, 3, 2, 2)](%4) : float32[4,3,2,2]", "%5, %4")):  # add read twice
        _, text = apply(f"""
            module main
              %0 = @param[param_name='x'] : float32[4,3,2,2]
              %1 = reshape[dims=(1, 4, 3, 2, 2)](%0) : float32[1,4,3,2,2]
              %2 = @literal[2.0] : float32[]
              %3 = broadcast[out_lens=(1, 4, 3, 2, 2)](%2) : float32[1,4,3,2,2]@[0,0,0,0,0]
              %4 = add(%1, %3) : float32[1,4,3,2,2]
              {tail}
              @return({returned})
        """, simplify_reshapes, eliminate_dead_code)
        adds = [line for line in body(text) if line.startswith("add(")]
        assert len(adds) == 1 and adds[0].endswith(": float32[1,4,3,2,2]"), text
