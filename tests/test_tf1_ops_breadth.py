"""TF1 ops graphc composes from its own (gather_nd, scatter_nd, boolean_mask, einsum,
conv1d, depthwise/separable conv, xw_plus_b, diag, matrix_band_part, sequence_mask, top_k,
in_top_k) and host ops (py_func, Print, print): each against a NumPy reference written
here, on every backend, in float32 and float64, with gradients by central differences."""
import numpy as np
import pytest

import graphc as tf
from tests.conftest import BACKENDS
from tests.gradcheck import check_gradients, run_graph

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
FLOATS = [np.float32, np.float64]
rng = np.random.default_rng(7)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


# -------------------------------------------------------------------- gather/scatter
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_nd(backend, dtype, index_dtype):
    params = rng.standard_normal((3, 4, 5)).astype(dtype)
    for indices in ([[1], [2], [0]], [[[2, 3], [0, 0]], [[1, 1], [2, 0]]], [[2, 3, 4], [0, 1, 2]],
                    np.zeros((0, 2))):
        ix = np.array(indices, dtype=index_dtype)
        out = run_graph(lambda p, i: tf.gather_nd(p, i), params, ix)
        expected = params[tuple(np.moveaxis(ix, -1, 0))]
        assert out.dtype == dtype and out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)


def test_gather_nd_rejects_out_of_range_indices(backend):
    params = np.arange(6.0).reshape(2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="GatherNd"):
        run_graph(lambda p, i: tf.gather_nd(p, i), params, np.array([[0, 3]], np.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="GatherNd"):
        run_graph(lambda p, i: tf.gather_nd(p, i), params, np.array([[-1, 0]], np.int32))
    with pytest.raises(ValueError, match="index depth 3"):
        tf.gather_nd(tf.constant(params), [[0, 0, 0]])


def test_gather_nd_gradient(backend):
    ix = np.array([[1, 2], [0, 0], [1, 2]], np.int32)  # a repeated index: gradients add
    check_gradients(lambda p: tf.gather_nd(p, ix), [rng.standard_normal((2, 3, 2))])


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_nd(backend, dtype):
    ix = np.array([[0, 1], [2, 0], [0, 1]], np.int32)
    updates = rng.standard_normal((3, 4)).astype(dtype)
    out = run_graph(lambda u: tf.scatter_nd(ix, u, [3, 2, 4]), updates)
    expected = np.zeros((3, 2, 4), dtype)
    np.add.at(expected, (ix[:, 0], ix[:, 1]), updates)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, **_tol(dtype))
    check_gradients(lambda u: tf.scatter_nd(ix, u, [3, 2, 4]), [updates.astype(np.float64)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="ScatterNd"):
        run_graph(lambda u: tf.scatter_nd([[3, 0]], u, [3, 2]), np.ones((1,), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_boolean_mask(backend, dtype):
    x = rng.standard_normal((3, 4, 2)).astype(dtype)
    mask = rng.random((3, 4)) > 0.5
    out = run_graph(lambda t, m: tf.boolean_mask(t, m), x, mask)
    np.testing.assert_array_equal(out, x[mask])
    mask1 = np.array([True, False, False, True])
    out = run_graph(lambda t: tf.boolean_mask(t, mask1, axis=1), x)
    np.testing.assert_array_equal(out, x[:, mask1])
    out = run_graph(lambda t: tf.boolean_mask(t, np.zeros(3, bool)), x)
    assert out.shape == (0, 4, 2)
    check_gradients(lambda t: tf.boolean_mask(t, mask), [x.astype(np.float64)])


# ------------------------------------------------------------------------------ einsum
EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
           ("ij->ji", [(3, 4)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("ij->", [(3, 4)]),
           ("i,j->ij", [(3,), (4,)]), ("ij,ij->i", [(3, 4), (3, 4)]),
           ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
           ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]), ("ij,jk,k->i", [(3, 4), (4, 5), (5,)]),
           ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]), ("ij,jk", [(0, 4), (4, 5)])]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("equation,shapes", EINSUMS)
def test_einsum(backend, dtype, equation, shapes):
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    out = run_graph(lambda *xs: tf.einsum(equation, *xs), *ops)
    expected = np.einsum(equation, *ops)
    assert out.dtype == dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, **_tol(dtype))


@pytest.mark.parametrize("equation,shapes", [EINSUMS[1], EINSUMS[3], EINSUMS[10]])
def test_einsum_gradient(backend, equation, shapes):
    check_gradients(lambda *xs: tf.einsum(equation, *xs),
                    [rng.standard_normal(s) for s in shapes])


