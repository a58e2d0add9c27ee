"""Regression tests for the compiled backend: one test per class of bug found running the
suite natively (wrong answers, missing run-time errors, shape values known only at run time).

Every test runs on the compiled backend and asserts that the run did NOT fall back to the
reference executor (`native()`), then compares with NumPy written here."""
import contextlib
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import LoweringError, generate
from graphc.compiler.lower import lower
from graphc.compiler.pipeline import optimize

RNG = np.random.default_rng(3)


def compiled_session(graph=None):
    return gc.Session(graph=graph, config=gc.ConfigProto(backend="compiled"))


@contextlib.contextmanager
def native():
    """Fails if anything inside falls back to the NumPy reference executor."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fallbacks = [w for w in caught if "reference executor" in str(w.message)]
    assert not fallbacks, str(fallbacks[0].message)


# ------------------------------------------------------------ silent wrong answers
@pytest.mark.parametrize("key", [slice(5, -7, -2), slice(-100, 100), slice(-2, None, -1),
                                 slice(1, 50, 3), slice(None, -9)])
def test_strided_slice_of_run_time_dims_clamps_like_python(key):
    """Bounds past the end of a dim of unknown size are clamped at run time (they read
    uninitialized memory when the start was taken as is)."""
    a = RNG.standard_normal((7, 3))
    x = gc.placeholder(gc.float64, [None, None])
    with compiled_session() as sess, native():
        np.testing.assert_array_equal(sess.run(x[key], {x: a}), a[key])
        np.testing.assert_array_equal(sess.run(x[key], {x: a[:4]}), a[:4][key])


def test_column_sum_folds_every_iteration_of_the_loop_it_runs_in():
    """The gradient of broadcast_to sums over axes the input does not vary along: the
    accumulating loop ran only over the dims its value depended on (half the sum)."""
    xv = RNG.standard_normal((3, 1))
    x = gc.placeholder(gc.float64, [3, 1])
    dx = gc.gradients(gc.reduce_sum(gc.square(gc.broadcast_to(x, [2, 3, 2]))), x)[0]
    with compiled_session() as sess, native():
        np.testing.assert_allclose(sess.run(dx, {x: xv}), 8 * xv)


def test_a_folded_scalar_fetch_stays_a_scalar():
    x = gc.placeholder(gc.float64, [3])
    g = gc.gradients(gc.reduce_sum(-x), x)[0]
    total = gc.reduce_sum(g * gc.constant(np.ones(3)))  # constant folds to a 0-d Const
    with compiled_session() as sess, native():
        got = sess.run(total, {x: np.ones(3)})
    assert np.shape(got) == () and got == -3.0


def test_placeholder_with_default_has_the_dims_of_its_default():
    """An unfed placeholder_with_default is its input: its declared [None] shape made
    add_n loop over the fed size and read past the default's end."""
    c = gc.placeholder(gc.float32, [None])
    d = gc.placeholder_with_default([1.0, 2.0], [None])
    with compiled_session() as sess, native():
        np.testing.assert_array_equal(sess.run(gc.add_n([c, d]), {c: [1.0, 1.0]}), [2, 3])
        with pytest.raises(gc.errors.InvalidArgumentError, match="same size and shape"):
            sess.run(gc.add_n([c, d]), {c: [1.0, 2.0, 3.0]})


# ----------------------------------------------------- run-time errors name the op
@pytest.mark.parametrize("build,feeds,match", [
    (lambda x, y: x + y, ([1.0, 2.0], [1.0, 2.0, 3.0]), r"Incompatible shapes: \[2\] vs. \[3\]"),
    (lambda x, y: gc.matmul(gc.reshape(x, [1, -1]), gc.reshape(y, [-1, 1])),
     ([1.0, 2.0], [1.0, 2.0, 3.0]), "Matrix size-incompatible"),
    (lambda x, y: gc.reshape(x, gc.shape(y)), ([1.0, 2.0], [1.0, 2.0, 3.0]),
     "tensor with 2 values, but the requested shape has 3"),
])
def test_shape_errors_for_the_fed_sizes_are_the_reference_kernels_errors(build, feeds, match):
    x, y = gc.placeholder(gc.float32, [None]), gc.placeholder(gc.float32, [None])
    out = build(x, y)
    with compiled_session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match=match) as e:
            sess.run(out, {x: feeds[0], y: feeds[1]})
        assert out.op.name in str(e.value)
        with native():  # and the Session still compiles the good sizes
            sess.run(out, {x: feeds[0], y: feeds[0]})


def test_bad_indices_report_the_position_and_value_found_at_run_time():
    params = gc.placeholder(gc.float32, [None, 3])
    idx = gc.placeholder(gc.int64, [None, None])
    labels = gc.placeholder(gc.int32, [None])
    out = gc.gather(params, idx)
    xent = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=params)
    p = np.arange(6, dtype=np.float32).reshape(2, 3)
    with compiled_session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError,
                           match=r"indices\[1,0\] = 7 is not in \[0, 2\)"):
            sess.run(out, {params: p, idx: [[0, 1], [7, -1]]})  # the first bad one
        with pytest.raises(gc.errors.InvalidArgumentError,
                           match=r"label value of 3 which is outside the valid range of "
                                 r"\[0, 3\)"):
            sess.run(xent, {params: p, labels: [0, 3]})
        with native():
            np.testing.assert_array_equal(sess.run(out, {params: p, idx: [[1], [0]]}),
                                          p[[[1], [0]]])


