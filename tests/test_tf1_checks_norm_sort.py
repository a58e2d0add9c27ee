"""tf.assert_* (check_ops), tf.norm, tf.sort / tf.argsort and
tf.linalg.LinearOperatorLowerTriangular, against NumPy and TF1's documented behaviour."""
import numpy as np
import pytest

import graphc as tf
from tests.gradcheck import check_gradients


def _run(fetches, feed_dict=None):
    with tf.Session() as sess:
        return sess.run(fetches, feed_dict)


# ------------------------------------------------------------------------ check_ops
@pytest.mark.parametrize("assertion, good, bad", [
    (tf.assert_equal, ([1, 2], [1, 2]), ([1, 2], [1, 3])),
    (tf.assert_none_equal, ([1, 2], [3, 4]), ([1, 2], [3, 2])),
    (tf.assert_less, ([1, 2], [2, 3]), ([1, 2], [2, 2])),
    (tf.assert_less_equal, ([1, 2], [1, 3]), ([1, 4], [1, 3])),
    (tf.assert_greater, ([3, 4], [2, 3]), ([3, 3], [2, 3])),
    (tf.assert_greater_equal, ([3, 3], [2, 3]), ([3, 2], [2, 3])),
])
def test_binary_assertions_fail_the_run_only_when_the_relation_breaks(assertion, good, bad):
    x = tf.placeholder(tf.int32, [None])
    y = tf.placeholder(tf.int32, [None])
    check = assertion(x, y, message="custom text")
    with tf.control_dependencies([check]):
        out = tf.identity(x)
    np.testing.assert_array_equal(_run(out, {x: good[0], y: good[1]}), good[0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="custom text"):
        _run(out, {x: bad[0], y: bad[1]})
    empty = np.zeros(0, np.int32)  # no element breaks it: holds, as np.all([]) does
    np.testing.assert_array_equal(_run(out, {x: empty, y: empty}), empty)


def test_assertions_on_constants_fail_when_the_graph_is_built():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Condition x <= y"):
        tf.assert_less_equal(tf.constant([1.0, 5.0]), 4.0)
    assert tf.assert_less_equal(tf.constant([1.0, 4.0]), 4.0).type == "Assert"


@pytest.mark.parametrize("assertion, good, bad", [
    (tf.assert_positive, [1.0, 0.5], [1.0, 0.0]),
    (tf.assert_negative, [-1.0, -0.5], [-1.0, 0.0]),
    (tf.assert_non_negative, [0.0, 2.0], [0.0, -2.0]),
    (tf.assert_non_positive, [0.0, -2.0], [0.0, 2.0]),
])
def test_sign_assertions(assertion, good, bad):
    x = tf.placeholder(tf.float64, [None])
    with tf.control_dependencies([assertion(x)]):
        out = tf.identity(x)
    np.testing.assert_array_equal(_run(out, {x: good}), good)
    with pytest.raises(tf.errors.InvalidArgumentError):
        _run(out, {x: bad})


def test_assert_rank_checks_static_ranks_now_and_unknown_ones_at_run_time():
    with pytest.raises(ValueError, match="must have rank 2.  Received rank 1"):
        tf.assert_rank(tf.zeros([3]), 2)
    assert tf.assert_rank(tf.zeros([3, 1]), 2).type == "NoOp"
    with pytest.raises(ValueError, match="must have rank at least 3"):
        tf.assert_rank_at_least(tf.zeros([3, 1]), 3)
    x = tf.placeholder(tf.float32)
    with tf.control_dependencies([tf.assert_rank(x, 2)]):
        out = tf.identity(x)
    assert _run(out, {x: np.ones((2, 3))}).shape == (2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank"):
        _run(out, {x: np.ones(3)})
    with pytest.raises(ValueError, match="rank must be an integer scalar"):
        tf.assert_rank(x, [1, 2])


# ------------------------------------------------------------------------------ norm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ord_, axis", [
    ("euclidean", None), (2, 0), (1, 1), (np.inf, -1), (3, 2), (0.5, 1),
    ("fro", (0, 2)), ("euclidean", (1, 2)), (1, (1, 2)), (np.inf, (2, 1))])
