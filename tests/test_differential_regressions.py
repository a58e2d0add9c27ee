"""Mismatches between backends found by the random-graph differential tester
(tools/difftest.py), each minimized and checked against NumPy on every backend."""
import numpy as np
import pytest

import graphc as tf
from tests.conftest import BACKENDS


def run(backend, fetches, feeds=None):
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feeds)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_and_unstack_into_one_piece_keep_the_shape(backend, dtype):
    # a multi-output kernel's one-element tuple was taken as one array: shape (1, 2, 2)
    x = np.arange(4, dtype=dtype).reshape(2, 2) - 1.5
    p = tf.placeholder(dtype, [2, 2])
    split = tf.split(p, 1, axis=0)[0]
    unstacked = tf.unstack(tf.expand_dims(p, 0), axis=0)[0]
    splitv = tf.split(p, [2], axis=1)[0]
    out = run(backend, [split, unstacked, splitv, tf.where(split > 0, split, -split)], {p: x})
    for got in out[:3]:
        assert got.shape == (2, 2) and got.dtype == dtype
        np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(out[3], np.abs(x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_over_an_empty_axis(backend, exclusive, reverse):
    # the reference kernel's exclusive shift took element 0 of an empty axis
    x = np.zeros((2, 3, 0), np.float64)
    p = tf.placeholder(tf.float64, [2, 3, 0])
    y = tf.placeholder(tf.float32, [2, 0, 3])
    out = run(backend, [tf.cumsum(p, axis=2, exclusive=exclusive, reverse=reverse),
                        tf.cumsum(y, axis=1, exclusive=exclusive, reverse=reverse)],
              {p: x, y: np.zeros((2, 0, 3), np.float32)})
    assert out[0].shape == (2, 3, 0) and out[0].dtype == np.float64
    assert out[1].shape == (2, 0, 3) and out[1].dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exclusive_reverse_cumsum_values(backend, dtype):
    x = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], dtype)
    p = tf.placeholder(dtype, [None, 3])
    out = run(backend, tf.cumsum(p, axis=1, exclusive=True, reverse=True), {p: x})
    want = np.flip(np.cumsum(np.flip(x, 1), 1), 1) - x
    np.testing.assert_allclose(out, want, rtol=1e-6 if dtype == np.float32 else 1e-15)


