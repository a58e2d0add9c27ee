"""Elementwise math ops: values against NumPy, static shapes and dtypes, errors, gradients."""
import math
import warnings

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph

RNG = np.random.default_rng(1234)
SHAPES = [(), (1,), (7,), (3, 37)]  # scalar, 1, odd, and a larger odd count (111)


def run(fetches, feed=None):
    with gc.Session() as sess:
        return sess.run(fetches, feed)


def erf_series(x):
    """erf by its Maclaurin series (fine for |x| <= 2.5 in float64)."""
    x = np.asarray(x, dtype=np.float64)
    total, term = np.zeros_like(x), x.copy()
    for n in range(80):
        total += term / (2 * n + 1)
        term = -term * x * x / (n + 1)
    return 2 / math.sqrt(math.pi) * total


def any_reals(shape):
    return RNG.uniform(-3, 3, shape)


def positive(shape):
    return RNG.uniform(0.5, 3, shape)


def above_minus_one(shape):
    return RNG.uniform(-0.9, 3, shape)


# public function, reference written here, input domain
UNARY = {
    "negative": (gc.negative, lambda x: 0 - x, any_reals),
    "abs": (gc.abs, lambda x: np.where(x < 0, -x, x), any_reals),
    "sign": (gc.sign, lambda x: (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype), any_reals),
    "square": (gc.square, lambda x: x * x, any_reals),
    "sqrt": (gc.sqrt, lambda x: x ** 0.5, positive),
    "rsqrt": (gc.rsqrt, lambda x: x ** -0.5, positive),
    "reciprocal": (gc.reciprocal, lambda x: np.ones_like(x) / x, positive),
    "exp": (gc.exp, np.exp, any_reals),
    "log": (gc.log, np.log, positive),
    "log1p": (gc.log1p, np.log1p, above_minus_one),
    "expm1": (gc.expm1, np.expm1, any_reals),
    "tanh": (gc.tanh, np.tanh, any_reals),
    "sigmoid": (gc.sigmoid, lambda x: 1 / (1 + np.exp(-x)), any_reals),
    "sin": (gc.sin, np.sin, any_reals),
    "cos": (gc.cos, np.cos, any_reals),
    "floor": (gc.floor, np.floor, any_reals),
    "ceil": (gc.ceil, np.ceil, any_reals),
    "erf": (gc.erf, erf_series, any_reals),
    "erfc": (gc.erfc, np.vectorize(math.erfc), any_reals),
}


# ------------------------------------------------------------------------- unary values
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_values(name, shape, dtype):
    fn, ref, domain = UNARY[name]
    x = domain(shape).astype(dtype)
    got = run_graph(fn, x)
    assert got.dtype == dtype and got.shape == shape
    want = ref(x.astype(np.float64))
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("fn, ref", [
    (gc.negative, lambda x: -x), (gc.abs, lambda x: np.where(x < 0, -x, x)),
    (gc.sign, lambda x: (x > 0).astype(np.int32) - (x < 0)), (gc.square, lambda x: x * x)])
def test_integer_unary_ops(fn, ref):
    x = np.array([-7, -1, 0, 3, 11], dtype=np.int32)
    got = run_graph(fn, x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref(x))


def test_round_is_bankers_rounding_and_identity_on_integers():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6], dtype=np.float32)
    np.testing.assert_array_equal(run_graph(gc.round, x), [0, 2, 2, 0, -2, -2, 2, 3, -3])
    i = gc.constant([1, 2])
    assert gc.round(i) is i


def test_sigmoid_is_accurate_and_quiet_in_the_tails():
    x = np.array([-1000.0, -745.0, -40.0, 0.0, 40.0, 1000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_graph(gc.sigmoid, x)
        got32 = run_graph(gc.sigmoid, x.astype(np.float32))
    assert got[0] == 0.0 and got[-1] == 1.0 and got[3] == 0.5
    np.testing.assert_allclose(got[2], math.exp(-40) / (1 + math.exp(-40)), rtol=1e-14)
    assert got[1] > 0  # exp(-745) is the smallest subnormal, not flushed to 0
    assert got32.dtype == np.float32 and np.all(np.isfinite(got32))


def test_erf_special_values_and_tails():
    x = np.array([-np.inf, -6.0, 0.0, 4.0, np.inf, np.nan])
    got = run_graph(gc.erf, x)
    np.testing.assert_array_equal(got[[0, 1, 2, 4]], [-1.0, -1.0, 0.0, 1.0])
    np.testing.assert_allclose(1 - got[3], 1.541725790028002e-08, rtol=1e-9)  # erfc(4)
    assert np.isnan(got[5])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erfc_keeps_its_relative_accuracy_in_the_tails(dtype):
    # 1 - erf(x) would be 0 from x = 6 on; erfc is tiny there, and 2 - tiny for x < 0
    x = np.array([-np.inf, -30.0, -6.0, -1.0, -0.3, -0.0, 0.1, 0.5, 1.0, 2.0, 4.0, 6.0, 9.0,
                  10.0, 20.0, 26.0, 27.0, 30.0, np.inf], dtype)
    got = run_graph(gc.erfc, x)
    assert got.dtype == dtype
    want = np.array([math.erfc(float(v)) for v in x]).astype(dtype)  # libm's double erfc
    np.testing.assert_array_max_ulp(got, want, maxulp=4 if dtype == np.float64 else 1)
    assert np.isnan(run_graph(gc.erfc, np.array([np.nan], dtype)))[0]


@pytest.mark.parametrize("fn, x, want", [
    (gc.log, [0.0, -1.0], [-np.inf, np.nan]),
    (gc.sqrt, [-1.0, 0.0], [np.nan, 0.0]),
    (gc.rsqrt, [0.0], [np.inf]),
    (gc.reciprocal, [0.0, -0.0], [np.inf, -np.inf]),
    (gc.exp, [1000.0], [np.inf]),
    (gc.log1p, [-1.0], [-np.inf]),
])
def test_inf_and_nan_results_without_numpy_warnings(fn, x, want):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_graph(fn, np.array(x, dtype=np.float32))
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))


