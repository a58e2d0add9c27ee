"""tf.metrics: streaming values over several runs, against NumPy over all the batches."""
import numpy as np
import pytest

import graphc as tf

BATCHES = [  # (labels, predictions, weights)
    (np.array([1, 0, 1, 1]), np.array([1, 1, 0, 1]), np.array([1.0, 0.5, 2.0, 1.0])),
    (np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([1.0, 1.0, 0.0])),
    (np.array([1, 1, 1, 0, 0, 1, 0]), np.array([1, 0, 1, 0, 1, 1, 1]), np.ones(7)),
]


def _numpy_metric(kind, batches, weighted):
    l = np.concatenate([b[0] for b in batches]).astype(bool)
    p = np.concatenate([b[1] for b in batches]).astype(bool)
    w = np.concatenate([b[2] for b in batches]) if weighted else np.ones(len(l))
    if kind == "accuracy":
        return (w * (l == p)).sum() / w.sum()
    if kind == "mean":
        return (w * p).sum() / w.sum()
    tp = (w * (l & p)).sum()
    other = (w * (~l & p)).sum() if kind == "precision" else (w * (l & ~p)).sum()
    return tp / (tp + other) if tp + other else 0.0


def _build(kind, labels, predictions, weights):
    if kind == "mean":
        return tf.metrics.mean(predictions, weights=weights)
    fn = getattr(tf.metrics, kind)
    return fn(labels=labels, predictions=predictions, weights=weights)


@pytest.mark.parametrize("kind", ["accuracy", "mean", "precision", "recall"])
@pytest.mark.parametrize("weighted", [False, True])
def test_streaming_metric(kind, weighted):
    labels = tf.placeholder(tf.int64, [None])
    predictions = tf.placeholder(tf.int64, [None])
    weights = tf.placeholder(tf.float32, [None]) if weighted else None
    value, update_op = _build(kind, labels, predictions, weights)
    assert value.dtype == tf.float32 and value.get_shape().as_list() == []
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        assert sess.run(value) == 0.0  # nothing seen yet
        for i, (l, p, w) in enumerate(BATCHES):
            feed = {labels: l, predictions: p}
            if weighted:
                feed[weights] = w
            updated = sess.run(update_op, feed)
            expected = _numpy_metric(kind, BATCHES[:i + 1], weighted)
            assert updated == pytest.approx(expected, rel=1e-6)
            assert sess.run(value) == pytest.approx(expected, rel=1e-6)
        sess.run(tf.local_variables_initializer())  # resets the running sums
        assert sess.run(value) == 0.0


def test_local_variables_names_and_collections():
    labels = tf.placeholder(tf.int32, [None])
    preds = tf.placeholder(tf.int32, [None])
    tf.metrics.accuracy(labels, preds)
    tf.metrics.precision(labels, preds)
    tf.metrics.recall(labels, preds, name="my_recall")
    names = sorted(v.op.name for v in tf.local_variables())
    assert names == ["accuracy/count", "accuracy/total", "my_recall/false_negatives/count",
                     "my_recall/true_positives/count", "precision/false_positives/count",
                     "precision/true_positives/count"]
    metric_vars = tf.get_collection(tf.GraphKeys.METRIC_VARIABLES)
    assert sorted(v.op.name for v in metric_vars) == names
    assert not tf.trainable_variables() and not tf.global_variables()


def test_accuracy_with_argmax_tutorial_style():
    logits = tf.placeholder(tf.float32, [None, 3])
    y = tf.placeholder(tf.int64, [None])
    acc, acc_op = tf.metrics.accuracy(labels=y, predictions=tf.argmax(logits, 1),
                                      metrics_collections=["my_metrics"],
                                      updates_collections=["my_updates"])
    assert tf.get_collection("my_metrics") == [acc]
    assert tf.get_collection("my_updates") == [acc_op]
    sess = tf.Session()
    sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
    sess.run(acc_op, {logits: [[0.1, 0.9, 0.0], [2.0, 0.0, 0.0]], y: [1, 1]})
    sess.run(acc_op, {logits: [[0.0, 0.0, 1.0]], y: [2]})
    assert sess.run(acc) == pytest.approx(2 / 3)


def test_uninitialized_metric_is_an_error():
    value, update_op = tf.metrics.mean(tf.constant([1.0, 2.0]))
    with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized"):
        tf.Session().run(update_op)


def test_shape_mismatch():
    with pytest.raises(ValueError):
        tf.metrics.accuracy(tf.zeros([3], tf.int32), tf.zeros([4], tf.int32))
