"""gc.losses: values against NumPy, weighting and reductions, collections, gradients."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients

RNG = np.random.default_rng(0)
R = gc.losses.Reduction


def _run(t, feed=None):
    with gc.Session() as sess:
        return sess.run(t, feed)


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _sigmoid_xent(labels, logits):
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def _huber(err, delta):
    a = np.abs(err)
    return np.where(a <= delta, 0.5 * a * a, delta * (a - 0.5 * delta))


def _reduce(losses, weights, reduction):
    w = np.broadcast_to(weights, losses.shape)
    weighted = losses * w
    if reduction == R.NONE:
        return weighted
    if reduction == R.SUM:
        return weighted.sum()
    if reduction == R.MEAN:
        return weighted.sum() / w.sum() if w.sum() else 0.0
    if reduction == R.SUM_OVER_BATCH_SIZE:
        return weighted.sum() / losses.size
    n = np.count_nonzero(w)
    return weighted.sum() / n if n else 0.0


# per-element losses: name -> (gc call, numpy per-element loss), labels/preds of shape [7, 3]
REGRESSION = {
    "mean_squared_error": (gc.losses.mean_squared_error, lambda y, p: (p - y) ** 2),
    "absolute_difference": (gc.losses.absolute_difference, lambda y, p: np.abs(p - y)),
    "huber_loss": (gc.losses.huber_loss, lambda y, p: _huber(p - y, 1.0)),
    "sigmoid_cross_entropy": (gc.losses.sigmoid_cross_entropy,
                              lambda y, p: _sigmoid_xent(y, p)),
}
WEIGHTS = [1.0, 0.5, np.array([[1.0], [0.0], [2.0], [0.0], [1.0], [3.0], [0.5]]),
           np.array([0.0, 1.0, 2.0]), (RNG.random((7, 3)) > 0.4) * 1.5]


@pytest.mark.parametrize("name", sorted(REGRESSION))
@pytest.mark.parametrize("weights", range(len(WEIGHTS)))
@pytest.mark.parametrize("reduction", [R.SUM_BY_NONZERO_WEIGHTS, R.NONE, R.SUM, R.MEAN,
                                       R.SUM_OVER_BATCH_SIZE])
def test_elementwise_losses_match_numpy(name, weights, reduction):
    loss_fn, per_element = REGRESSION[name]
    w = WEIGHTS[weights]
    labels = (RNG.random((7, 3)) > 0.5).astype(np.float32) if "sigmoid" in name else \
        RNG.standard_normal((7, 3)).astype(np.float32)
    preds = (RNG.standard_normal((7, 3)) * 2).astype(np.float32)
    y = gc.placeholder(gc.float32, [None, 3])
    p = gc.placeholder(gc.float32, [None, 3])
    loss = loss_fn(y, p, weights=w, reduction=reduction)
    expected = _reduce(per_element(labels, preds), w, reduction)
    assert loss.shape.ndims == (2 if reduction == R.NONE else 0)
    np.testing.assert_allclose(_run(loss, {y: labels, p: preds}), expected, rtol=1e-5, atol=1e-6)
    assert gc.get_collection(gc.GraphKeys.LOSSES) == [loss]


def test_default_reduction_is_sum_by_nonzero_weights():
    loss = gc.losses.mean_squared_error([1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 5.0, 4.0],
                                        weights=[1.0, 0.0, 2.0, 1.0])
    np.testing.assert_allclose(_run(loss), (1 + 0 + 8 + 0) / 3)


def test_all_zero_weights_give_zero_not_nan():
    loss = gc.losses.mean_squared_error([1.0, 2.0], [3.0, 5.0], weights=0.0)
    assert _run(loss) == 0.0
    loss = gc.losses.absolute_difference([1.0, 2.0], [3.0, 5.0], weights=[0.0, 0.0],
                                         reduction=R.MEAN)
    assert _run(loss) == 0.0


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.5])
def test_huber_delta(delta):
    err = np.array([-4.0, -1.0, -0.3, 0.0, 0.2, 0.9, 3.0], np.float32)
    loss = gc.losses.huber_loss(np.zeros(7, np.float32), err, delta=delta, reduction=R.NONE)
    np.testing.assert_allclose(_run(loss), _huber(err, delta), rtol=1e-6)


@pytest.mark.parametrize("batch,classes", [(1, 1), (7, 3), (13, 11)])
def test_sparse_softmax_cross_entropy(batch, classes):
    logits = RNG.standard_normal((batch, classes)).astype(np.float32) * 3
    labels = RNG.integers(0, classes, batch).astype(np.int32)
    w = RNG.random(batch).astype(np.float32)
    z = gc.placeholder(gc.float32, [None, classes])
    y = gc.placeholder(gc.int32, [None])
    loss = gc.losses.sparse_softmax_cross_entropy(y, z, weights=w)
    per_example = -_log_softmax(logits)[np.arange(batch), labels]
    expected = (per_example * w).sum() / np.count_nonzero(w)
    np.testing.assert_allclose(_run(loss, {z: logits, y: labels}), expected, rtol=1e-5)


def test_sparse_softmax_cross_entropy_squeezes_labels_of_shape_batch_by_1():
    logits = RNG.standard_normal((5, 4)).astype(np.float32)
    labels = np.array([[0], [3], [1], [1], [2]], np.int32)
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    expected = -_log_softmax(logits)[np.arange(5), labels[:, 0]].mean()
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_softmax_cross_entropy(smoothing):
    logits = RNG.standard_normal((7, 5)).astype(np.float32)
    onehot = np.eye(5, dtype=np.float32)[RNG.integers(0, 5, 7)]
    loss = gc.losses.softmax_cross_entropy(onehot, logits, weights=2.0,
                                           label_smoothing=smoothing)
    smoothed = onehot * (1 - smoothing) + smoothing / 5
    expected = 2.0 * (-(smoothed * _log_softmax(logits)).sum(-1)).mean()
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-5)


def test_sigmoid_cross_entropy_label_smoothing():
    logits = RNG.standard_normal((4, 3)).astype(np.float32)
    labels = (RNG.random((4, 3)) > 0.5).astype(np.float32)
    loss = gc.losses.sigmoid_cross_entropy(labels, logits, label_smoothing=0.2)
    expected = _sigmoid_xent(labels * 0.8 + 0.1, logits).mean()
    np.testing.assert_allclose(_run(loss), expected, rtol=1e-5)


def test_log_loss_and_hinge_loss():
    labels = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    probs = np.array([0.1, 0.8, 0.4, 0.7], np.float32)
    log = gc.losses.log_loss(labels, probs)
    expected = -(labels * np.log(probs + 1e-7) + (1 - labels) * np.log(1 - probs + 1e-7)).mean()
    np.testing.assert_allclose(_run(log), expected, rtol=1e-5)
    logits = np.array([-2.0, 0.5, 3.0, 0.2], np.float32)
    hinge = gc.losses.hinge_loss(labels, logits)
    np.testing.assert_allclose(_run(hinge), np.maximum(0, 1 - (2 * labels - 1) * logits).mean(),
                               rtol=1e-6)


def test_float64_stays_float64():
    loss = gc.losses.mean_squared_error(np.zeros(3), gc.constant([1.0, 2.0, 3.0], gc.float64))
    assert loss.dtype == gc.float64


def test_shape_mismatch_and_bad_weights_raise():
    with pytest.raises(ValueError):
        gc.losses.mean_squared_error(gc.zeros([4, 3]), gc.zeros([4, 2]))
    with pytest.raises(ValueError, match="weights can not be broadcast"):
        gc.losses.mean_squared_error(gc.zeros([4, 3]), gc.zeros([4, 3]), weights=gc.ones([2, 3]))
    with pytest.raises(ValueError, match="labels must not be None"):
        gc.losses.mean_squared_error(None, gc.zeros([4, 3]))
    with pytest.raises(ValueError, match="Invalid Reduction"):
        gc.losses.mean_squared_error(gc.zeros([3]), gc.zeros([3]), reduction="bogus")


def test_collections_and_total_loss():
    a = gc.losses.mean_squared_error([1.0], [3.0])                     # 4
    b = gc.losses.absolute_difference([1.0], [3.0], loss_collection=None)  # not collected
    custom = gc.constant(10.0)
    gc.losses.add_loss(custom)
    reg = gc.constant(0.5)
    gc.add_to_collection(gc.GraphKeys.REGULARIZATION_LOSSES, reg)
    assert gc.losses.get_losses() == [a, custom]
    assert b not in gc.losses.get_losses()
    assert gc.losses.get_regularization_losses() == [reg]
    total, no_reg, reg_sum = _run([gc.losses.get_total_loss(),
                                   gc.losses.get_total_loss(add_regularization_losses=False),
                                   gc.losses.get_regularization_loss()])
    assert (total, no_reg, reg_sum) == (14.5, 14.0, 0.5)


def test_regularization_loss_is_zero_without_regularizers():
    assert _run(gc.losses.get_regularization_loss()) == 0.0


def test_losses_named_in_their_scope():
    loss = gc.losses.mean_squared_error([1.0], [2.0])
    assert loss.op.name.startswith("mean_squared_error/")
    loss = gc.losses.sparse_softmax_cross_entropy([0], [[1.0, 2.0]], scope="xe")
    assert loss.op.name.startswith("xe/")


@pytest.mark.parametrize("loss_fn", [gc.losses.mean_squared_error, gc.losses.huber_loss,
                                     gc.losses.absolute_difference])
def test_regression_loss_gradients(loss_fn):
    labels = np.array([[0.3, -1.0, 2.0], [0.5, 0.0, 1.0]])
    preds = np.array([[1.0, -0.2, 0.1], [0.9, 2.5, 1.4]])
    check_gradients(lambda y, p: loss_fn(y, p, weights=[[1.0], [0.0]]), [labels, preds])


def test_classification_loss_gradients():
    onehot = np.eye(3)[[0, 2]]
    logits = np.array([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3]])
    check_gradients(lambda z: gc.losses.softmax_cross_entropy(onehot, z, label_smoothing=0.1),
                    [logits])
    check_gradients(lambda z: gc.losses.sparse_softmax_cross_entropy([1, 0], z), [logits])
    check_gradients(lambda z: gc.losses.sigmoid_cross_entropy(onehot, z), [logits])