def test_unary_static_shapes_pass_through_unknown_dims_and_rank():
    a = gc.placeholder(gc.float32, [None, 3])
    b = gc.placeholder(gc.float64)
    assert gc.exp(a).shape.as_list() == [None, 3]
    assert gc.tanh(b).shape.ndims is None and gc.tanh(b).dtype == gc.float64
    assert gc.sqrt(np.float64(4.0)).dtype == gc.float64


@pytest.mark.parametrize("fn", [gc.sqrt, gc.exp, gc.log, gc.sigmoid, gc.erf, gc.floor, gc.tanh])
def test_float_only_unary_ops_reject_integers(fn):
    with pytest.raises(TypeError, match="DataType int32 not in list of allowed values"):
        fn(gc.constant([1, 2]))


@pytest.mark.parametrize("fn", [gc.abs, gc.negative, gc.square, gc.sign])
def test_numeric_unary_ops_reject_bool(fn):
    with pytest.raises(TypeError, match="DataType bool"):
        fn(gc.constant([True]))


# ------------------------------------------------------------------------ binary values
BROADCAST_PAIRS = [((7,), (7,)), ((3, 1), (1, 5)), ((2, 3, 5), (5,)), ((), (7,)), ((1,), (1,)),
                   ((3, 37), (3, 1))]


def floor_mod_ref(x, y):
    return x - np.floor(x / y) * y


