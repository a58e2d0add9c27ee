"""Reductions, ArgMax/ArgMin, Cumsum and count_nonzero: values, shapes, errors, gradients."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph

RNG = np.random.default_rng(0)


def _axes(axis, ndim):
    """The test's own axis normalization: None -> all, ints/lists -> a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    axis = [axis] if np.ndim(axis) == 0 else list(axis)
    return tuple(sorted({a % ndim for a in axis}))


def _trunc_mean(x, axes):
    total = x.sum(axis=axes)
    count = int(np.prod([x.shape[a] for a in axes]))
    return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype)


REDUCTIONS = {
    "reduce_sum": lambda x, axes: x.sum(axis=axes),
    "reduce_mean": lambda x, axes: x.mean(axis=axes),
    "reduce_max": lambda x, axes: x.max(axis=axes),
    "reduce_min": lambda x, axes: x.min(axis=axes),
    "reduce_prod": lambda x, axes: x.prod(axis=axes),
    "reduce_logsumexp": lambda x, axes: np.log(np.exp(x).sum(axis=axes)),
}

SHAPES_AND_AXES = [
    ((1,), None), ((7,), 0), ((7,), -1), ((3, 7), 1), ((3, 7), [0, 1]), ((3, 7), []),
    ((2, 7, 33), [0, 2]), ((2, 7, 33), -2), ((2, 7, 33), None), ((1, 1), 1), ((3, 5, 1), [1, -2]),
]


