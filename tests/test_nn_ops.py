"""gc.nn: activations, softmax, bias_add, dropout, cross entropies, norms, embeddings."""
import math

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph

RNG = np.random.default_rng(1234)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
np_erf = np.vectorize(math.erf)


def away_from_kinks(shape, kinks=(0.0,), seed=0):
    """Random values at least 0.1 from every kink, so finite differences are smooth."""
    x = np.random.default_rng(seed).uniform(-3, 3, size=shape)
    for k in kinks:
        close = np.abs(x - k) < 0.1
        x[close] += 0.25
    return x


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


# ------------------------------------------------------------------------------ activations
ACTIVATIONS = [
    # name, gc function, numpy expectation, kinks
    ("relu", gc.nn.relu, lambda x: np.where(x > 0, x, 0.0), (0.0,)),
    ("relu6", gc.nn.relu6, lambda x: np.minimum(np.maximum(x, 0.0), 6.0), (0.0, 6.0)),
    ("leaky_relu", gc.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x), (0.0,)),
    ("leaky_relu_0.5", lambda x: gc.nn.leaky_relu(x, alpha=0.5),
     lambda x: np.where(x > 0, x, 0.5 * x), (0.0,)),
    ("elu", gc.nn.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1), (0.0,)),
    ("selu", gc.nn.selu,
     lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1)), (0.0,)),
    ("softplus", gc.nn.softplus, lambda x: np.log(1 + np.exp(x)), ()),
    ("softsign", gc.nn.softsign, lambda x: x / (1 + np.abs(x)), (0.0,)),
    ("sigmoid", gc.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), ()),
    ("tanh", gc.nn.tanh, np.tanh, ()),
    ("gelu", gc.nn.gelu, lambda x: 0.5 * x * (1 + np_erf(x / np.sqrt(2))), ()),
    ("gelu_tanh", lambda x: gc.nn.gelu(x, approximate=True),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), ()),
]
ACT_IDS = [a[0] for a in ACTIVATIONS]


@pytest.mark.parametrize("name,fn,expect,kinks", ACTIVATIONS, ids=ACT_IDS)
@pytest.mark.parametrize("shape", [[1], [7], [3, 5, 7]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_values(name, fn, expect, kinks, shape, dtype):
    x = (RNG.standard_normal(shape) * 4).astype(dtype)
    x.reshape(-1)[0] = 7.5  # above relu6's cap
    out = run_graph(fn, x)
    assert out.dtype == dtype and out.shape == x.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expect(x.astype(np.float64)), rtol=tol, atol=tol)


@pytest.mark.parametrize("name,fn,expect,kinks", ACTIVATIONS, ids=ACT_IDS)
def test_activation_shapes(name, fn, expect, kinks):
    y = fn(gc.placeholder(gc.float32, [None, 3]))
    assert y.shape.as_list() == [None, 3] and y.dtype == gc.float32
    assert fn(gc.placeholder(gc.float32)).shape.ndims is None


@pytest.mark.parametrize("name,fn,expect,kinks", ACTIVATIONS, ids=ACT_IDS)
def test_activation_gradients(name, fn, expect, kinks):
    x = away_from_kinks([2, 3], kinks)
    if name == "relu6":
        x[0, 0] = 6.7
    check_gradients(fn, [x])
    check_second_order(fn, [x], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_keeps_its_relative_accuracy_for_negative_inputs(dtype):
    # x * Phi(x) is tiny but not 0 for x << 0: 0.5 * x * (1 + erf(x / sqrt 2)) cancels
    # (0 from x = -8.3 in float64), 0.5 * x * erfc(-x / sqrt 2) does not
    x = np.array([-38.0, -20.0, -10.0, -8.0, -6.0, -3.0, -1.0, -1e-30, 0.0, 0.5, 2.0, 9.0],
                 dtype)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    got = run_graph(gc.nn.gelu, x)
    assert got.dtype == dtype
    # erfc's condition number at -x/sqrt 2 is about x^2: rounding x/sqrt 2 to the dtype
    # alone moves the result by that many ulps
    eps = np.finfo(dtype).eps
    bound = 2 * eps * np.maximum(1, x.astype(np.float64) ** 2) * np.abs(want)
    want = want.astype(dtype).astype(np.float64)
    error = np.abs(got.astype(np.float64) - want)
    assert np.all(error <= bound), list(zip(x, got, want, error / np.maximum(bound, 1e-300)))


def test_activations_extremes_are_finite():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], np.float32)
    for fn in (gc.nn.softplus, gc.nn.elu, gc.nn.selu, gc.nn.softsign):
        out = run_graph(fn, x)
        assert np.all(np.isfinite(out)), fn
    np.testing.assert_allclose(run_graph(gc.nn.softplus, x), [0, 0, np.log(2), 50, 1000],
                               atol=1e-6)


