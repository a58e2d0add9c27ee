"""Habits of classic TF1 tutorial scripts, written as the tutorials write them.

Each test reads like a snippet from a tutorial with only the import changed
(`import graphc as tf`); the assertions check what the tutorial relies on.
"""
import os

import numpy as np
import pytest

import graphc as tf


def test_eval_and_run_inside_with_session():
    x = tf.placeholder(tf.float32, [None, 2])
    y = x * 2.0
    v = tf.Variable(1.0)
    inc = tf.assign_add(v, 1.0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out = y.eval(feed_dict={x: [[1.0, 2.0]]})
        inc.op.run()
        tf.global_variables_initializer().run()  # Operation.run with the default session
        inc.op.run()
        assert v.eval() == 2.0
    np.testing.assert_allclose(out, [[2.0, 4.0]])


def test_dtype_strings():
    x = tf.placeholder("float", [None, 784])
    assert x.dtype == tf.float32
    i = tf.placeholder("int32", [None])
    f = tf.cast(i, "float")
    assert f.dtype == tf.float32
    with tf.Session() as sess:
        out = sess.run([tf.reduce_sum(x), f], {x: np.ones([2, 784]), i: [1, 2]})
    assert out[0] == 1568.0
    np.testing.assert_array_equal(out[1], [1.0, 2.0])


@pytest.mark.parametrize("dtype,np_dtype", [(tf.int8, np.int8), (tf.int16, np.int16),
                                            (tf.uint8, np.uint8)])
def test_small_integer_dtypes(dtype, np_dtype):
    x = tf.placeholder(dtype, [3])
    y = x + tf.constant(1, dtype=dtype)
    f = tf.cast(x, tf.float32)
    with tf.Session() as sess:
        yv, fv = sess.run([y, f], {x: [1, 2, 3]})
    assert yv.dtype == np_dtype
    np.testing.assert_array_equal(yv, [2, 3, 4])
    np.testing.assert_array_equal(fv, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("value", [3.0, [1.0, 2.0], np.ones([2, 3, 1])])
def test_placeholder_without_shape(value):
    x = tf.placeholder(tf.float32)
    assert x.get_shape().ndims is None
    y = x * 2.0
    with tf.Session() as sess:
        out = sess.run(y, feed_dict={x: value})
    np.testing.assert_allclose(out, np.asarray(value) * 2.0)
    assert np.shape(out) == np.shape(value)


def test_reduction_indices_and_keep_dims():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    s = tf.reduce_sum(x, reduction_indices=[1])
    m = tf.reduce_mean(x, reduction_indices=1, keep_dims=True)
    mx = tf.reduce_max(x, 0, keep_dims=True)
    assert m.get_shape().as_list() == [2, 1]
    with tf.Session() as sess:
        sv, mv, mxv = sess.run([s, m, mx])
    np.testing.assert_allclose(sv, [3.0, 7.0])
    np.testing.assert_allclose(mv, [[1.5], [3.5]])
    np.testing.assert_allclose(mxv, [[3.0, 4.0]])


def test_softmax_and_l2_normalize_dim():
    x = tf.constant([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    sm = tf.nn.softmax(x, dim=0)
    n = tf.nn.l2_normalize(x, dim=1)
    with tf.Session() as sess:
        smv, nv = sess.run([sm, n])
    a = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    e = np.exp(a - a.max(0))
    np.testing.assert_allclose(smv, e / e.sum(0), rtol=1e-6)
    np.testing.assert_allclose(nv, a / np.sqrt((a ** 2).sum(1, keepdims=True)), rtol=1e-6)


def test_arg_max_accuracy():
    y = tf.placeholder(tf.float32, [None, 3])
    y_ = tf.placeholder(tf.float32, [None, 3])
    correct_prediction = tf.equal(tf.arg_max(y, 1), tf.arg_max(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, "float"))
    lo = tf.arg_min(y, 1)
    with tf.Session() as sess:
        acc, lov = sess.run([accuracy, lo], feed_dict={
            y: [[0.1, 0.8, 0.1], [0.7, 0.2, 0.1]], y_: [[0, 1, 0], [0, 0, 1]]})
    assert acc == pytest.approx(0.5)
    np.testing.assert_array_equal(lov, [0, 2])


def test_dropout_keep_prob_positional_placeholder():
    x = tf.ones([200, 50])
    keep_prob = tf.placeholder(tf.float32)
    h_fc1_drop = tf.nn.dropout(x, keep_prob)
    with tf.Session() as sess:
        full = sess.run(h_fc1_drop, feed_dict={keep_prob: 1.0})
        half = sess.run(h_fc1_drop, feed_dict={keep_prob: 0.5})
    np.testing.assert_allclose(full, np.ones([200, 50]))
    assert set(np.unique(half)) <= {0.0, 2.0}
    assert 0.4 < (half > 0).mean() < 0.6


def test_random_normal_dynamic_shape_tensor_stddev_mean():
    t = tf.placeholder(tf.float32, [None, 4])
    stddev = tf.constant(0.5)
    mean = tf.reduce_mean(t)
    noise = tf.random_normal(tf.shape(t), mean=mean, stddev=stddev, seed=1)
    noisy = t + noise
    assert noisy.get_shape().as_list() == [None, 4]
    with tf.Session() as sess:
        out = sess.run(noise, {t: np.full([3000, 4], 10.0)})
    assert out.shape == (3000, 4)
    assert abs(out.mean() - 10.0) < 0.05
    assert abs(out.std() - 0.5) < 0.05


def test_get_shape_as_list_and_shape_arithmetic():
    x = tf.placeholder(tf.float32, [None, 28, 28, 1])
    shape = x.get_shape().as_list()
    assert shape == [None, 28, 28, 1]
    dim = np.prod(shape[1:])
    flat = tf.reshape(x, [-1, dim])
    assert flat.get_shape().as_list() == [None, 784]
    s = x.get_shape()
    assert s[1] * s[2] == 784
    assert s[1].value == 28
    assert int(s[1]) + 1 == 29
    assert (s[0] * 2).value is None
    assert s[1:].concatenate(tf.TensorShape([5])).as_list() == [28, 28, 1, 5]
    assert s.ndims == 4 and len(s) == 4
    assert s.num_elements() is None and s[1:].num_elements() == 784
    d = tf.Dimension(3)
    assert d + 2 == 5 and d * tf.Dimension(4) == 12 and d // 2 == 1
    assert (tf.Dimension(None) + 1).value is None
    assert tf.Dimension(3) == 3 and tf.Dimension(None).value is None
    assert s.merge_with([7, 28, 28, 1]).as_list() == [7, 28, 28, 1]
    assert s.is_compatible_with([7, 28, 28, 1]) and not s.is_compatible_with([7, 28])


def test_ops_added_after_session_ran():
    a = tf.constant(2.0)
    sess = tf.Session()
    assert sess.run(a) == 2.0
    p = tf.placeholder(tf.float32)
    b = a * p
    assert sess.run(b, {p: 3.0}) == 6.0
    v = tf.Variable(5.0)
    sess.run(v.initializer)
    assert sess.run(v + b, {p: 1.0}) == 7.0
    tf.get_default_graph().finalize()
    with pytest.raises(RuntimeError, match="finalized"):
        tf.constant(1.0)
    sess.close()


def _make_model():
    W = tf.Variable(tf.zeros([3, 2]), name="W")
    b = tf.Variable(tf.zeros([2]), name="b")
    global_step = tf.Variable(0, name="global_step", trainable=False)
    return W, b, global_step


def test_initializer_then_restore_in_second_session(tmp_path):
    W, b, global_step = _make_model()
    saver = tf.train.Saver()
    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        sess.run(init)
        sess.run([tf.assign(W, np.arange(6.0).reshape(3, 2)), tf.assign(b, [1.0, 2.0])])
        path = saver.save(sess, os.path.join(str(tmp_path), "model.ckpt"))
    with tf.Session() as sess:
        sess.run(init)  # tutorials often initialize and then restore
        saver.restore(sess, path)
        np.testing.assert_allclose(sess.run(W), np.arange(6.0).reshape(3, 2))
        np.testing.assert_allclose(b.eval(), [1.0, 2.0])


def test_save_global_step_max_to_keep_latest_checkpoint(tmp_path):
    W, b, global_step = _make_model()
    saver = tf.train.Saver(max_to_keep=2)
    ckpt_dir = str(tmp_path)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        paths = []
        for step in (100, 200, 300):
            sess.run(tf.assign(global_step, step))
            paths.append(saver.save(sess, os.path.join(ckpt_dir, "model.ckpt"),
                                    global_step=global_step))
        last = saver.save(sess, ckpt_dir + "/model.ckpt", global_step=400)
    assert paths[0].endswith("model.ckpt-100") and last.endswith("model.ckpt-400")
    assert tf.train.latest_checkpoint(ckpt_dir) == last
    ckpt = tf.train.get_checkpoint_state(ckpt_dir)
    assert ckpt.model_checkpoint_path == last
    assert len(ckpt.all_model_checkpoint_paths) == 2
    assert not tf.train.checkpoint_exists(paths[0])
    assert not tf.train.checkpoint_exists(paths[1])
    assert tf.train.checkpoint_exists(paths[2])
    with tf.Session() as sess:
        saver.restore(sess, tf.train.latest_checkpoint(ckpt_dir))
        assert sess.run(global_step) == 300


def test_mnist_softmax_tutorial_shape():
    """The 'MNIST for ML beginners' script, on random data."""
    x = tf.placeholder("float", [None, 784])
    W = tf.Variable(tf.zeros([784, 10]))
    b = tf.Variable(tf.zeros([10]))
    y = tf.nn.softmax(tf.matmul(x, W) + b)
    y_ = tf.placeholder("float", [None, 10])
    cross_entropy = -tf.reduce_sum(y_ * tf.log(y))
    train_step = tf.train.GradientDescentOptimizer(0.0005).minimize(cross_entropy)
    init = tf.initialize_all_variables()
    sess = tf.Session()
    sess.run(init)
    rng = np.random.RandomState(0)
    xs = rng.rand(20, 784).astype(np.float32)
    ys = np.eye(10, dtype=np.float32)[rng.randint(0, 10, 20)]
    before = sess.run(cross_entropy, feed_dict={x: xs, y_: ys})
    for _ in range(5):
        sess.run(train_step, feed_dict={x: xs, y_: ys})
    after = sess.run(cross_entropy, feed_dict={x: xs, y_: ys})
    correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, "float"))
    acc = sess.run(accuracy, feed_dict={x: xs, y_: ys})
    assert after < before
    assert 0.0 <= acc <= 1.0