# public function, reference, domain of y (x is any real)
BINARY = {
    "add": (gc.add, lambda x, y: x + y, any_reals),
    "subtract": (gc.subtract, lambda x, y: x - y, any_reals),
    "multiply": (gc.multiply, lambda x, y: x * y, any_reals),
    "divide": (gc.divide, lambda x, y: x / y, positive),
    "truediv": (gc.truediv, lambda x, y: x / y, positive),
    "div": (gc.div, lambda x, y: x / y, positive),
    "floordiv": (gc.floordiv, lambda x, y: np.floor(x / y), positive),
    "floormod": (gc.floormod, floor_mod_ref, positive),
    "maximum": (gc.maximum, lambda x, y: np.where(x > y, x, y), any_reals),
    "minimum": (gc.minimum, lambda x, y: np.where(x < y, x, y), any_reals),
    "squared_difference": (gc.squared_difference, lambda x, y: (x - y) * (x - y), any_reals),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_values_with_broadcasting(name, shapes, dtype):
    fn, ref, y_domain = BINARY[name]
    x = any_reals(shapes[0]).astype(dtype)
    y = y_domain(shapes[1]).astype(dtype)
    got = run_graph(fn, x, y)
    want = ref(x.astype(np.float64), y.astype(np.float64))
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_pow_values():
    x = RNG.uniform(0.1, 3, (3, 7))
    y = RNG.uniform(-2, 2, (7,))
    np.testing.assert_allclose(run_graph(gc.pow, x, y), np.exp(y * np.log(x)), rtol=1e-12)
    np.testing.assert_array_equal(run_graph(gc.pow, np.array([2, -3, 0], np.int32),
                                            np.array([10, 3, 0], np.int32)), [1024, -27, 1])


def test_integer_floor_division_and_mod_follow_python_signs():
    a = [7, -7, 7, -7, 0, 6]
    b = [2, 2, -2, -2, 3, -4]
    x, y = np.array(a, np.int32), np.array(b, np.int32)
    np.testing.assert_array_equal(run_graph(gc.floordiv, x, y), [p // q for p, q in zip(a, b)])
    np.testing.assert_array_equal(run_graph(gc.floormod, x, y), [p % q for p, q in zip(a, b)])
    np.testing.assert_array_equal(run_graph(gc.div, x, y), [p // q for p, q in zip(a, b)])
    assert gc.mod is gc.floormod


def test_float_floordiv_floors_the_true_quotient_and_floormod_takes_sign_of_y():
    got = run_graph(gc.floordiv, np.array([1.0, -7.5]), np.array([0.1, 2.0]))
    np.testing.assert_array_equal(got, [10.0, -4.0])  # floor(1 / 0.1) == 10, not fmod's 9
    got = run_graph(gc.floormod, np.array([7.5, -7.5, 7.5]), np.array([2.0, 2.0, -2.0]))
    np.testing.assert_allclose(got, [1.5, 0.5, -0.5])


@pytest.mark.parametrize("fn", [gc.floordiv, gc.floormod, gc.div])
def test_integer_division_by_zero_is_a_run_time_error(fn):
    x = gc.placeholder(gc.int32, [3])
    out = fn(x, gc.constant([1, 0, 2]))
    with pytest.raises(gc.errors.InvalidArgumentError, match="Integer division by zero"):
        run(out, {x: [1, 2, 3]})


def test_integer_pow_to_negative_power_is_a_run_time_error():
    out = gc.pow(gc.constant([2, 3]), gc.constant([1, -1]))
    with pytest.raises(gc.errors.InvalidArgumentError, match="negative integer powers"):
        run(out)


@pytest.mark.parametrize("fn", [gc.add, gc.subtract, gc.multiply, gc.maximum, gc.minimum,
                                gc.squared_difference])
def test_integer_binary_ops_keep_their_dtype(fn):
    x = np.array([[-5, 3, 0]], dtype=np.int64)
    y = np.array([[2], [-4]], dtype=np.int64)
    got = run_graph(fn, x, y)
    ref = {gc.add: x + y, gc.subtract: x - y, gc.multiply: x * y,
           gc.maximum: np.where(x > y, x, y), gc.minimum: np.where(x < y, x, y),
           gc.squared_difference: (x - y) ** 2}[fn]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)


def test_float_division_by_zero_gives_inf_and_nan_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_graph(gc.divide, np.array([1.0, -1.0, 0.0]), np.zeros(3))
        mod = run_graph(gc.floormod, np.array([1.0]), np.zeros(1))
    np.testing.assert_array_equal(got, [np.inf, -np.inf, np.nan])
    assert np.isnan(mod[0])


# ----------------------------------------------------------------- truediv dtype table
@pytest.mark.parametrize("dtype, result", [
    (gc.int8, gc.float32), (gc.uint8, gc.float32), (gc.int16, gc.float32),
    (gc.int32, gc.float64), (gc.int64, gc.float64), (gc.float16, gc.float16),
    (gc.float32, gc.float32), (gc.float64, gc.float64)])
def test_truediv_casts_integers_like_tf1(dtype, result):
    x = gc.constant([7, 9], dtype=dtype)
    y = gc.constant([2, 2], dtype=dtype)
    q = gc.truediv(x, y)
    assert q.dtype == result and (x / y).dtype == result and gc.divide(x, y).dtype == result
    np.testing.assert_allclose(run(q), [3.5, 4.5])
    assert q.op.type == "RealDiv" and q.op.name == "truediv"


def test_truediv_rejects_bool_and_mixed_dtypes():
    with pytest.raises(TypeError, match="Invalid dtype"):
        gc.truediv(gc.constant([True]), gc.constant([False]))
    with pytest.raises(TypeError, match="must have the same dtype"):
        gc.truediv(gc.constant([1]), gc.constant([1.0]))


def test_div_is_python2_division():
    assert gc.div(gc.constant([1.0]), 2.0).op.type == "RealDiv"
    q = gc.div(gc.constant([-7]), 2)
    assert q.op.type == "FloorDiv" and q.dtype == gc.int32
    assert run(q)[0] == -4


def test_realdiv_op_is_float_only():
    x = gc.constant([1, 2])
    with pytest.raises(TypeError, match="DataType int32"):
        x.graph.create_op("RealDiv", [x, x])


# -------------------------------------------------------------------------- predicates
COMPARISONS = [(gc.equal, np.equal), (gc.not_equal, np.not_equal), (gc.less, np.less),
               (gc.less_equal, np.less_equal), (gc.greater, np.greater),
               (gc.greater_equal, np.greater_equal)]


@pytest.mark.parametrize("fn, ref", COMPARISONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_comparisons_broadcast_to_bool(fn, ref, dtype):
    x = RNG.integers(-2, 3, (3, 7)).astype(dtype)
    y = RNG.integers(-2, 3, (7,)).astype(dtype)
    got = run_graph(fn, x, y)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref(x, y))


def test_equality_accepts_bool_but_ordering_does_not():
    t, f = gc.constant([True, False]), gc.constant([True, True])
    np.testing.assert_array_equal(run(gc.equal(t, f)), [True, False])
    np.testing.assert_array_equal(run(gc.not_equal(t, f)), [False, True])
    with pytest.raises(TypeError, match="DataType bool"):
        gc.less(t, f)


def test_comparisons_have_no_gradient():
    x = gc.placeholder(gc.float32, [3])
    y = gc.cast(gc.less(x, 1.0), gc.float32) * x
    g = gc.gradients(y, x)[0]
    np.testing.assert_array_equal(run(g, {x: [0.0, 2.0, 0.5]}), [1.0, 0.0, 1.0])


TRUTH = (np.array([[True, True, False, False]] * 3), np.array([True, False, True, False]))


@pytest.mark.parametrize("fn, ref", [(gc.logical_and, np.logical_and),
                                     (gc.logical_or, np.logical_or),
                                     (gc.logical_xor, np.logical_xor)])
def test_logical_binary_ops(fn, ref):
    np.testing.assert_array_equal(run_graph(fn, *TRUTH), ref(*TRUTH))


def test_logical_not_and_operators():
    a = gc.constant(TRUTH[0])
    b = gc.constant(TRUTH[1])
    got = run([~a, a & b, a | b, a ^ b, gc.logical_not(b)])
    want = [~TRUTH[0], TRUTH[0] & TRUTH[1], TRUTH[0] | TRUTH[1], TRUTH[0] ^ TRUTH[1], ~TRUTH[1]]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("fn", [gc.logical_and, gc.logical_or, gc.logical_xor])
def test_logical_ops_need_bools(fn):
    with pytest.raises(TypeError, match="DataType float32 not in list of allowed values: bool"):
        fn(gc.constant([1.0]), gc.constant([0.0]))
    with pytest.raises(TypeError):
        gc.logical_not(gc.constant([1]))


# ----------------------------------------------------------------- static shapes, dtypes
@pytest.mark.parametrize("a, b, want", [
    ([None, 3], [3], [None, 3]), ([None, 1], [1, 4], [None, 4]), ([None], [5], [5]),
    ([None], [1], [None]), ([2, None, 3], [None, 1], [2, None, 3]), ([], [None, 2], [None, 2]),
    (None, [3], None), ([4, 3], None, None)])
def test_binary_static_shape_inference(a, b, want):
    x = gc.placeholder(gc.float32, a)
    y = gc.placeholder(gc.float32, b)
    for out in [x + y, gc.maximum(x, y), gc.less(x, y), gc.pow(x, y), x / y]:
        if want is None:
            assert out.shape.ndims is None
        else:
            assert out.shape.as_list() == want


def test_unknown_dims_run_with_any_batch():
    x = gc.placeholder(gc.float32, [None, 3])
    b = gc.constant([1.0, 2.0, 3.0])
    out = x * b + 1.0
    for n in (1, 7):
        val = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        np.testing.assert_allclose(run(out, {x: val}), val * [1, 2, 3] + 1)


@pytest.mark.parametrize("a, b", [([2, 3], [4]), ([None, 3], [2]), ([5, 2], [3, 2])])
def test_incompatible_static_shapes_raise_value_error(a, b):
    x = gc.placeholder(gc.float32, a)
    y = gc.placeholder(gc.float32, b)
    with pytest.raises(ValueError, match=r"Dimensions must be equal, but are \d and \d for "
                                         r"'Add' \(op: 'Add'\) with input shapes"):
        gc.add(x, y)


def test_incompatible_run_time_shapes_raise_invalid_argument():
    x = gc.placeholder(gc.float32, [None])
    y = gc.placeholder(gc.float32, [None])
    with pytest.raises(gc.errors.InvalidArgumentError,
                       match=r"Incompatible shapes: \[2\] vs. \[3\]"):
        run(x + y, {x: [1, 2], y: [1, 2, 3]})


def test_dtype_mismatch_names_both_dtypes():
    x = gc.constant([1.0])
    y = gc.constant([1])
    with pytest.raises(TypeError, match="Input 'y' of 'Add' Op has type int32 that does not "
                                        "match type float32 of argument 'x'"):
        gc.add(x, y)
    with pytest.raises(TypeError):
        gc.constant([1]) + 2.5  # 2.5 cannot become an int32


def test_python_scalars_take_the_other_operands_dtype():
    x = gc.placeholder(gc.float64, [2])
    i = gc.constant([3, 4], dtype=gc.int64)
    assert gc.add(x, 1).dtype == gc.float64 and gc.add(1, x).dtype == gc.float64
    assert gc.maximum(i, 2).dtype == gc.int64 and gc.less(2, i).dtype == gc.bool
    assert gc.add(1, 2).dtype == gc.int32


def test_ops_follow_the_graph_of_their_tensor_inputs():
    g = gc.Graph()
    with g.as_default():
        x = gc.constant([1.0, 2.0])
    y = x * 3.0 + 1.0  # built outside g's default block
    assert y.graph is g
    with g.as_default():
        np.testing.assert_allclose(run(y), [4.0, 7.0])


def test_op_names():
    x = gc.placeholder(gc.float32, [2], name="x")
    assert gc.exp(x).op.name == "Exp"
    assert gc.exp(x, name="e").op.name == "e"
    assert gc.floordiv(x, 2.0).op.name == "floordiv"
    assert gc.divide(x, 2.0, name="ratio").op.name == "ratio"
    assert gc.cast(x, gc.int32).op.name == "Cast"
    assert gc.clip_by_value(x, 0.0, 1.0).op.name == "clip_by_value"


# --------------------------------------------------------------------- Python operators
def test_tensor_operators():
    xv = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]], dtype=np.float32)
    yv = np.array([2.0, 0.5, -1.0], dtype=np.float32)
    x = gc.placeholder(gc.float32, [None, 3])
    y = gc.constant(yv)
    outs = {
        "x + y": (x + y, xv + yv), "x - y": (x - y, xv - yv), "x * 2": (x * 2, xv * 2),
        "2 - x": (2 - x, 2 - xv), "1 / x": (1 / x, 1 / xv), "x / y": (x / y, xv / yv),
        "x ** 2": (x ** 2, xv ** 2), "2 ** y": (2 ** y, 2 ** yv), "-x": (-x, -xv),
        "abs(x)": (abs(x), np.abs(xv)), "x // y": (x // y, np.floor(xv / yv)),
        "x % 3": (x % 3, xv - np.floor(xv / 3) * 3), "3 * x": (3 * x, 3 * xv),
        "np + x": (np.ones(3, np.float32) + x, 1 + xv),
        "np * x": (np.full((2, 1), 2.0, np.float32) * x, 2 * xv),
        "x < y": (x < y, xv < yv), "x <= y": (x <= y, xv <= yv),
        "x > 0": (x > 0, xv > 0), "x >= y": (x >= y, xv >= yv),
    }
    got = run({k: t for k, (t, _) in outs.items()}, {x: xv})
    for k, (t, want) in outs.items():
        assert isinstance(t, gc.Tensor), k
        np.testing.assert_allclose(got[k], want, rtol=1e-6, err_msg=k)
    assert (np.ones(3) + x).dtype == gc.float32


def test_integer_tensor_operators():
    i = gc.constant([7, -7, 9])
    got = run([i / 2, i // 2, i % 4, 2 * i, 10 - i])
    assert got[0].dtype == np.float64
    np.testing.assert_allclose(got[0], [3.5, -3.5, 4.5])
    np.testing.assert_array_equal(got[1], [3, -4, 4])
    np.testing.assert_array_equal(got[2], [3, 1, 1])
    np.testing.assert_array_equal(got[3], [14, -14, 18])
    np.testing.assert_array_equal(got[4], [3, 17, 1])


# ------------------------------------------------------------------------ where/Select
def test_where_with_one_argument_returns_int64_indices():
    c = np.array([[True, False, True], [False, False, True]])
    idx = run_graph(gc.where, c)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, [[0, 0], [0, 2], [1, 2]])
    np.testing.assert_array_equal(run_graph(gc.where, np.array([0.0, 2.0, 0.0, -1.0])),
                                  [[1], [3]])
    assert run_graph(gc.where, np.zeros((7,), bool)).shape == (0, 1)


def test_where_indices_static_shape():
    assert gc.where(gc.placeholder(gc.bool, [None, 4, 2])).shape.as_list() == [None, 3]
    assert gc.where(gc.placeholder(gc.bool)).shape.as_list() == [None, None]


@pytest.mark.parametrize("cond_shape", [(3, 7), (3,), ()])
def test_select_elementwise_rows_and_scalar(cond_shape):
    c = RNG.random(cond_shape) > 0.5
    x, y = any_reals((3, 7)), any_reals((3, 7))
    got = run_graph(gc.where, c, x, y)
    c_full = np.broadcast_to(np.reshape(c, cond_shape + (1,) * (2 - len(cond_shape))), (3, 7))
    np.testing.assert_array_equal(got, np.choose(c_full.astype(int), [y, x]))


def test_select_static_shapes():
    c = gc.placeholder(gc.bool, [None])
    x = gc.placeholder(gc.float32, [None, 5])
    y = gc.placeholder(gc.float32, [4, None])
    assert gc.where(c, x, y).shape.as_list() == [4, 5]
    c2 = gc.placeholder(gc.bool, [2, 3])
    assert gc.where(c2, gc.placeholder(gc.float32), gc.placeholder(gc.float32)).shape.ndims is None
    assert gc.where(c2, gc.placeholder(gc.float32, [None, None]),
                    gc.placeholder(gc.float32, [None, 3])).shape.as_list() == [2, 3]


@pytest.mark.parametrize("c, x, y, match", [
    ([2, 3], [2, 3], [3, 3], "Dimension 0 in both shapes must be equal"),
    ([2, 3], [2, 3], [3], "Shapes must be equal rank"),
    ([4], [2, 3], [2, 3], "Dimension 0 in both shapes must be equal, but are 4 and 2"),
    ([3, 2], [2, 3], [2, 3], "Dimension 0 in both shapes must be equal"),
])
def test_select_shape_errors(c, x, y, match):
    with pytest.raises(ValueError, match=match):
        gc.where(gc.placeholder(gc.bool, c), gc.placeholder(gc.float32, x),
                 gc.placeholder(gc.float32, y))


def test_select_type_and_argument_errors():
    x = gc.constant([1.0, 2.0])
    with pytest.raises(TypeError, match="DataType float32 not in list of allowed values: bool"):
        gc.where(x, x, x)
    with pytest.raises(TypeError, match="Input 'e' of 'Select' Op has type int32"):
        gc.where(gc.constant([True, False]), x, gc.constant([1, 2]))
    with pytest.raises(ValueError, match="both be non-None or both be None"):
        gc.where(gc.constant([True]), x)


def test_select_run_time_shape_errors():
    c = gc.placeholder(gc.bool, [None])
    x = gc.placeholder(gc.float32, [None, 2])
    out = gc.where(c, x, x)
    with pytest.raises(gc.errors.InvalidArgumentError):
        run(out, {c: [True, False, True], x: np.zeros((2, 2))})


# ------------------------------------------------------------------------- clip, add_n
def test_clip_by_value_scalar_and_broadcast_bounds():
    x = np.array([[-2.0, 0.5, 3.0], [1.0, -0.5, 9.0]])
    np.testing.assert_array_equal(run_graph(lambda t: gc.clip_by_value(t, -1.0, 1.0), x),
                                  np.minimum(np.maximum(x, -1.0), 1.0))
    lo, hi = np.array([0.0, -1.0, 2.0]), np.array([1.0, 0.0, 5.0])
    got = run_graph(gc.clip_by_value, x, lo, hi)
    np.testing.assert_array_equal(got, [[0.0, 0.0, 3.0], [1.0, -0.5, 5.0]])


def test_clip_by_value_bounds_may_not_grow_the_tensor():
    with pytest.raises(ValueError):
        gc.clip_by_value(gc.constant([1.0, 2.0]), gc.constant([[0.0], [1.0]]), 3.0)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_add_n(n):
    arrays = [any_reals((3, 7)) for _ in range(n)]
    got = run_graph(lambda *ts: gc.add_n(list(ts)), *arrays)
    np.testing.assert_allclose(got, np.sum(arrays, axis=0), rtol=1e-12)


def test_add_n_shapes_dtypes_and_errors():
    a = gc.placeholder(gc.float32, [None, 3])
    b = gc.placeholder(gc.float32, [2, None])
    assert gc.add_n([a, b]).shape.as_list() == [2, 3]
    assert gc.add_n([a]) is a
    assert gc.add_n([[[1.0, 2.0, 3.0]], a]).shape.as_list() == [1, 3]  # a list converts
    with pytest.raises(ValueError, match="Dimension 1 in both shapes must be equal"):
        gc.add_n([a, gc.placeholder(gc.float32, [2, 4])])
    with pytest.raises(TypeError, match="does not match type float32"):
        gc.add_n([a, gc.placeholder(gc.float64, [2, 3])])
    with pytest.raises(ValueError, match="at least one"):
        gc.add_n([])
    c = gc.placeholder(gc.float32, [None])
    with pytest.raises(gc.errors.InvalidArgumentError, match="same size and shape"):
        run(gc.add_n([c, c * 2, gc.placeholder_with_default([1.0, 2.0], [None])]),
            {c: [1.0, 2.0, 3.0]})


def test_add_n_integers():
    got = run(gc.add_n([gc.constant([1, 2]), gc.constant([3, 4]), gc.constant([5, 6])]))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [9, 12])


# --------------------------------------------------------------------------------- cast
def test_cast_truncates_toward_zero_and_converts_bools():
    f = np.array([-2.7, -1.2, -0.5, 0.0, 0.5, 1.9, 2.5])
    np.testing.assert_array_equal(run_graph(lambda t: gc.cast(t, gc.int32), f),
                                  [-2, -1, 0, 0, 0, 1, 2])
    np.testing.assert_array_equal(run_graph(lambda t: gc.cast(t, gc.bool), f),
                                  [True, True, True, False, True, True, True])
    b = np.array([True, False])
    np.testing.assert_array_equal(run_graph(gc.to_float, b), [1.0, 0.0])
    assert run_graph(gc.to_float, b).dtype == np.float32
    assert run_graph(gc.to_int64, f).dtype == np.int64
    assert run_graph(gc.to_int32, f).dtype == np.int32


def test_cast_same_dtype_is_identity_and_python_values_convert():
    x = gc.placeholder(gc.float32, [None, 2])
    assert gc.cast(x, gc.float32) is x
    assert gc.cast(x, "float64").shape.as_list() == [None, 2]
    c = gc.cast(1.5, gc.int32)
    assert c.dtype == gc.int32 and run(c) == 1
    assert gc.to_float(gc.constant([1])).op.name == "ToFloat"


def test_cast_gradient_passes_only_between_floats():
    x = gc.placeholder(gc.float32, [2])
    y = gc.cast(x, gc.float64) * 3.0
    g = gc.gradients(y, x)[0]
    assert g.dtype == gc.float32
    np.testing.assert_allclose(run(g, {x: [1.0, 2.0]}), [3.0, 3.0])
    z = gc.cast(gc.cast(x, gc.int32), gc.float32)
    assert gc.gradients(z, x)[0] is None


def test_cast_of_strings_is_rejected():
    x = gc.placeholder(gc.string, [])
    with pytest.raises(TypeError, match="not supported"):
        gc.cast(x, gc.float32)


# ---------------------------------------------------------------------------- gradients
DIFFERENTIABLE_UNARY = sorted(set(UNARY) - {"floor", "ceil", "sign"})


@pytest.mark.parametrize("name", DIFFERENTIABLE_UNARY)
def test_unary_gradients(name):
    fn, _, domain = UNARY[name]
    x = domain((2, 3))
    if name == "abs":
        x = np.where(np.abs(x) < 0.1, 0.5, x)  # away from the kink
    check_gradients(fn, [x])


SECOND_ORDER_UNARY = ["exp", "log", "tanh", "sigmoid", "square", "sqrt", "sin", "cos", "rsqrt",
                      "reciprocal", "log1p", "expm1", "erf", "erfc", "negative"]


@pytest.mark.parametrize("name", SECOND_ORDER_UNARY)
def test_unary_second_order(name):
    fn, _, domain = UNARY[name]
    check_second_order(fn, [domain((3,))], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fn", [gc.floor, gc.ceil, gc.round])
def test_rounding_ops_have_none_gradient(fn):
    x = gc.placeholder(gc.float32, [3])
    assert gc.gradients(fn(x), x)[0] is None


def test_sign_gradient_is_zeros():
    x = gc.placeholder(gc.float32, [3])
    g = gc.gradients(gc.sign(x), x)[0]
    np.testing.assert_array_equal(run(g, {x: [-1.0, 0.0, 2.0]}), [0.0, 0.0, 0.0])


GRAD_BINARY = {
    "add": gc.add, "subtract": gc.subtract, "multiply": gc.multiply, "divide": gc.divide,
    "maximum": gc.maximum, "minimum": gc.minimum, "squared_difference": gc.squared_difference,
    "pow": gc.pow, "floormod": gc.floormod,
}


@pytest.mark.parametrize("name", sorted(GRAD_BINARY))
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((1, 3), (2, 1)), ((), (3,))])
def test_binary_gradients_with_broadcasting(name, shapes):
    x = RNG.uniform(0.5, 2.0, shapes[0])
    y = RNG.uniform(0.5, 2.0, shapes[1])
    if name in ("maximum", "minimum"):
        y = y + 0.05  # no ties
    if name == "floormod":
        x, y = RNG.uniform(2.5, 2.9, shapes[0]), RNG.uniform(1.5, 1.8, shapes[1])  # floor = 1
    check_gradients(GRAD_BINARY[name], [x, y])


@pytest.mark.parametrize("name", ["multiply", "divide", "pow", "add", "subtract",
                                  "squared_difference"])
def test_binary_second_order(name):
    x = RNG.uniform(0.5, 2.0, (2, 3))
    y = RNG.uniform(0.5, 2.0, (3,))
    check_second_order(GRAD_BINARY[name], [x, y], rtol=1e-4, atol=1e-6)


def test_pow_exponent_gradient_is_zero_not_nan_at_zero_base():
    x = gc.placeholder(gc.float64, [3])
    y = gc.placeholder(gc.float64, [3])
    gx, gy = gc.gradients(gc.pow(x, y), [x, y])
    gxv, gyv = run([gx, gy], {x: [0.0, 2.0, 0.0], y: [2.0, 3.0, 1.0]})
    np.testing.assert_allclose(gyv, [0.0, 8.0 * math.log(2.0), 0.0])
    np.testing.assert_allclose(gxv, [0.0, 12.0, 1.0])


def test_maximum_minimum_ties_send_gradient_to_x():
    x = gc.placeholder(gc.float64, [2])
    y = gc.placeholder(gc.float64, [2])
    feed = {x: [1.0, 2.0], y: [1.0, 3.0]}
    for fn, want_x in [(gc.maximum, [1.0, 0.0]), (gc.minimum, [1.0, 1.0])]:
        gx, gy = run(gc.gradients(fn(x, y), [x, y]), feed)
        np.testing.assert_array_equal(gx, want_x)
        np.testing.assert_array_equal(gy, 1.0 - np.array(want_x))


def test_floordiv_has_no_gradient():
    x = gc.placeholder(gc.float32, [3])
    assert gc.gradients(gc.floordiv(x, 2.0), x)[0] is None


def test_select_gradients_are_masked_and_none_for_cond():
    mask = [[True, False, True], [False, True, False]]
    check_gradients(lambda x, y: gc.where(mask, x, y), [any_reals((2, 3)), any_reals((2, 3))])
    check_gradients(lambda x, y: gc.where([False, True], x, y) * x,
                    [any_reals((2, 3)), any_reals((2, 3))])
    c = gc.constant(mask)
    x = gc.placeholder(gc.float32, [2, 3])
    assert gc.gradients(gc.where(c, x, x), [c])[0] is None


def test_clip_by_value_gradient_passes_only_inside_the_range():
    x = np.array([[-2.0, 0.3, 3.0], [0.9, -0.5, 9.0]])
    check_gradients(lambda t: gc.clip_by_value(t, -1.0, 1.0), [x])
    t = gc.placeholder(gc.float64, [2, 3])
    g = gc.gradients(gc.clip_by_value(t, -1.0, 1.0), t)[0]
    np.testing.assert_array_equal(run(g, {t: x}), [[0, 1, 0], [1, 1, 0]])
    check_gradients(gc.clip_by_value, [x, np.array([-1.0, 0.0, 1.0]), np.array([0.0, 0.5, 2.0])])


def test_add_n_gradient():
    check_gradients(lambda a, b, c: gc.add_n([a, b, c]) * a,
                    [any_reals((2, 3)), any_reals((2, 3)), any_reals((2, 3))])


def test_cast_gradient_check():
    check_gradients(lambda t: gc.square(gc.cast(gc.cast(t, gc.float32), gc.float64)),
                    [np.array([0.5, 1.25, -2.0])], eps=1e-2, rtol=1e-3)


def test_unbroadcast_with_unknown_batch_dimension():
    x = gc.placeholder(gc.float64, [None, 3])
    b = gc.placeholder(gc.float64, [3])
    gx, gb = gc.gradients(x * b, [x, b])
    assert gb.shape.as_list() == [3]
    xv = np.arange(15.0).reshape(5, 3)
    gxv, gbv = run([gx, gb], {x: xv, b: [1.0, 2.0, 3.0]})
    np.testing.assert_allclose(gbv, xv.sum(axis=0))
    np.testing.assert_allclose(gxv, np.tile([1.0, 2.0, 3.0], (5, 1)))


def test_float16_keeps_its_dtype():
    x = np.array([0.5, -1.0, 2.0], dtype=np.float16)
    for fn in (gc.exp, gc.sigmoid, gc.erf, lambda t: t * t + 1.0):
        got = run_graph(fn, x)
        assert got.dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 1023])