def test_relu_integer_and_dtype_rules():
    np.testing.assert_array_equal(run_graph(gc.nn.relu, np.array([-3, 0, 4], np.int32)),
                                  [0, 0, 4])
    np.testing.assert_array_equal(run_graph(gc.nn.relu6, np.array([-3, 9, 4], np.int64)),
                                  [0, 6, 4])
    with pytest.raises(TypeError):
        gc.nn.elu(gc.constant([1, 2]))
    with pytest.raises(TypeError):
        gc.nn.softmax(gc.constant([1, 2]))
    y = gc.nn.leaky_relu(gc.constant([-2, 3]))  # integers are cast to float32, as in TF
    assert y.dtype == gc.float32
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y), [-0.4, 3.0])


# ------------------------------------------------------------------------------ softmax
@pytest.mark.parametrize("fn,expect", [(gc.nn.softmax, np_softmax),
                                       (gc.nn.log_softmax, np_log_softmax)],
                         ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", [([1], -1), ([7], 0), ([3, 7], -1), ([3, 7], 0),
                                        ([2, 5, 3], 1), ([2, 5, 3], -3), ([1, 1], 1)])
def test_softmax_values(fn, expect, shape, axis):
    x = RNG.standard_normal(shape) * 3
    np.testing.assert_allclose(run_graph(lambda t: fn(t, axis=axis), x), expect(x, axis),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run_graph(lambda t: fn(t, dim=axis), x), expect(x, axis),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [gc.nn.softmax, gc.nn.log_softmax])