def test_norm_matches_numpy(dtype, ord_, axis):
    x = np.random.RandomState(0).randn(3, 4, 5).astype(dtype)
    got = _run(tf.norm(x, ord=ord_, axis=axis))
    if axis is None:
        expected = np.linalg.norm(x.ravel())
    elif isinstance(axis, tuple):
        expected = np.linalg.norm(x, ord="fro" if ord_ == "euclidean" else ord_, axis=axis)
    else:
        expected = np.linalg.norm(x, ord=2 if ord_ == "euclidean" else ord_, axis=axis)
    assert got.dtype == dtype and got.shape == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_norm_keepdims_zero_size_and_bad_arguments():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert _run(tf.norm(x, keepdims=True)).shape == (1, 1, 1)
    assert _run(tf.norm(x, axis=(0, 2), keepdims=True)).shape == (1, 3, 1)
    assert _run(tf.norm(x, axis=1, keepdims=True)).shape == (2, 1, 4)
    np.testing.assert_array_equal(_run(tf.norm(np.zeros((0, 3)), axis=0)), np.zeros(3))
    assert _run(tf.norm(np.zeros((2, 0)), axis=1)).shape == (2,)
    with pytest.raises(ValueError, match="'axis' must be None, an integer, or a tuple"):
        tf.norm(x, axis=(1, 1))
    with pytest.raises(ValueError, match="supported vector norm"):
        tf.norm(x, ord="fro", axis=1)
    with pytest.raises(ValueError, match="needs an SVD"):
        tf.norm(x, ord=2, axis=(1, 2))
    with pytest.raises(TypeError, match="floating point"):
        tf.norm(np.arange(3))


@pytest.mark.parametrize("ord_, axis", [("euclidean", None), (1, 1), (3, 0),
                                        ("fro", (0, 1)), (np.inf, (0, 1))])
def test_norm_gradient(ord_, axis):
    x = np.random.RandomState(2).randn(3, 4) + 0.1  # away from the kinks of |x| and max
    check_gradients(lambda t: tf.norm(t, ord=ord_, axis=axis), [x])


# ------------------------------------------------------------------------- sort / argsort
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_sort_and_argsort_match_a_stable_numpy_sort(dtype, axis):
    x = np.random.RandomState(1).randint(-4, 5, size=(3, 6, 5)).astype(dtype)  # many ties
    ascending = _run(tf.sort(x, axis=axis))
    descending = _run(tf.sort(x, axis=axis, direction="DESCENDING"))
    up_idx = _run(tf.argsort(x, axis=axis))
    down_idx = _run(tf.argsort(x, axis=axis, direction="DESCENDING"))
    np.testing.assert_array_equal(ascending, np.sort(x, axis=axis))
    np.testing.assert_array_equal(descending, np.flip(np.sort(x, axis=axis), axis))
    np.testing.assert_array_equal(up_idx, np.argsort(x, axis=axis, kind="stable"))
    # descending, ties in index order (top_k's): a stable sort of -x
    np.testing.assert_array_equal(down_idx, np.argsort(-x, axis=axis, kind="stable"))
    assert ascending.dtype == dtype and up_idx.dtype == np.int32


def test_sort_edge_cases():
    assert _run(tf.sort(np.zeros((2, 0), np.float32))).shape == (2, 0)
    np.testing.assert_array_equal(_run(tf.sort(np.array([3.0]))), [3.0])
    with pytest.raises(ValueError, match="direction must be"):
        tf.sort([1.0, 2.0], direction="UP")
    with pytest.raises(ValueError, match="axis must be an int in"):
        tf.sort([1.0, 2.0], axis=1)
    with pytest.raises(ValueError, match="rank >= 1"):
        tf.sort(1.0)


# ------------------------------------------------------- LinearOperatorLowerTriangular
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_operator_lower_triangular(dtype):
    rng = np.random.RandomState(3)
    tril = rng.randn(2, 4, 4).astype(dtype)
    x = rng.randn(2, 4, 3).astype(dtype)
    op = tf.linalg.LinearOperatorLowerTriangular(tril)
    dense, product, adjoint, det, log_det, diag = _run(
        [op.to_dense(), op.matmul(x), op.matmul(x, adjoint=True), op.determinant(),
         op.log_abs_determinant(), op.diag_part()])
    lower = np.tril(tril)  # the entries above the diagonal are ignored
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_array_equal(dense, lower)
    np.testing.assert_allclose(product, lower @ x, rtol=tol, atol=tol)
    np.testing.assert_allclose(adjoint, np.swapaxes(lower, 1, 2) @ x, rtol=tol, atol=tol)
    np.testing.assert_allclose(det, np.linalg.det(lower), rtol=1e-4 if dtype == np.float32
                               else 1e-10)
    np.testing.assert_allclose(log_det, np.log(np.abs(np.linalg.det(lower))), rtol=tol,
                               atol=tol)
    np.testing.assert_array_equal(diag, np.diagonal(tril, axis1=1, axis2=2))
    assert op.shape.as_list() == [2, 4, 4] and op.batch_shape.as_list() == [2]
    with pytest.raises(ValueError, match="must be square"):
        tf.linalg.LinearOperatorLowerTriangular(np.ones((3, 2)))
    with pytest.raises(ValueError, match="rank >= 2"):
        tf.linalg.LinearOperatorLowerTriangular(np.ones(3))