@pytest.mark.parametrize("fn_name", sorted(REDUCTIONS))
@pytest.mark.parametrize("shape,axis", SHAPES_AND_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_float_reductions_match_numpy(fn_name, shape, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, size=shape).astype(np.float32)
    out = run_graph(lambda t: getattr(gc, fn_name)(t, axis=axis, keepdims=keepdims), x)
    axes = _axes(axis, x.ndim)
    expected = REDUCTIONS[fn_name](x.astype(np.float64), axes)
    if keepdims:
        expected = np.reshape(expected, [1 if i in axes else d for i, d in enumerate(shape)])
    assert out.dtype == np.float32
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out, expected, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reductions(dtype):
    x = np.array([[-3, 0, 7], [4, 5, -9]], dtype=dtype)
    with gc.Session() as sess:
        t = gc.constant(x)
        s, m0, m1, mx, mn, p = sess.run([gc.reduce_sum(t, 1), gc.reduce_mean(t, 0),
                                         gc.reduce_mean(t, 1), gc.reduce_max(t), gc.reduce_min(t),
                                         gc.reduce_prod(t, 0)])
    np.testing.assert_array_equal(s, [4, 0])
    np.testing.assert_array_equal(m0, [0, 2, -1])  # -1/2 and -2/2 truncate toward zero
    np.testing.assert_array_equal(m1, _trunc_mean(x, (1,)))
    np.testing.assert_array_equal(m1, [1, 0])
    assert (mx, mn) == (7, -9)
    np.testing.assert_array_equal(p, [-12, 0, -63])
    assert s.dtype == dtype and m0.dtype == dtype


def test_int32_sum_wraps_like_tf():
    x = np.array([2**31 - 1, 1], dtype=np.int32)
    assert run_graph(lambda t: gc.reduce_sum(t), x) == np.int32(-2**31)


@pytest.mark.parametrize("fn_name,expected", [("reduce_max", -np.inf), ("reduce_min", np.inf),
                                               ("reduce_sum", 0.0), ("reduce_prod", 1.0),
                                               ("reduce_logsumexp", -np.inf)])
def test_empty_reductions_give_identity(fn_name, expected):
    x = np.zeros((0, 3), np.float32)
    out = run_graph(lambda t: getattr(gc, fn_name)(t, axis=0), x)
    np.testing.assert_array_equal(out, np.full(3, expected, np.float32))


def test_empty_mean_is_nan():
    out = run_graph(lambda t: gc.reduce_mean(t, axis=0), np.zeros((0, 2), np.float32))
    assert np.isnan(out).all()


def test_any_all():
    x = np.array([[True, False, False], [True, True, True]])
    with gc.Session() as sess:
        t = gc.constant(x)
        got = sess.run([gc.reduce_any(t, 1), gc.reduce_all(t, 1), gc.reduce_any(t),
                        gc.reduce_all(t, 0, keepdims=True)])
    np.testing.assert_array_equal(got[0], [True, True])
    np.testing.assert_array_equal(got[1], [False, True])
    assert got[2] == True  # noqa: E712
    np.testing.assert_array_equal(got[3], [[True, False, False]])


@pytest.mark.parametrize("fn,value", [(gc.reduce_any, [1.0, 2.0]), (gc.reduce_all, [1, 2]),
                                      (gc.reduce_sum, [True, False]),
                                      (gc.reduce_max, [True, False])])
def test_reduction_dtype_errors(fn, value):
    with pytest.raises(TypeError):
        fn(gc.constant(value))


def test_deprecated_argument_spellings():
    x = gc.constant(np.ones((2, 3), np.float32))
    assert gc.reduce_sum(x, reduction_indices=[1], keep_dims=True).shape.as_list() == [2, 1]
    with pytest.raises(ValueError, match="Cannot specify both 'axis' and 'reduction_indices'"):
        gc.reduce_sum(x, axis=1, reduction_indices=1)
    with pytest.raises(ValueError, match="Cannot specify both"):
        gc.reduce_mean(x, keepdims=True, keep_dims=True)


def test_op_structure_and_names():
    x = gc.placeholder(gc.float32, [2, 3])
    y = gc.reduce_sum(x, -1)
    assert y.op.type == "Sum" and y.op.name == "Sum"
    assert y.op.inputs[1].dtype == gc.int32 and y.op.attrs == {"keep_dims": False}
    assert gc.reduce_mean(x, name="avg").op.name == "avg"
    assert [gc.reduce_max(x).op.type, gc.reduce_min(x).op.type, gc.reduce_prod(x).op.type] == \
        ["Max", "Min", "Prod"]


@pytest.mark.parametrize("shape,axis,keepdims,expected", [
    ([None, 3, None], 1, False, [None, None]),
    ([None, 3, None], 1, True, [None, 1, None]),
    ([None, 3, None], [-1, 0], False, [3]),
    ([None, 3, None], None, False, []),
    ([None, 3, None], None, True, [1, 1, 1]),
    ([None, 3, None], [], False, [None, 3, None]),
    ([5, 7], [1, -1], False, [5]),  # a repeated axis reduces once
    (None, 1, False, None),
    (None, 1, True, None),
    (None, None, False, None),
])
def test_static_shape_inference(shape, axis, keepdims, expected):
    x = gc.placeholder(gc.float32, shape)
    y = gc.reduce_sum(x, axis, keepdims=keepdims)
    assert y.shape.as_tuple_or_none() == (None if expected is None else tuple(expected))


def test_unknown_axis_value_shape_and_run():
    x = gc.placeholder(gc.float32, [None, 3, 4])
    axis = gc.placeholder(gc.int32, [None])
    assert gc.reduce_sum(x, axis).shape.ndims is None
    kept = gc.reduce_max(x, axis, keepdims=True)
    assert kept.shape.as_tuple_or_none() == (None, None, None)
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    with gc.Session() as sess:
        out = sess.run(kept, {x: xv, axis: [-1, 0]})
    np.testing.assert_allclose(out, xv.max(axis=(0, 2), keepdims=True))


def test_unknown_rank_reduce_all_axes():
    x = gc.placeholder(gc.float32)
    y = gc.reduce_mean(x)
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), xv.mean(), rtol=1e-6)


def test_int64_axis_tensor():
    x = gc.constant(np.arange(6.0).reshape(2, 3))
    y = gc.reduce_sum(x, gc.constant(np.array([1], np.int64)))
    assert y.shape.as_list() == [2]
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y), [3.0, 12.0])


@pytest.mark.parametrize("axis,bad", [(2, 2), (-3, -3), ([0, 5], 5)])
def test_invalid_axis_is_a_construction_error(axis, bad):
    x = gc.placeholder(gc.float32, [3, 4])
    with pytest.raises(ValueError, match=f"Invalid reduction dimension {bad} for input with 2 "
                                         "dimensions. for 'Sum' "):
        gc.reduce_sum(x, axis)


def test_invalid_axis_at_run_time():
    x = gc.placeholder(gc.float32, [3, 4])
    axis = gc.placeholder(gc.int32, [])
    y = gc.reduce_sum(x, axis)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError,
                           match=r"Invalid reduction dimension \(2 for input with 2 dimension"):
            sess.run(y, {x: np.ones((3, 4)), axis: 2})