def test_einsum_errors(backend):
    with pytest.raises(ValueError, match="size 4 in one operand and 5"):
        tf.einsum("ij,jk->ik", tf.ones([3, 4]), tf.ones([5, 2]))
    with pytest.raises(ValueError, match="output subscripts"):
        tf.einsum("ij->iz", tf.ones([3, 4]))
    with pytest.raises(ValueError, match="2 inputs but 1"):
        tf.einsum("ij,jk->ik", tf.ones([3, 4]))
    with pytest.raises(TypeError, match="equation must be a string"):
        tf.einsum(tf.ones([3, 4]), tf.ones([4, 3]))


# ------------------------------------------------------------------------ convolutions
def _conv2d_ref(x, w, stride, padding, rate=1):
    """NHWC cross-correlation, TF's SAME padding (the extra pad after)."""
    n, h, wd, _ = x.shape
    kh, kw = (w.shape[0] - 1) * rate + 1, (w.shape[1] - 1) * rate + 1
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-wd // stride)
        ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - wd, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, oh, ow, w.shape[3]), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh:rate, j * stride:j * stride + kw:rate, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def _depthwise_ref(x, w, stride, padding, rate=1):
    outs = [_conv2d_ref(x[..., c:c + 1], w[:, :, c:c + 1, :], stride, padding, rate)
            for c in range(x.shape[3])]
    return np.concatenate(outs, axis=3)  # channel c*multiplier + m


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("stride,padding", [(1, "SAME"), (2, "VALID"), (2, "SAME")])
def test_conv1d(backend, dtype, stride, padding):
    x = rng.standard_normal((2, 7, 3)).astype(dtype)
    w = rng.standard_normal((3, 3, 4)).astype(dtype)
    out = run_graph(lambda a, b: tf.nn.conv1d(a, b, stride, padding), x, w)
    expected = _conv2d_ref(x[:, None], w[None], stride, padding)[:, 0]
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, **_tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("stride,padding,rate", [(1, "SAME", 1), (2, "VALID", 1),
                                                 (1, "VALID", 2)])
def test_depthwise_and_separable_conv2d(backend, dtype, stride, padding, rate):
    x = rng.standard_normal((2, 6, 7, 3)).astype(dtype)
    w = rng.standard_normal((3, 3, 3, 2)).astype(dtype)
    p = rng.standard_normal((1, 1, 6, 4)).astype(dtype)
    strides = [1, stride, stride, 1]
    rates = None if rate == 1 else [rate, rate]
    out = run_graph(lambda a, b: tf.nn.depthwise_conv2d(a, b, strides, padding, rate=rates),
                    x, w)
    expected = _depthwise_ref(x, w, stride, padding, rate)
    np.testing.assert_allclose(out, expected, **_tol(dtype))
    out = run_graph(lambda a, b, c: tf.nn.separable_conv2d(a, b, c, strides, padding,
                                                           rate=rates), x, w, p)
    np.testing.assert_allclose(out, np.tensordot(expected, p[0, 0], axes=([3], [0])),
                               **_tol(dtype))


def test_depthwise_and_conv1d_gradients(backend):
    check_gradients(lambda a, b: tf.nn.depthwise_conv2d(a, b, [1, 1, 1, 1], "SAME"),
                    [rng.standard_normal((1, 3, 3, 2)), rng.standard_normal((2, 2, 2, 2))])
    check_gradients(lambda a, b: tf.nn.conv1d(a, b, 1, "VALID"),
                    [rng.standard_normal((1, 4, 2)), rng.standard_normal((2, 2, 3))])


@pytest.mark.parametrize("dtype", FLOATS)
def test_xw_plus_b(backend, dtype):
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in [(3, 4), (4, 2), (2,)])
    out = run_graph(lambda *a: tf.nn.xw_plus_b(*a), x, w, b)
    np.testing.assert_allclose(out, x @ w + b, **_tol(dtype))


# ---------------------------------------------------------------------- position masks
@pytest.mark.parametrize("dtype", FLOATS)
def test_diag_and_diag_part(backend, dtype):
    d = rng.standard_normal(4).astype(dtype)
    np.testing.assert_array_equal(run_graph(tf.diag, d), np.diag(d))
    d2 = rng.standard_normal((2, 3)).astype(dtype)
    expected = np.zeros((2, 3, 2, 3), dtype)
    for i in range(2):
        for j in range(3):
            expected[i, j, i, j] = d2[i, j]
    out = run_graph(tf.diag, d2)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(run_graph(tf.diag_part, out), d2)
    # an inf on the diagonal stays there: no NaN off it
    np.testing.assert_array_equal(run_graph(tf.diag, np.array([np.inf, 1.0], dtype)),
                                  [[np.inf, 0], [0, 1]])
    check_gradients(tf.diag, [rng.standard_normal(3)])
    check_gradients(tf.diag_part, [rng.standard_normal((3, 3))])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lower,upper", [(1, 0), (-1, 0), (0, -1), (0, 0), (2, 1), (-1, -1)])