def test_softmax_stable_for_huge_logits(fn):
    x = np.array([[1000.0, -1000.0, 999.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    out = run_graph(fn, x)
    assert np.all(np.isfinite(out))
    expect = np_softmax(x.astype(np.float64)) if fn is gc.nn.softmax else \
        np_log_softmax(x.astype(np.float64))
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [gc.nn.softmax, gc.nn.log_softmax])
def test_softmax_shapes_and_errors(fn):
    assert fn(gc.placeholder(gc.float32, [None, 4])).shape.as_list() == [None, 4]
    assert fn(gc.placeholder(gc.float32), axis=0).shape.ndims is None
    with pytest.raises(gc.errors.InvalidArgumentError):
        fn(gc.placeholder(gc.float32, [2, 3]), axis=2)
    with pytest.raises(ValueError):
        fn(gc.constant(1.0))
    with pytest.raises(ValueError):
        fn(gc.constant([1.0]), axis=0, dim=0)


@pytest.mark.parametrize("fn", [gc.nn.softmax, gc.nn.log_softmax])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_gradients(fn, axis):
    x = RNG.standard_normal([3, 4])
    check_gradients(lambda t: fn(t, axis=axis), [x])
    check_second_order(lambda t: fn(t, axis=axis), [x], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------ bias_add
@pytest.mark.parametrize("shape,fmt", [([1, 1], None), ([7, 3], "NHWC"), ([2, 3, 5, 7], None),
                                       ([2, 3, 5, 7], "NCHW"), ([3, 5, 2], "NCW"),
                                       ([2, 3, 5], "NWC")])
def test_bias_add_values(shape, fmt):
    x = RNG.standard_normal(shape)
    channel = 1 if fmt and fmt.startswith("NC") else len(shape) - 1
    b = RNG.standard_normal(shape[channel])
    bshape = [1] * len(shape)
    bshape[channel] = shape[channel]
    out = run_graph(lambda v, c: gc.nn.bias_add(v, c, data_format=fmt), x, b)
    np.testing.assert_allclose(out, x + b.reshape(bshape), rtol=1e-12)


def test_bias_add_shapes_and_errors():
    y = gc.nn.bias_add(gc.placeholder(gc.float32, [None, 5]), gc.placeholder(gc.float32, [5]))
    assert y.shape.as_list() == [None, 5]
    y = gc.nn.bias_add(gc.placeholder(gc.float32, [None, None]), gc.placeholder(gc.float32, [5]))
    assert y.shape.as_list() == [None, 5]
    y = gc.nn.bias_add(gc.placeholder(gc.float32, [None, 3, 4, 4]), gc.zeros([3]), "NCHW")
    assert y.shape.as_list() == [None, 3, 4, 4] and y.op.type == "BiasAdd"
    with pytest.raises(ValueError, match="Dimensions must be equal"):
        gc.nn.bias_add(gc.zeros([2, 3]), gc.zeros([4]))
    with pytest.raises(ValueError, match="rank 1"):
        gc.nn.bias_add(gc.zeros([2, 3]), gc.zeros([1, 3]))
    with pytest.raises(ValueError, match="at least rank 2"):
        gc.nn.bias_add(gc.zeros([3]), gc.zeros([3]))
    with pytest.raises(ValueError):
        gc.nn.bias_add(gc.zeros([2, 3]), gc.zeros([3]), data_format="HWC")
    with pytest.raises(TypeError):
        gc.nn.bias_add(gc.zeros([2, 3]), gc.zeros([3], dtype=gc.float64))


def test_bias_add_run_time_mismatch():
    x = gc.placeholder(gc.float32, [None, None])
    y = gc.nn.bias_add(x, gc.zeros([3]))
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError):
            sess.run(y, {x: np.zeros([2, 4], np.float32)})


@pytest.mark.parametrize("shape,fmt", [([3, 2], None), ([2, 3, 2, 1], "NCHW"),
                                       ([2, 1, 2, 3], "NHWC")])
def test_bias_add_gradients(shape, fmt):
    channel = 1 if fmt == "NCHW" else len(shape) - 1
    x, b = RNG.standard_normal(shape), RNG.standard_normal(shape[channel])
    fn = lambda v, c: gc.nn.bias_add(v, c, data_format=fmt)  # noqa: E731
    check_gradients(fn, [x, b])
    # second order through BiasAddGrad: d/dv of sum(dL/db * w) with L nonlinear in the output
    check_second_order(lambda v, c: gc.square(fn(v, c)), [x, b], rtol=1e-4, atol=1e-6)


def test_bias_add_gradient_is_sum_over_other_axes():
    x = gc.placeholder(gc.float64, [None, 3, 2])
    b = gc.placeholder(gc.float64, [3])
    y = gc.nn.bias_add(x, b, data_format="NCHW")
    gb, = gc.gradients(y * y, [b])
    xv, bv = RNG.standard_normal([4, 3, 2]), RNG.standard_normal(3)
    with gc.Session() as sess:
        out = sess.run(gb, {x: xv, b: bv})
    np.testing.assert_allclose(out, (2 * (xv + bv[:, None])).sum(axis=(0, 2)), rtol=1e-12)


# ------------------------------------------------------------------------------ dropout
def test_dropout_statistics_and_scaling():
    x = np.ones([101, 99], np.float32)
    gc.set_random_seed(7)
    y = gc.nn.dropout(gc.constant(x), 0.3, seed=3)
    with gc.Session() as sess:
        out = sess.run(y)
    assert set(np.unique(out)).issubset({0.0, np.float32(1 / 0.3)})
    kept = (out != 0).mean()
    assert abs(kept - 0.3) < 4 * np.sqrt(0.3 * 0.7 / x.size)
    np.testing.assert_allclose(out.mean(), 1.0, atol=0.05)  # expectation is preserved


def test_dropout_rate_argument():
    y = gc.nn.dropout(gc.ones([200, 51]), rate=0.75, seed=11)
    with gc.Session() as sess:
        out = sess.run(y)
    assert set(np.unique(out)).issubset({0.0, np.float32(4.0)})
    assert abs((out != 0).mean() - 0.25) < 0.03


def _dropout_mask(graph_seed, op_seed):
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(graph_seed)
        y = gc.nn.dropout(gc.ones([13, 17]), keep_prob=0.5, seed=op_seed)
        with gc.Session(graph=g) as sess:
            return sess.run(y), sess.run(y)


def test_dropout_reproducible_across_sessions():
    first, second_run = _dropout_mask(1, 2)
    again, _ = _dropout_mask(1, 2)
    other, _ = _dropout_mask(1, 3)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second_run)  # a new mask each run
    assert not np.array_equal(first, other)


def test_dropout_keep_prob_placeholder_and_unknown_batch():
    x = gc.placeholder(gc.float32, [None, 9])
    keep = gc.placeholder(gc.float32, [])
    y = gc.nn.dropout(x, keep, seed=5)
    assert y.shape.as_list() == [None, 9]
    xv = RNG.standard_normal([21, 9]).astype(np.float32)
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv, keep: 1.0}), xv)
        out = sess.run(y, {x: xv, keep: 0.5})
    kept = out != 0
    np.testing.assert_allclose(out[kept], 2 * xv[kept], rtol=1e-6)
    assert 0.3 < kept.mean() < 0.7


def test_dropout_keep_prob_one_is_identity_and_gradient():
    x = gc.placeholder(gc.float64, [3, 4])
    assert gc.nn.dropout(x, 1.0) is x
    y = gc.nn.dropout(x, 0.5, seed=1)
    gx, = gc.gradients(y, [x])
    xv = RNG.standard_normal([3, 4]) + 5
    with gc.Session() as sess:
        out, grad = sess.run([y, gx], {x: xv})
    np.testing.assert_allclose(grad, out / xv, rtol=1e-12)  # mask / keep_prob