def _np_pool(x, k, s, reduce):
    """TF's SAME pooling over H and W (NHWC); padding cells are not counted."""
    n, h, w, c = x.shape
    oh, ow = -(-h // s[0]), -(-w // s[1])
    ph = max((oh - 1) * s[0] + k[0] - h, 0) // 2
    pw = max((ow - 1) * s[1] + k[1] - w, 0) // 2
    out = np.empty((n, oh, ow, c), x.dtype)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - ph, j * s[1] - pw
            win = x[:, max(r0, 0):r0 + k[0], max(c0, 0):c0 + k[1], :]
            out[:, i, j, :] = reduce(win, axis=(1, 2))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("h", [5, 7, 1])
def test_same_padding_with_an_unknown_dim_and_stride(backend, dtype, h):
    # ceil(h / s) is the dim -floordiv(-h, s); the native code evaluated it with LLVM's
    # truncating sdiv (one row short), so rows of the next image were read and written
    x = np.random.default_rng(h).uniform(-1, 1, (2, h, 3, 2)).astype(dtype)
    p = tf.placeholder(dtype, [2, None, 3, None])
    mx = tf.nn.max_pool(p, [1, 1, 1, 1], [1, 2, 1, 1], "SAME")
    avg = tf.nn.avg_pool(p, [1, 2, 2, 1], [1, 2, 1, 1], "SAME")
    conv = tf.nn.conv2d(p, tf.ones([1, 1, 2, 1], dtype), [1, 3, 2, 1], "SAME")
    out = run(backend, [mx, avg, conv + 1], {p: x})
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(out[0], _np_pool(x, (1, 1), (2, 1), np.max))
    np.testing.assert_allclose(out[1], _np_pool(x, (2, 2), (2, 1), np.mean), **tol)
    np.testing.assert_allclose(out[2], x[:, ::3, ::2, :].sum(-1, keepdims=True) + 1, **tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcast_of_a_dim_expression_that_is_one(backend, dtype):
    # split(x, [1, -1])[1] has the dim expression rows - 1; fed 2 rows it is 1 and
    # broadcasts, but codegen took only the constant 1 as broadcasting and read rows 1..4
    # of a one-row buffer
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-2, 2, (2, 5)).astype(dtype), rng.uniform(-2, 2, (5, 5)).astype(dtype)
    p, q = tf.placeholder(dtype, [None, None]), tf.placeholder(dtype, [5, 5])
    rest = tf.split(p, [1, -1], axis=0)[1]
    out = [tf.minimum(q, rest), rest * q + 1]
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        got = sess.run(out, {p: x, q: y})
        np.testing.assert_array_equal(got[0], np.minimum(y, x[1:]))
        np.testing.assert_allclose(got[1], x[1:] * y + 1, rtol=1e-6 if dtype == np.float32
                                   else 1e-15)
        # 6 rows: 5 rows left, no broadcast; the executable compiled for 2 rows must not run
        x6 = rng.uniform(-2, 2, (6, 5)).astype(dtype)
        np.testing.assert_array_equal(sess.run(out[0], {p: x6, q: y}), np.minimum(y, x6[1:]))
        with pytest.raises(tf.errors.InvalidArgumentError):
            sess.run(out[0], {p: rng.uniform(-2, 2, (3, 5)).astype(dtype), q: y})
        got = sess.run(out, {p: x, q: y})
        np.testing.assert_array_equal(got[0], np.minimum(y, x[1:]))


def test_scratch_size_of_a_dim_with_a_negative_term_covers_it():
    # ceil(h / 2) is the dim -floordiv(-h, 2): rounding each coefficient up to 64 bytes
    # took -8 to 0, a buffer of 0 bytes at the arena's start, over the feeds
    from graphc.compiler.schedule.memory_planning import buffer_bytes
    from graphc.framework.symbolic import SymDim

    class Value:
        dtype = tf.float64

    h = SymDim.symbol("x.1", 5)
    Value.dims = (-((-h) // 2), 3)
    size = buffer_bytes(Value)
    for v in range(0, 40):
        exact = 8 * 3 * -(-v // 2)
        assert exact <= size.evaluate({"x.1": v}) < exact + 64, v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pool", ["max_pool", "avg_pool"])
def test_pool_gradient_with_same_padding_and_unknown_dims(backend, pool):
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 3, 2))
    w = np.random.default_rng(2).uniform(-1, 1, (1, 2, 3, 2))
    other = np.arange(9, dtype=np.float32).reshape(3, 3)
    p, q = tf.placeholder(tf.float64, [None] * 4), tf.placeholder(tf.float32, [3, 3])
    y = getattr(tf.nn, pool)(p, [1, 1, 1, 1], [1, 2, 1, 1], "SAME")
    grad = tf.gradients(tf.reduce_sum(y * w), p)[0]
    got = run(backend, [q + q, grad], {p: x, q: other})
    np.testing.assert_array_equal(got[0], other * 2)
    want = np.zeros_like(x)
    want[:, ::2] = w           # a 1x1 window, stride 2 over rows: rows 0 and 2 get w
    np.testing.assert_array_equal(got[1], want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unstack_of_a_single_element_vector_gives_a_scalar(backend):
    # the kernel's one NumPy scalar in a tuple was taken as a 1-element array
    x = np.array([2.5], np.float64)
    p = tf.placeholder(tf.float64, [1])
    got = run(backend, [tf.unstack(p)[0] * 2, tf.unstack(tf.reshape(p, [1, 1]), axis=1)[0]],
              {p: x})
    assert got[0].shape == () and got[0] == 5.0
    np.testing.assert_array_equal(got[1], [2.5])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_over_rows_of_length_zero(backend, dtype):
    # the reference kernel took the max of an empty row (NumPy raises)
    p = tf.placeholder(dtype, [None, None])
    x = np.zeros((2, 0), dtype)
    got = run(backend, [tf.nn.softmax(p), tf.nn.log_softmax(p),
                        tf.nn.softmax_cross_entropy_with_logits_v2(labels=p, logits=p)], {p: x})
    assert got[0].shape == (2, 0) and got[1].shape == (2, 0)
    assert got[0].dtype == dtype and got[1].dtype == dtype
    np.testing.assert_array_equal(got[2], np.zeros(2, dtype))   # a sum over no classes


def test_shape_of_an_op_that_fails_at_run_time_is_its_static_shape():
    """TF's grappler takes Shape/Size of a fully defined static shape without running the
    producer (TF 2.21: size(cumsum(scalar, axis=0)) is 1, while the cumsum alone raises);
    the compiled backends fold it the same way, and so does the reference executor."""
    x = tf.placeholder(tf.float64, [])
    bad = tf.cumsum(x, axis=0)  # a scan over axis 0 of a scalar: an error when it runs
    fetches = [tf.size(bad), tf.shape(bad + 1.0), tf.rank(bad)]
    for backend in ("reference", "compiled", "gpu_emulated"):
        with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
            size, shape, rank = sess.run(fetches, {x: 1.5})
            assert (size, list(shape), rank) == (1, [], 0), backend
            with pytest.raises(tf.errors.InvalidArgumentError, match="scan axis"):
                sess.run(bad, {x: 1.5})


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_inputs_of_a_constant_run_when_the_graph_has_host_stages(backend):
    """A constant created under control_dependencies runs the block's assign (TF1's rule).
    With a host op in the run (Unique: its output size depends on the data), the run is
    split into stages; constants belong to no stage, so their control inputs were neither
    run nor waited for. Found by the differential tester (seed 77)."""
    x = tf.placeholder(tf.float64, [4])
    p = tf.placeholder(tf.int32, [])
    v = tf.Variable(np.int32(1))
    with tf.control_dependencies([tf.assign(v, p)]):
        c = tf.constant(3)
    with tf.control_dependencies([c]):  # a later read, waiting for the assign through c
        after = tf.identity(v) + 3
    distinct = tf.reduce_sum(tf.unique(x)[0])
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run([distinct, c], {x: [1.0, 2.0, 2.0, 5.0], p: -4}) == [8.0, 3]
        assert sess.run(v) == -4
        assert sess.run([distinct, after], {x: [1.0, 1.0, 1.0, 1.0], p: 7}) == [1.0, 10]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rank", [3, 7])
def test_argmax_over_unknown_dims_of_high_rank(backend, rank):
    """argmax over an unknown leading axis of a rank-3 input: its empty-axis check named
    the index, the size and the three dims (five run-time values) while compiled code
    keeps four, and the file verifier refused the compile. Found by the differential
    tester (CI seed). Up to eight values are kept now; beyond that the message shows the
    dims by name."""
    shape = [2, 3, 1, 2, 1, 1, 2][:rank]
    x = tf.placeholder(tf.float32, [None] * rank)
    y = tf.argmax(x, axis=-rank)
    xv = np.random.default_rng(rank).standard_normal(shape).astype(np.float32)
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: xv}), np.argmax(xv, axis=0))
        empty = np.zeros([0] + shape[1:], np.float32)
        with pytest.raises(tf.errors.InvalidArgumentError, match="Reduction axis 0 is empty"):
            sess.run(y, {x: empty})