def test_is_nan_is_inf_is_finite(dtype, n):
    """TF1's tf.is_nan / is_inf / is_finite on values with nans, both infinities, zeros,
    the largest finite number and subnormals; written without NumPy's isnan: a nan is the
    one value unequal to itself, an inf the one whose magnitude exceeds the largest."""
    big = np.finfo(dtype).max
    pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, big, -big,
                     np.finfo(dtype).tiny / 4, 1.5, -2.0], dtype)
    values = pool[np.random.default_rng(n).integers(0, len(pool), n)]
    x = gc.placeholder(dtype, [None])
    got = run([gc.is_nan(x), gc.is_inf(x), gc.is_finite(x), gc.is_finite(x * 2)], {x: values})
    nan = np.array([v != v for v in values.tolist()], bool)
    inf = np.array([v == v and abs(v) > big for v in values.tolist()], bool)
    doubled = values.astype(np.float64) * 2  # exact in float64; inf where values are
    assert [g.dtype for g in got] == [np.bool_] * 4
    np.testing.assert_array_equal(got[0], nan)
    np.testing.assert_array_equal(got[1], inf)
    np.testing.assert_array_equal(got[2], ~nan & ~inf)
    # x * 2 overflows to inf in the input's dtype for |x| near the largest
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got[3], np.abs(doubled.astype(dtype)) <= big)
    assert gc.is_nan(x).shape.as_list() == [None]
    with pytest.raises(TypeError):
        gc.is_nan(gc.constant([1, 2]))