def test_dropout_noise_shape_broadcasts():
    y = gc.nn.dropout(gc.ones([40, 6]), 0.5, noise_shape=[40, 1], seed=2)
    with gc.Session() as sess:
        out = sess.run(y)
    assert np.all((out == 0).all(axis=1) | (out == 2).all(axis=1))


def test_dropout_argument_errors():
    x = gc.ones([2, 3])
    with pytest.raises(ValueError):
        gc.nn.dropout(x, keep_prob=0.5, rate=0.5)
    with pytest.raises(ValueError):
        gc.nn.dropout(x)
    with pytest.raises(ValueError):
        gc.nn.dropout(x, 0.0)
    with pytest.raises(ValueError):
        gc.nn.dropout(x, 1.5)
    with pytest.raises(ValueError):
        gc.nn.dropout(x, rate=1.0)
    with pytest.raises(ValueError):
        gc.nn.dropout(gc.constant([1, 2]), 0.5)
    with pytest.raises(ValueError):
        gc.nn.dropout(x, gc.placeholder(gc.float32, [2]))


# ------------------------------------------------------------------------------ sparse xent
def np_sparse_xent(logits, labels):
    lp = np_log_softmax(logits.astype(np.float64))
    return -np.take_along_axis(lp, labels[..., None].astype(np.int64), axis=-1)[..., 0]


@pytest.mark.parametrize("batch,classes", [([1], 1), ([7], 3), ([3, 5], 7), ([], 4)])
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_sparse_xent_values(batch, classes, label_dtype):
    logits = RNG.standard_normal(batch + [classes]).astype(np.float32)
    labels = RNG.integers(0, classes, size=batch).astype(label_dtype)
    out = run_graph(lambda lo, la: gc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=la, logits=lo), logits, labels)
    assert out.shape == tuple(batch) and out.dtype == np.float32
    np.testing.assert_allclose(out, np_sparse_xent(logits, labels), rtol=1e-5, atol=1e-6)


def test_sparse_xent_stable_for_huge_logits():
    logits = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 0.0]], np.float32)
    out = run_graph(lambda lo: gc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=[1, 1], logits=lo), logits)
    np.testing.assert_allclose(out, [2000.0, 0.0])


def test_sparse_xent_shapes_and_errors():
    logits = gc.placeholder(gc.float32, [None, 5])
    labels = gc.placeholder(gc.int64, [None])
    loss = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    assert loss.shape.as_list() == [None]
    with pytest.raises(ValueError, match="named arguments"):
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    with pytest.raises(ValueError, match="Rank mismatch"):
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels=gc.zeros([3, 5], gc.int32),
                                                       logits=gc.zeros([3, 5]))
    with pytest.raises(ValueError, match="Shape mismatch"):
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels=gc.zeros([4], gc.int32),
                                                       logits=gc.zeros([3, 5]))
    with pytest.raises(ValueError):
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels=gc.zeros([], gc.int32),
                                                       logits=gc.constant(1.0))
    with pytest.raises(TypeError):
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels=gc.zeros([3]),
                                                       logits=gc.zeros([3, 5]))


@pytest.mark.parametrize("bad", [5, -1])
def test_sparse_xent_label_out_of_range(bad):
    logits = gc.placeholder(gc.float32, [None, 5])
    labels = gc.placeholder(gc.int32, [None])
    loss = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="valid range"):
            sess.run(loss, {logits: np.zeros([2, 5], np.float32), labels: [0, bad]})


def test_sparse_xent_gradients():
    labels = np.array([[2, 0, 3], [1, 1, 0]])
    logits = RNG.standard_normal([2, 3, 4])
    fn = lambda lo: gc.nn.sparse_softmax_cross_entropy_with_logits(  # noqa: E731
        labels=gc.constant(labels), logits=lo)
    check_gradients(fn, [logits])
    check_second_order(fn, [logits], rtol=1e-4, atol=1e-6)
    # the first derivative is softmax - onehot
    lo = gc.placeholder(gc.float64, [2, 3, 4])
    g, = gc.gradients(fn(lo), [lo])
    with gc.Session() as sess:
        out = sess.run(g, {lo: logits})
    np.testing.assert_allclose(out, np_softmax(logits) - np.eye(4)[labels], atol=1e-12)


# ------------------------------------------------------------------------------ dense xent
def np_xent(logits, labels, axis=-1):
    return -(labels * np_log_softmax(logits, axis)).sum(axis=axis)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("shape,axis", [([1, 1], -1), ([7, 3], -1), ([3, 7], 0), ([2, 3, 5], 1)])