def test_matrix_band_part(backend, dtype, lower, upper):
    x = rng.standard_normal((2, 4, 5)).astype(dtype)
    x[0, 3, 0] = np.inf  # outside most bands: must become 0, not NaN
    m, n = np.indices((4, 5))
    keep = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    out = run_graph(lambda a: tf.matrix_band_part(a, lower, upper), x)
    np.testing.assert_array_equal(out, np.where(keep, x, 0))
    check_gradients(lambda a: tf.matrix_band_part(a, lower, upper),
                    [rng.standard_normal((3, 4))])


@pytest.mark.parametrize("dtype", [tf.bool, tf.float32, tf.int32])
def test_sequence_mask(backend, dtype):
    lengths = np.array([[1, 3], [0, 2]], np.int32)
    out = run_graph(lambda n: tf.sequence_mask(n, 4, dtype=dtype), lengths)
    expected = np.arange(4) < lengths[..., None]
    assert out.dtype == dtype.np and out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out, expected.astype(dtype.np))
    out = run_graph(lambda n: tf.sequence_mask(n), lengths[0])  # maxlen = max length
    np.testing.assert_array_equal(out, [[True, False, False], [True, True, True]])


# ----------------------------------------------------------------------- top_k, in_top_k
@pytest.mark.parametrize("dtype", FLOATS + [np.int32])
def test_top_k(backend, dtype):
    x = np.array([[1, 3, 3, 2, 0], [5, 5, 5, 1, 7]], dtype)
    values, indices = run_graph(lambda a: tf.nn.top_k(a, k=3), x)
    np.testing.assert_array_equal(indices, [[1, 2, 3], [4, 0, 1]])  # ties: lower index first
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, -1))
    assert indices.dtype == np.int32 and values.dtype == dtype
    big = rng.standard_normal((3, 4, 9)).astype(dtype)
    values, indices = run_graph(lambda a: tf.nn.top_k(a, 4), big)
    np.testing.assert_array_equal(values, -np.sort(-big, axis=-1)[..., :4])


def test_top_k_gradient_and_errors(backend):
    check_gradients(lambda a: tf.nn.top_k(a, 2)[0] * 1.0, [rng.standard_normal((3, 5))])
    with pytest.raises(ValueError, match="last dimension >= k"):
        tf.nn.top_k(tf.ones([2, 3]), 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least k columns"):
        run_graph(lambda a, k: tf.nn.top_k(a, k)[0], np.ones((2, 3)), np.int32(5))


def test_in_top_k(backend):
    pred = np.array([[0.1, 0.5, 0.5, 0.2], [0.9, 0.0, 0.3, 0.3], [0.1, np.nan, 0.2, 0.3],
                     [0.4, 0.3, 0.2, 0.1]], np.float32)
    targets = np.array([2, 3, 0, 4], np.int32)  # tie at the edge; NaN row; out of range
    out = run_graph(lambda p, t: tf.nn.in_top_k(p, t, 1), pred, targets)
    np.testing.assert_array_equal(out, [True, False, False, False])
    out = run_graph(lambda p, t: tf.nn.in_top_k(p, t, 2), pred, targets)
    np.testing.assert_array_equal(out, [True, True, False, False])
    # against a NumPy reference: fewer than k entries strictly larger than the target's
    p = rng.standard_normal((20, 6)).astype(np.float32)
    t = rng.integers(0, 6, 20).astype(np.int64)
    for k in (0, 1, 3, 6):
        expected = (p > p[np.arange(20), t][:, None]).sum(1) < k
        np.testing.assert_array_equal(run_graph(lambda a, b: tf.nn.in_top_k(a, b, k), p, t),
                                      expected)


# ----------------------------------------------------------------------- host ops
def test_py_func(backend):
    x = tf.placeholder(tf.float32, [3])
    doubled = tf.py_func(lambda a: (a * 2).astype(np.float32), [x * 1.5], tf.float32)
    both = tf.py_func(lambda a, b: [a + b, np.int64(a.size)], [x, doubled],
                      [tf.float32, tf.int64])
    y = both[0] * 10.0 + tf.reduce_sum(doubled)  # native code after the host stage
    with tf.Session() as sess:
        yv, n = sess.run([y, both[1]], {x: [1.0, 2.0, 3.0]})
    np.testing.assert_allclose(yv, np.array([4, 8, 12]) * 10.0 + 18.0)
    assert n == 3 and isinstance(both, list)
    np_fn = tf.numpy_function(lambda a: a.astype(np.int32), [x], tf.int32)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(np_fn, {x: [1.0, 2.0, 3.0]}), [1, 2, 3])