def test_axis_must_be_integer():
    with pytest.raises(TypeError):
        gc.reduce_sum(gc.constant([1.0, 2.0]), gc.constant(0.0))


# --------------------------------------------------------------------------- logsumexp
def test_logsumexp_is_stable_and_handles_infinities():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-np.inf, -np.inf], [np.inf, 1.0]])
    out = run_graph(lambda t: gc.reduce_logsumexp(t, axis=1), x)
    expected = [1000.0 + np.log(2.0), -1000.0 + np.log1p(np.exp(-1.0)), -np.inf, np.inf]
    np.testing.assert_allclose(out, expected)


def test_logsumexp_keepdims_and_all_axes():
    x = RNG.standard_normal((3, 7))
    out = run_graph(lambda t: gc.reduce_logsumexp(t, axis=0, keepdims=True), x)
    np.testing.assert_allclose(out, np.log(np.exp(x).sum(0, keepdims=True)))
    out = run_graph(lambda t: gc.reduce_logsumexp(t), x)
    np.testing.assert_allclose(out, np.log(np.exp(x).sum()))


def test_logsumexp_gradient_is_softmax():
    x = RNG.standard_normal((2, 5))
    g = run_graph(lambda t: gc.gradients(gc.reduce_logsumexp(t, 1), t)[0], x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(g, e / e.sum(1, keepdims=True), rtol=1e-10)


# ---------------------------------------------------------------------------- gradients
GRAD_CASES = [((3,), None, False), ((2, 3), 1, False), ((2, 3), 0, True),
              ((2, 1, 3), [0, -1], False), ((2, 3), [], False), ((2, 3), None, True)]


@pytest.mark.parametrize("fn_name", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                     "reduce_prod", "reduce_logsumexp"])
@pytest.mark.parametrize("shape,axis,keepdims", GRAD_CASES)
def test_gradients(fn_name, shape, axis, keepdims):
    # distinct values away from ties, away from zero for prod
    x = RNG.permutation(np.arange(1, int(np.prod(shape)) + 1)).reshape(shape) * 0.3 + 0.2
    check_gradients(lambda t: getattr(gc, fn_name)(t, axis=axis, keepdims=keepdims), [x])


@pytest.mark.parametrize("fn_name", ["reduce_sum", "reduce_mean", "reduce_max",
                                     "reduce_logsumexp"])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (None, False), (0, True)])
def test_second_order(fn_name, axis, keepdims):
    x = np.array([[0.3, -1.2, 0.7], [1.1, 0.4, -0.5]])
    fn = getattr(gc, fn_name)
    # square so the second derivative is not identically zero for the linear reductions
    check_second_order(lambda t: gc.square(fn(t * t, axis=axis, keepdims=keepdims)), [x])