def test_softmax_xent_values(version, shape, axis):
    logits = RNG.standard_normal(shape)
    labels = np_softmax(RNG.standard_normal(shape), axis)
    if version == "v1":
        fn = lambda la, lo: gc.nn.softmax_cross_entropy_with_logits(  # noqa: E731
            labels=la, logits=lo, dim=axis)
    else:
        fn = lambda la, lo: gc.nn.softmax_cross_entropy_with_logits_v2(  # noqa: E731
            labels=la, logits=lo, axis=axis)
    np.testing.assert_allclose(run_graph(fn, labels, logits), np_xent(logits, labels, axis),
                               rtol=1e-12)


def test_softmax_xent_stable_and_shapes():
    logits = np.array([[1000.0, -1000.0], [-1000.0, 1000.0]], np.float32)
    labels = np.array([[0.0, 1.0], [0.25, 0.75]], np.float32)
    out = run_graph(lambda la, lo: gc.nn.softmax_cross_entropy_with_logits_v2(la, lo),
                    labels, logits)
    np.testing.assert_allclose(out, [2000.0, 500.0])
    loss = gc.nn.softmax_cross_entropy_with_logits_v2(gc.placeholder(gc.float32, [None, 4]),
                                                      gc.placeholder(gc.float32, [None, 4]))
    assert loss.shape.as_list() == [None]
    with pytest.raises(ValueError):
        gc.nn.softmax_cross_entropy_with_logits(gc.zeros([2, 3]), gc.zeros([2, 3]))
    with pytest.raises(ValueError):
        gc.nn.softmax_cross_entropy_with_logits_v2(gc.zeros([2, 4]), gc.zeros([2, 3]))


def test_softmax_xent_gradients():
    logits = RNG.standard_normal([3, 4])
    labels = np_softmax(RNG.standard_normal([3, 4]))
    v2 = lambda la, lo: gc.nn.softmax_cross_entropy_with_logits_v2(la, lo)  # noqa: E731
    check_gradients(v2, [labels, logits])  # v2: labels get a gradient too
    check_second_order(v2, [labels, logits], rtol=1e-4, atol=1e-6)
    la = gc.placeholder(gc.float64, [3, 4])
    lo = gc.placeholder(gc.float64, [3, 4])
    loss = gc.nn.softmax_cross_entropy_with_logits(labels=la, logits=lo)
    g_labels, g_logits = gc.gradients(loss, [la, lo])
    assert g_labels is None  # v1 stops the gradient to labels
    with gc.Session() as sess:
        out = sess.run(g_logits, {la: labels, lo: logits})
    np.testing.assert_allclose(out, np_softmax(logits) - labels, atol=1e-12)


# ------------------------------------------------------------------------------ sigmoid xent
def np_sigmoid_xent(x, z):
    p = 1 / (1 + np.exp(-x))
    return -(z * np.log(p) + (1 - z) * np.log(1 - p))


@pytest.mark.parametrize("shape", [[1], [7], [3, 9]])
def test_sigmoid_xent_values(shape):
    x = RNG.standard_normal(shape) * 3
    z = RNG.uniform(size=shape)
    out = run_graph(lambda zz, xx: gc.nn.sigmoid_cross_entropy_with_logits(labels=zz, logits=xx),
                    z, x)
    np.testing.assert_allclose(out, np_sigmoid_xent(x, z), rtol=1e-10)


def test_sigmoid_xent_stable_shapes_errors():
    x = np.array([1000.0, -1000.0, 1000.0, -1000.0], np.float32)
    z = np.array([1.0, 0.0, 0.0, 1.0], np.float32)
    out = run_graph(lambda zz, xx: gc.nn.sigmoid_cross_entropy_with_logits(labels=zz, logits=xx),
                    z, x)
    np.testing.assert_allclose(out, [0.0, 0.0, 1000.0, 1000.0])
    loss = gc.nn.sigmoid_cross_entropy_with_logits(labels=gc.placeholder(gc.float32, [None, 3]),
                                                   logits=gc.placeholder(gc.float32, [None, 3]))
    assert loss.shape.as_list() == [None, 3]
    with pytest.raises(ValueError, match="same shape"):
        gc.nn.sigmoid_cross_entropy_with_logits(labels=gc.zeros([3]), logits=gc.zeros([4]))
    with pytest.raises(ValueError, match="named arguments"):
        gc.nn.sigmoid_cross_entropy_with_logits(gc.zeros([3]), gc.zeros([3]))