# ------------------------------------------------ shape values known at run time only
def test_shape_values_fed_at_run_time_specialize_the_code_on_them():
    """fill/zeros/range/slicing with fed sizes: the code is specialized on the small
    integer feed's value (guarded); the same value reuses it, a new one compiles again."""
    dims = gc.placeholder(gc.int32, [None])
    n = gc.placeholder(gc.int32, [])
    x = gc.placeholder(gc.float64, [None, 3])
    a = RNG.standard_normal((5, 3))
    fetches = [gc.fill(dims, 7.0), gc.range(0, n, 2), x[1:n], gc.zeros(dims, gc.int64)]
    with compiled_session() as sess, native():
        got = sess.run(fetches, {dims: [2, 3], n: 4, x: a})
        np.testing.assert_array_equal(got[0], np.full((2, 3), 7.0, np.float32))
        np.testing.assert_array_equal(got[1], np.arange(0, 4, 2))
        np.testing.assert_array_equal(got[2], a[1:4])
        assert got[3].shape == (2, 3) and not got[3].any()
        count = sess.compile_count
        sess.run(fetches, {dims: [2, 3], n: 4, x: a[:4]})
        assert sess.compile_count == count
        got = sess.run(fetches, {dims: [4, 1], n: 5, x: a})
        assert sess.compile_count == count + 1
        assert got[0].shape == (4, 1) and got[2].shape == (4, 3)
        np.testing.assert_array_equal(got[1], [0, 2, 4])


def test_integer_feeds_that_shapes_do_not_read_are_not_specialized():
    params = gc.placeholder(gc.float32, [4, 2])
    idx = gc.placeholder(gc.int32, [None])
    out = gc.gather(params, idx)
    p = np.arange(8, dtype=np.float32).reshape(4, 2)
    with compiled_session() as sess, native():
        sess.run(out, {params: p, idx: [0, 1, 2]})
        count = sess.compile_count
        for i in ([3, 2, 1], [0, 0, 0], [1, 3, 3]):
            np.testing.assert_array_equal(sess.run(out, {params: p, idx: i}), p[i])
        assert sess.compile_count == count


@pytest.mark.parametrize("feed,match", [
    ([5], "tensor with 6 values, but the requested shape has 5"),
    ([-1, 4], "requires a multiple of 4"),
    ([-1, -1], "Only one input size may be -1"),
])
def test_a_bad_fed_shape_value_is_the_reference_error(feed, match):
    x = gc.placeholder(gc.float32, [None, 3])
    s = gc.placeholder(gc.int32, [None])
    with compiled_session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match=match):
            sess.run(gc.reshape(x, s), {x: np.zeros((2, 3), np.float32), s: feed})


def test_shape_element_and_concat_axis_given_at_run_time():
    x = gc.placeholder(gc.float32, [None, 3])
    i = gc.placeholder(gc.int32, [])
    axis = gc.placeholder(gc.int32, [])
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    y = gc.reshape(x, gc.stack([gc.shape(x)[i], -1]))
    z = gc.concat([x, x], axis)
    with compiled_session() as sess, native():
        assert sess.run(y, {x: a, i: 1}).shape == (3, 2)
        np.testing.assert_array_equal(sess.run(z, {x: a, axis: -1}), np.concatenate([a, a], -1))
        np.testing.assert_array_equal(sess.run(z, {x: a, axis: 0}), np.concatenate([a, a], 0))


def test_shapes_computed_from_data_fall_back_rather_than_guess():
    """A size that is a reduction of data is unknown until the run: no loop bound can be
    generated for it, so that signature runs on the reference executor (with a warning)."""
    k = gc.placeholder(gc.float32, [3])  # data: never specialized on
    z = gc.zeros(gc.stack([gc.cast(gc.reduce_sum(k), gc.int32)]))
    m = lower([k], [z], [], [(3,)])
    optimize(m)
    with pytest.raises(LoweringError, match="depend on run-time data"):
        generate(m)
    with compiled_session() as sess:
        with pytest.warns(RuntimeWarning, match="reference executor"):
            assert sess.run(z, {k: [1, 2, 3]}).shape == (6,)


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("reduce,axis", [(gc.reduce_mean, [0, 2]), (gc.reduce_max, -1),
                                         (gc.reduce_prod, 1)])
def test_reduction_gradients_of_unknown_rank_compile(reduce, axis):
    """Their shape math (where(reduced, 1, shape(x))) goes through bool tensors, which
    static shape evaluation now follows."""
    xv = RNG.uniform(0.5, 1.5, (2, 3, 4))
    x = gc.placeholder(gc.float64)
    g = gc.gradients(reduce(x, axis), x)[0]
    with compiled_session() as sess, native():
        got = sess.run(g, {x: xv})
    with gc.Session(config=gc.ConfigProto(backend="reference")) as ref:
        np.testing.assert_allclose(got, ref.run(g, {x: xv}), rtol=1e-12)


# ------------------------------------------------------------------ variables
def test_variables_of_unknown_shape_are_specialized_on_the_shape_they_hold():
    v = gc.Variable(np.ones(3, np.float32), validate_shape=False, name="loose")
    grow = gc.assign(v, gc.zeros([5]), validate_shape=False)
    doubled = v * 2.0
    with compiled_session() as sess, native():
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(doubled), [2, 2, 2])
        assert sess.run(grow).shape == (5,)
        np.testing.assert_array_equal(sess.run(doubled), np.zeros(5))  # recompiled
        assert sess.run(v.assign_add(gc.ones([5]))).tolist() == [1] * 5


def test_reading_an_uninitialized_variable_of_unknown_shape_fails_cleanly():
    v = gc.Variable(np.ones(3, np.float32), validate_shape=False)
    with compiled_session() as sess:
        with pytest.raises(gc.errors.FailedPreconditionError, match="uninitialized"):
            sess.run(v * 2.0)
        sess.run(v.initializer)
        with native():
            np.testing.assert_array_equal(sess.run(v * 2.0), [2, 2, 2])