@pytest.mark.parametrize("fn_name", ["reduce_max", "reduce_min"])
def test_max_min_gradient_splits_ties_equally(fn_name):
    x = np.array([[2.0, 5.0, 5.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    if fn_name == "reduce_min":
        x = -x
    g = run_graph(lambda t: gc.gradients(getattr(gc, fn_name)(t, axis=1), t)[0], x)
    np.testing.assert_allclose(g, [[0, 0.5, 0.5, 0], [0.25, 0.25, 0.25, 0.25]])


def test_prod_gradient_with_zeros_is_exact():
    x = np.array([[2.0, 3.0, 4.0], [2.0, 0.0, 4.0], [0.0, 3.0, 0.0]])
    g = run_graph(lambda t: gc.gradients(gc.reduce_prod(t, axis=1), t)[0], x)
    others = np.array([[np.prod(np.delete(row, j)) for j in range(3)] for row in x])
    np.testing.assert_array_equal(g, others)
    assert np.isfinite(g).all()


def _feed_and_grad(fn, x_shape, xv, extra_feeds=()):
    x = gc.placeholder(gc.float64, x_shape)
    y = fn(x)
    g = gc.gradients(y, x)[0]
    with gc.Session() as sess:
        return sess.run(g, {x: xv, **dict(extra_feeds)})


@pytest.mark.parametrize("x_shape", [[None, None, 4], None])
def test_gradients_with_unknown_dims_and_rank(x_shape):
    xv = RNG.standard_normal((2, 3, 4))
    g = _feed_and_grad(lambda x: gc.reduce_mean(x, axis=[0, 2]), x_shape, xv)
    np.testing.assert_allclose(g, np.full(xv.shape, 1.0 / 8))
    g = _feed_and_grad(lambda x: gc.reduce_sum(x, axis=1), x_shape, xv)
    np.testing.assert_allclose(g, np.ones_like(xv))
    g = _feed_and_grad(lambda x: gc.reduce_max(x, axis=-1), x_shape, xv)
    np.testing.assert_allclose(g, (xv == xv.max(-1, keepdims=True)).astype(float))
    g = _feed_and_grad(lambda x: gc.reduce_prod(x, axis=1), x_shape, xv)
    np.testing.assert_allclose(g, xv.prod(1, keepdims=True) / xv)


def test_gradient_with_unknown_axis_value():
    axis = gc.placeholder(gc.int32, [None])
    xv = RNG.standard_normal((2, 3, 4))
    g = _feed_and_grad(lambda x: gc.reduce_mean(x, axis) * gc.constant(2.0, gc.float64),
                       [None, 3, 4], xv, {axis: [-1, 0]})
    np.testing.assert_allclose(g, np.full(xv.shape, 2.0 / 8))
    g = _feed_and_grad(lambda x: gc.reduce_logsumexp(x, axis), [None, 3, 4], xv, {axis: [1]})
    e = np.exp(xv)
    np.testing.assert_allclose(g, e / e.sum(1, keepdims=True))


def test_gradient_with_unknown_rank_and_scalar_axis():
    axis = gc.placeholder(gc.int32, [])
    xv = np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]])
    g = _feed_and_grad(lambda x: gc.reduce_prod(x, axis), None, xv, {axis: -1})
    np.testing.assert_array_equal(g, [[0.0, 0.0, 2.0], [20.0, 15.0, 12.0]])
    g = _feed_and_grad(lambda x: gc.reduce_min(x, axis, keepdims=True), None, xv, {axis: 0})
    np.testing.assert_array_equal(g, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])


# ------------------------------------------------------------------------ ArgMax/ArgMin
@pytest.mark.parametrize("fn,np_fn", [(gc.argmax, np.argmax), (gc.argmin, np.argmin)])
@pytest.mark.parametrize("shape,axis", [((1,), 0), ((7,), None), ((3, 33), 1), ((3, 33), -2),
                                        ((2, 7, 5), 1)])
def test_argmax_argmin_values(fn, np_fn, shape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    out = run_graph(lambda t: fn(t, axis=axis), x)
    expected = np_fn(x, axis=0 if axis is None else axis)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, expected)


def test_argmax_options_and_aliases():
    x = gc.constant([[1, 9, 9], [7, 2, 7]])
    with gc.Session() as sess:
        a, b, c, d = sess.run([gc.argmax(x, 1, output_type=gc.int32), gc.arg_max(x, 0),
                               gc.argmin(x, dimension=1), gc.arg_min(x, 1)])
    np.testing.assert_array_equal(a, [1, 0])  # ties: the first index
    assert a.dtype == np.int32
    np.testing.assert_array_equal(b, [1, 0, 0])
    np.testing.assert_array_equal(c, [0, 1])
    np.testing.assert_array_equal(d, [0, 1])
    assert gc.argmax(x, 1).op.type == "ArgMax" and gc.argmin(x, 1).op.type == "ArgMin"
    with pytest.raises(ValueError, match="Cannot specify both"):
        gc.argmax(x, axis=1, dimension=1)
    with pytest.raises(TypeError):
        gc.argmax(x, 1, output_type=gc.float32)


def test_argmax_nan_returns_first_nan():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 2.0, 0.0, 1.0]])
    with gc.Session() as sess:
        t = gc.constant(x)
        mx, mn = sess.run([gc.argmax(t, 1), gc.argmin(t, 1)])
    np.testing.assert_array_equal(mx, [1, 0])
    np.testing.assert_array_equal(mn, [1, 2])


@pytest.mark.parametrize("shape,axis,expected", [([None, 3, 5], 1, [None, 5]),
                                                 ([None, 3, 5], -1, [None, 3]),
                                                 (None, 0, None)])