def test_sigmoid_xent_gradients():
    x = away_from_kinks([2, 3])
    z = RNG.uniform(size=[2, 3])
    fn = lambda zz, xx: gc.nn.sigmoid_cross_entropy_with_logits(labels=zz, logits=xx)  # noqa
    check_gradients(fn, [z, x])
    check_second_order(fn, [z, x], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------ norms
@pytest.mark.parametrize("shape", [[1], [7], [3, 5]])
def test_l2_loss(shape):
    x = RNG.standard_normal(shape)
    out = run_graph(gc.nn.l2_loss, x)
    assert out.shape == ()
    np.testing.assert_allclose(out, (x ** 2).sum() / 2, rtol=1e-12)
    assert gc.nn.l2_loss(gc.placeholder(gc.float32, [None, 3])).shape.as_list() == []
    check_gradients(gc.nn.l2_loss, [x])
    check_second_order(gc.nn.l2_loss, [x])


@pytest.mark.parametrize("shape,axis", [([7], None), ([3, 5], 1), ([3, 5], 0), ([2, 3, 4], [1, 2]),
                                        ([1, 1], None)])
def test_l2_normalize(shape, axis):
    x = RNG.standard_normal(shape)
    norms = np.sqrt((x ** 2).sum(axis=None if axis is None else tuple(np.atleast_1d(axis)),
                                 keepdims=True))
    out = run_graph(lambda t: gc.nn.l2_normalize(t, axis=axis), x)
    np.testing.assert_allclose(out, x / norms, rtol=1e-12)
    if axis is not None and np.ndim(axis) == 0:
        np.testing.assert_allclose(run_graph(lambda t: gc.nn.l2_normalize(t, dim=axis), x),
                                   x / norms, rtol=1e-12)
    check_gradients(lambda t: gc.nn.l2_normalize(t, axis=axis), [x])


def test_l2_normalize_zero_vector_is_finite():
    out = run_graph(lambda t: gc.nn.l2_normalize(t, axis=1), np.zeros([2, 3], np.float32))
    np.testing.assert_array_equal(out, np.zeros([2, 3]))


@pytest.mark.parametrize("shape,axes", [([7], [0]), ([5, 3], [0]), ([2, 3, 5, 3], [0, 1, 2]),
                                        ([3, 4], [1])])
@pytest.mark.parametrize("keep", [False, True])
def test_moments(shape, axes, keep):
    x = RNG.standard_normal(shape)
    mean, var = run_graph(lambda t: list(gc.nn.moments(t, axes, keep_dims=keep)), x)
    np.testing.assert_allclose(mean, x.mean(axis=tuple(axes), keepdims=keep), rtol=1e-12)
    np.testing.assert_allclose(var, x.var(axis=tuple(axes), keepdims=keep), rtol=1e-12)


def test_moments_shapes_and_gradients():
    m, v = gc.nn.moments(gc.placeholder(gc.float32, [None, 4, 4, 3]), [0, 1, 2])
    assert m.shape.as_list() == [3] and v.shape.as_list() == [3]
    m, v = gc.nn.moments(gc.placeholder(gc.float32, [None, 5]), [0], keepdims=True)
    assert m.shape.as_list() == [1, 5]
    x = RNG.standard_normal([4, 3])
    check_gradients(lambda t: gc.nn.moments(t, [0])[0], [x])
    check_gradients(lambda t: gc.nn.moments(t, [0])[1], [x])
    check_second_order(lambda t: gc.nn.moments(t, [0])[1], [x], rtol=1e-4, atol=1e-6)


def np_batch_norm(x, mean, var, offset, scale, eps):
    y = (x - mean) / np.sqrt(var + eps)
    y = y if scale is None else y * scale
    return y if offset is None else y + offset


@pytest.mark.parametrize("with_offset,with_scale", [(True, True), (False, True), (True, False),
                                                    (False, False)])
def test_batch_normalization(with_offset, with_scale):
    x = RNG.standard_normal([7, 3])
    mean, var = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    offset, scale = RNG.standard_normal(3), RNG.standard_normal(3)

    def fn(xx, mm, vv, oo, ss):
        return gc.nn.batch_normalization(xx, mm, vv, oo if with_offset else None,
                                         ss if with_scale else None, 1e-3)
    out = run_graph(fn, x, mean, var, offset, scale)
    np.testing.assert_allclose(out, np_batch_norm(x, mean, var, offset if with_offset else None,
                                                  scale if with_scale else None, 1e-3),
                               rtol=1e-12)
    if with_offset and with_scale:
        check_gradients(fn, [x[:2], mean, var, offset, scale])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_batch_norm_exponential_avg_factor(dtype):
    """TF's kernel with exponential_avg_factor f returns the running averages:
    (1 - f) * mean + f * batch mean, (1 - f) * variance + f * Bessel-corrected variance."""
    x = RNG.standard_normal([2, 3, 1, 2]).astype(dtype)
    scale, offset = np.ones(2, dtype), np.zeros(2, dtype)
    old_mean, old_var = np.array([0.5, -1.0], dtype), np.array([2.0, 0.25], dtype)
    y, m, v = run_graph(lambda *a: list(gc.nn.fused_batch_norm(
        *a, exponential_avg_factor=0.3)), x, scale, offset, old_mean, old_var)
    axes = (0, 1, 2)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(m, 0.7 * old_mean + 0.3 * x.mean(axes), rtol=tol)
    np.testing.assert_allclose(v, 0.7 * old_var + 0.3 * x.var(axes, ddof=1), rtol=tol)
    np.testing.assert_allclose(y, (x - x.mean(axes)) / np.sqrt(x.var(axes) + 1e-3),
                               rtol=10 * tol, atol=10 * tol)
    with pytest.raises(ValueError, match="exponential_avg_factor"):
        gc.nn.fused_batch_norm(gc.zeros([1, 2, 2, 3]), gc.ones([3]), gc.zeros([3]),
                               exponential_avg_factor=0.5)


# ------------------------------------------------------------------------------ embeddings
def np_shard_mod(table, n):
    return [np.ascontiguousarray(table[p::n]) for p in range(n)]


def np_shard_div(table, n):
    sizes = [len(table) // n + (1 if p < len(table) % n else 0) for p in range(n)]
    return np.split(table, np.cumsum(sizes)[:-1])


@pytest.mark.parametrize("rows", [1, 7, 13])
def test_embedding_lookup_single(rows):
    table = RNG.standard_normal([rows, 3])
    ids = RNG.integers(0, rows, size=[2, 5])
    out = run_graph(lambda t, i: gc.nn.embedding_lookup(t, i), table, ids)
    np.testing.assert_allclose(out, table[ids])


@pytest.mark.parametrize("strategy,shard", [("mod", np_shard_mod), ("div", np_shard_div)])
@pytest.mark.parametrize("rows,n", [(7, 3), (9, 3), (5, 2), (3, 3)])
def test_embedding_lookup_sharded(strategy, shard, rows, n):
    table = RNG.standard_normal([rows, 2, 2])
    ids = np.array([[rows - 1, 0, 1], [2 % rows, rows // 2, rows - 1]], np.int64)
    shards = shard(table, n)
    out = run_graph(lambda i, *ps: gc.nn.embedding_lookup(list(ps), i,
                                                          partition_strategy=strategy),
                    ids, *shards)
    assert out.shape == (2, 3, 2, 2)
    np.testing.assert_allclose(out, table[ids])


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("bad", [7, 8, 100, -1])
def test_embedding_lookup_out_of_range(strategy, n, bad):
    shards = np_shard_mod(np.zeros([7, 2]), n) if strategy == "mod" else \
        np_shard_div(np.zeros([7, 2]), n)
    ids = gc.placeholder(gc.int32, [None])
    out = gc.nn.embedding_lookup([gc.constant(s) for s in shards], ids,
                                 partition_strategy=strategy)
    with gc.Session() as sess:
        sess.run(out, {ids: [0, 6]})
        with pytest.raises(gc.errors.InvalidArgumentError):
            sess.run(out, {ids: [0, bad]})


def test_embedding_lookup_variable_shapes_and_gradient():
    params = gc.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))
    ids = gc.placeholder(gc.int32, [None, 2])
    out = gc.nn.embedding_lookup(params, ids)
    assert out.shape.as_list() == [None, 2, 3]
    g, = gc.gradients(gc.reduce_sum(out), [params])
    assert isinstance(g, gc.IndexedSlices)  # as in TF1
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        vals, grad = sess.run([out, gc.convert_to_tensor(g)], {ids: [[3, 1], [1, 1]]})
    np.testing.assert_allclose(vals, np.arange(12).reshape(4, 3)[[[3, 1], [1, 1]]])
    np.testing.assert_allclose(np.asarray(grad), [[0] * 3, [3] * 3, [0] * 3, [1] * 3])
    with pytest.raises(ValueError):
        gc.nn.embedding_lookup(params, ids, partition_strategy="foo")


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_embedding_lookup_sharded_gradients(strategy):
    table = RNG.standard_normal([5, 2])
    shards = np_shard_mod(table, 2) if strategy == "mod" else np_shard_div(table, 2)
    ids = np.array([4, 0, 3, 4])
    check_gradients(lambda a, b: gc.nn.embedding_lookup(
        [a, b], gc.constant(ids), partition_strategy=strategy), shards)


def test_embedding_lookup_max_norm():
    table = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = run_graph(lambda t: gc.nn.embedding_lookup(t, gc.constant([0, 1, 2]), max_norm=1.0),
                    table)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], rtol=1e-12)
    check_gradients(lambda t: gc.nn.embedding_lookup(t, gc.constant([0, 1]), max_norm=1.0),
                    [table[:2]])


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_training(fmt):
    x = RNG.standard_normal([3, 2, 5, 2] if fmt == "NHWC" else [3, 2, 2, 5])
    scale, offset = RNG.standard_normal(2), RNG.standard_normal(2)
    axes = (0, 1, 2) if fmt == "NHWC" else (0, 2, 3)
    shape = [1, 1, 1, 2] if fmt == "NHWC" else [1, 2, 1, 1]
    y, m, v = run_graph(lambda t, s, o: list(gc.nn.fused_batch_norm(t, s, o, data_format=fmt)),
                        x, scale, offset)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    expect = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-3) * \
        scale.reshape(shape) + offset.reshape(shape)
    np.testing.assert_allclose(y, expect, rtol=1e-10)
    np.testing.assert_allclose(m, mean, rtol=1e-12)
    np.testing.assert_allclose(v, x.var(axis=axes, ddof=1), rtol=1e-12)  # unbiased, as TF
    check_gradients(lambda t, s, o: gc.nn.fused_batch_norm(t, s, o, data_format=fmt)[0],
                    [np.ascontiguousarray(x[:2, :, :2, :2]), scale, offset], rtol=1e-4, atol=1e-6)