def test_py_func_errors(backend):
    x = tf.constant([1.0, 2.0])
    wrong = tf.py_func(lambda a: a.astype(np.float64), [x], tf.float32)

    def fails(a):
        raise ValueError("bad value in my function")
    raising = tf.py_func(fails, [x], tf.float32, name="my_func")
    count = tf.py_func(lambda a: [a, a], [x], [tf.float32])
    with pytest.raises(TypeError, match="func must be callable"):
        tf.py_func("not a function", [x], tf.float32)
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="is float64, but expects "
                                                                 "float32"):
            sess.run(wrong)
        with pytest.raises(tf.errors.InvalidArgumentError, match="(?s)bad value.*my_func"):
            sess.run(raising)
        with pytest.raises(tf.errors.InvalidArgumentError, match="returned 2 values, but 1"):
            sess.run(count)


def test_print_logs_and_passes_through(backend, capsys):
    x = tf.placeholder(tf.float32, [5])
    y = tf.Print(x, [x, tf.constant(7)], "values: ", first_n=2) * 2.0
    with tf.Session() as sess:
        for _ in range(3):
            out = sess.run(y, {x: [1.0, 2.5, 3.0, 4.0, 5.0]})
    np.testing.assert_allclose(out, [2.0, 5.0, 6.0, 8.0, 10.0])
    assert capsys.readouterr().err.splitlines() == ["values: [1 2.5 3...][7]"] * 2
    check_gradients(lambda a: tf.Print(a, [a]) * a, [rng.standard_normal(3)])


def test_print_v2(backend, capsys, tmp_path):
    import sys
    x = tf.constant([[1, 2], [3, 4]])
    op = tf.print("x =", x, 1.5, output_stream=sys.stdout, sep="|")
    with tf.Session() as sess:
        sess.run(op)
    assert capsys.readouterr().out == "x =|[[1 2]\n [3 4]]|1.5\n"
    path = tmp_path / "log.txt"
    with tf.control_dependencies([tf.print(tf.range(10), output_stream=f"file://{path}")]):
        y = tf.identity(tf.constant(1))
    with tf.Session() as sess:
        assert sess.run(y) == 1
    assert path.read_text() == "[0 1 2 ... 7 8 9]\n"


# --------------------------------------------------------------- lrn, zero_fraction
def _lrn_ref(x, r, bias, alpha, beta):
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0)] * 3 + [(r, r)])
    sums = sum(sq[..., i:i + x.shape[3]] for i in range(2 * r + 1))
    return x / (bias + alpha * sums) ** beta


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("radius,bias,alpha,beta", [(5, 1.0, 1.0, 0.5), (2, 1.0, 1e-3 / 9, 0.75),
                                                    (0, 2.0, 0.5, 1.0)])
def test_lrn(backend, dtype, radius, bias, alpha, beta):
    x = rng.standard_normal((2, 3, 2, 7)).astype(dtype)
    out = run_graph(lambda a: tf.nn.lrn(a, radius, bias=bias, alpha=alpha, beta=beta), x)
    np.testing.assert_allclose(out, _lrn_ref(x, radius, bias, alpha, beta),
                               rtol=2e-6 if dtype == np.float32 else 1e-13, atol=1e-7)


def test_lrn_gradient(backend):
    check_gradients(lambda a: tf.nn.local_response_normalization(a, 1, 1.0, 0.3, 0.75),
                    [rng.standard_normal((1, 2, 2, 4))])


@pytest.mark.parametrize("dtype", FLOATS + [np.int32])
def test_zero_fraction(backend, dtype):
    x = np.array([[0, 1, 0], [2, 0, 3]], dtype)
    out = run_graph(tf.nn.zero_fraction, x)
    assert out.dtype == np.float32 and out == np.float32(0.5)


def test_top_level_summary_proto(backend):
    s = tf.Summary(value=[tf.Summary.Value(tag="loss", simple_value=0.25)])
    assert s.value[0].tag == "loss" and s.value[0].simple_value == 0.25
    assert tf.Summary is tf.summary.Summary


# ------------------------------------------------------------------------ multinomial
@pytest.mark.parametrize("dtype", FLOATS)
def test_multinomial_frequencies(backend, dtype):
    with np.errstate(divide="ignore"):  # log(0) = -inf: a class that is never drawn
        logits = np.log(np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]], dtype))
    n = 4000
    draws = run_graph(lambda lg: tf.multinomial(lg, n, seed=7), logits)
    assert draws.shape == (2, n) and draws.dtype == np.int64
    assert not (draws[0] == 3).any()  # probability 0 (logit -inf): never drawn
    for row, p in zip(draws, np.exp(logits.astype(np.float64))):
        freq = np.bincount(row, minlength=4) / n
        # 5 standard deviations of a binomial proportion
        np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-12)
    again = run_graph(lambda lg: tf.random.categorical(lg, n, seed=7, dtype=tf.int32), logits)
    assert again.dtype == np.int32