def test_argmax_static_shape(shape, axis, expected):
    y = gc.argmax(gc.placeholder(gc.float32, shape), axis)
    assert y.shape.as_tuple_or_none() == (None if expected is None else tuple(expected))


def test_argmax_unknown_axis_shape():
    y = gc.argmin(gc.placeholder(gc.float32, [2, 3, 4]), gc.placeholder(gc.int32, []))
    assert y.shape.as_tuple_or_none() == (None, None)


def test_argmax_errors():
    x = gc.placeholder(gc.float32, [3, 4])
    with pytest.raises(ValueError, match=r"Expected dimension in the range \[-2, 2\), but got 2"):
        gc.argmax(x, 2)
    with pytest.raises(ValueError):
        gc.argmax(gc.constant(1.0), 0)
    axis = gc.placeholder(gc.int32, [])
    y = gc.argmax(x, axis)
    e = gc.placeholder(gc.float32, [None])
    z = gc.argmax(e, 0)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="Expected dimension"):
            sess.run(y, {x: np.ones((3, 4)), axis: -3})
        with pytest.raises(gc.errors.InvalidArgumentError, match="is empty"):
            sess.run(z, {e: np.ones(0)})


def test_argmax_has_no_gradient():
    x = gc.placeholder(gc.float32, [3])
    y = gc.cast(gc.argmax(x, 0), gc.float32) * gc.reduce_sum(x)
    assert gc.gradients(gc.cast(gc.argmax(x, 0), gc.float32), x) == [None]
    assert gc.gradients(y, x)[0] is not None


# ------------------------------------------------------------------------------ cumsum
def _np_cumsum(x, axis, exclusive, reverse):
    """Written out: out[i] = sum of x[j] for j < i (<= when inclusive), mirrored for reverse."""
    x = np.moveaxis(x, axis, 0)
    n = x.shape[0]
    out = np.zeros_like(x)
    for i in range(n):
        js = range(i + 1, n) if reverse else range(0, i)
        total = sum((x[j] for j in js), np.zeros_like(x[0]))
        out[i] = total if exclusive else total + x[i]
    return np.moveaxis(out, 0, axis)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape,axis", [((1,), 0), ((7,), 0), ((3, 33), 1), ((3, 5, 2), -2)])
def test_cumsum_values(exclusive, reverse, shape, axis):
    x = RNG.standard_normal(shape)
    out = run_graph(lambda t: gc.cumsum(t, axis, exclusive=exclusive, reverse=reverse), x)
    np.testing.assert_allclose(out, _np_cumsum(x, axis, exclusive, reverse), atol=1e-12)


def test_cumsum_int_and_shape():
    x = gc.placeholder(gc.int32, [None, 4])
    y = gc.cumsum(x, axis=1, exclusive=True)
    assert y.shape.as_tuple_or_none() == (None, 4) and y.dtype == gc.int32
    assert y.op.type == "Cumsum"
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {x: [[1, 2, 3, 4]]}), [[0, 1, 3, 6]])
    with pytest.raises(TypeError):
        gc.cumsum(gc.constant([True]))


@pytest.mark.parametrize("axis,value", [(2, [[1.0]]), (0, 1.0), (-2, [1.0])])
def test_cumsum_bad_axis_fails_at_run_time_as_in_tf(axis, value):
    y = gc.cumsum(gc.constant(value), axis)  # TF's Cumsum shape function does not check
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="Expected scan axis"):
            sess.run(y)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_gradient(exclusive, reverse):
    x = RNG.standard_normal((3, 4))
    check_gradients(lambda t: gc.cumsum(t, 1, exclusive=exclusive, reverse=reverse), [x])


# ------------------------------------------------------------------------ count_nonzero
def test_count_nonzero():
    x = np.array([[0.0, 1.5, 0.0], [2.0, -1.0, 0.0]])
    with gc.Session() as sess:
        t = gc.constant(x)
        a, b, c, d = sess.run([gc.count_nonzero(t), gc.count_nonzero(t, axis=1),
                               gc.count_nonzero(t, 0, keepdims=True, dtype=gc.int32),
                               gc.count_nonzero(gc.constant([True, False, True]))])
    assert a == 3 and a.dtype == np.int64
    np.testing.assert_array_equal(b, [1, 2])
    np.testing.assert_array_equal(c, [[1, 2, 0]])
    assert c.dtype == np.int32
    assert d == 2