def test_fused_batch_norm_inference_and_errors():
    x = RNG.standard_normal([2, 3, 3, 4])
    scale, offset = RNG.standard_normal(4), RNG.standard_normal(4)
    mean, var = RNG.standard_normal(4), RNG.uniform(0.5, 2, 4)
    y, m, v = run_graph(lambda *a: list(gc.nn.fused_batch_norm(*a, is_training=False)),
                        x, scale, offset, mean, var)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3) * scale + offset, rtol=1e-10)
    np.testing.assert_allclose(v, var)
    y = gc.nn.fused_batch_norm(gc.placeholder(gc.float32, [None, 4, 4, 3]), gc.ones([3]),
                               gc.zeros([3]))[0]
    assert y.shape.as_list() == [None, 4, 4, 3]
    with pytest.raises(ValueError):
        gc.nn.fused_batch_norm(gc.zeros([2, 3]), gc.ones([3]), gc.zeros([3]))
    with pytest.raises(ValueError):
        gc.nn.fused_batch_norm(gc.zeros([1, 2, 2, 3]), gc.ones([3]), gc.zeros([3]),
                               is_training=False)


def _bert_gelu(h):  # BERT's modeling.py, as transformer_train builds it
    return h * (0.5 * (1.0 + gc.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * gc.pow(h, 3)))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [5, 0])
def test_gelu_dense_training_step_matches_numpy(dtype, rows):
    # the forward gelu and its gradient share the tanh chain and pow's h*h: the forward is
    # one kernel writing tanh for the gradient's, which computes h*h again
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 6)).astype(dtype)
    w = rng.standard_normal((6, 10)).astype(dtype)
    w2 = rng.standard_normal((10, 3)).astype(dtype)
    b = rng.standard_normal(10).astype(dtype)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(dtype, [None, 6])
        wv, w2v = gc.Variable(w), gc.Variable(w2)
        h = gc.matmul(xp, wv) + b
        y = _bert_gelu(h)
        loss = gc.reduce_sum(gc.square(gc.matmul(y, w2v)))
        fetches = [y, loss] + gc.gradients(loss, [wv, w2v])
        with gc.Session(graph=g) as sess:
            sess.run(gc.global_variables_initializer())
            got = sess.run(fetches, {xp: x})
    c = np.sqrt(2 / np.pi)
    hn = x.astype(np.float64) @ w + b
    t = np.tanh(c * (hn + 0.044715 * hn ** 3))
    yn = 0.5 * hn * (1 + t)
    z = yn @ w2
    dh = (2 * z @ w2.T) * (0.5 * (1 + t) + 0.5 * hn * (1 - t * t) * c * (1 + 3 * 0.044715 * hn * hn))
    want = [yn, np.sum(z * z), x.T.astype(np.float64) @ dh, yn.T @ (2 * z)]
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for name, a, e in zip(["y", "loss", "dW", "dW2"], got, want):
        assert np.asarray(a).dtype == dtype, name
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol, err_msg=name)


def test_bert_gelu_gradient_matches_central_differences():
    x = np.random.default_rng(4).standard_normal((3, 5)) * 2
    check_gradients(_bert_gelu, [x])
