"""tf.contrib names TF1 scripts import: contrib.layers, contrib.slim, contrib.framework's
arg_scope and contrib.training.HParams, against NumPy and contrib's documented behaviour."""
import numpy as np
import pytest

import graphc as tf

slim = tf.contrib.slim
rng = np.random.default_rng(11)


def _init_run(fetches, feed=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed)


def test_xavier_initializer_ranges_and_spread():
    w = tf.get_variable("w", [300, 200], initializer=tf.contrib.layers.xavier_initializer(seed=1))
    n = tf.get_variable("n", [300, 200],
                        initializer=tf.contrib.layers.xavier_initializer(uniform=False, seed=2))
    c = tf.get_variable("c", [3, 3, 20, 30],
                        initializer=tf.contrib.layers.xavier_initializer_conv2d(seed=3))
    wv, nv, cv = _init_run([w, n, c])
    limit = np.sqrt(6.0 / 500)
    assert np.abs(wv).max() <= limit and np.abs(wv).max() > 0.99 * limit
    np.testing.assert_allclose(wv.var(), limit ** 2 / 3, rtol=0.03)
    stddev = np.sqrt(1.3 / 250)  # contrib's truncated normal: 2 standard deviations
    assert np.abs(nv).max() <= 2 * stddev
    np.testing.assert_allclose(nv.std(), stddev * 0.8796, rtol=0.03)
    conv_limit = np.sqrt(6.0 / (9 * 20 + 9 * 30))
    assert np.abs(cv).max() <= conv_limit and np.abs(cv).max() > 0.95 * conv_limit


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fully_connected_and_l2_regularizer(dtype):
    x = rng.standard_normal((5, 3)).astype(dtype)
    inputs = tf.placeholder(dtype, [None, 3])
    y = tf.contrib.layers.fully_connected(
        inputs, 4, weights_regularizer=tf.contrib.layers.l2_regularizer(0.25),
        biases_initializer=tf.constant_initializer(0.5))
    linear = tf.contrib.layers.fully_connected(inputs, 2, activation_fn=None, scope="logits")
    assert [v.name for v in tf.model_variables()] == [
        "fully_connected/weights:0", "fully_connected/biases:0", "logits/weights:0",
        "logits/biases:0"]
    reg = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    assert len(reg) == 1
    out, lin, w, w2, b2, r = _init_run([y, linear] + tf.model_variables()[::2] +
                                       [tf.model_variables()[3], reg[0]], {inputs: x})
    np.testing.assert_allclose(out, np.maximum(x @ w + 0.5, 0), rtol=1e-5)
    np.testing.assert_allclose(lin, x @ w2 + b2, rtol=1e-5)
    np.testing.assert_allclose(r, 0.25 * np.sum(w.astype(np.float64) ** 2) / 2, rtol=1e-5)
    with pytest.raises(ValueError, match="less than 0"):
        tf.contrib.layers.l2_regularizer(-0.1)
    assert tf.contrib.layers.l2_regularizer(0.0)(tf.constant(1.0)) is None


def test_slim_conv_pool_flatten_dropout_with_arg_scope():
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    inputs = tf.placeholder(tf.float32, [None, 6, 6, 3])
    with slim.arg_scope([slim.conv2d, slim.fully_connected], activation_fn=None,
                        weights_initializer=tf.truncated_normal_initializer(stddev=0.1)):
        with slim.arg_scope([slim.conv2d], padding="VALID") as sc:
            net = slim.conv2d(inputs, 4, [3, 3], scope="conv1")
        with slim.arg_scope(sc):
            same = slim.conv2d(inputs, 4, 3, padding="SAME", scope="conv_same")
        pooled = slim.max_pool2d(net, [2, 2])
        flat = slim.flatten(pooled)
        kept = slim.dropout(flat, 0.5, is_training=False)
        logits = slim.fully_connected(kept, 3, scope="fc")
    assert net.shape.as_list() == [None, 4, 4, 4] and same.shape.as_list() == [None, 6, 6, 4]
    assert flat.shape.as_list() == [None, 16] and logits.shape.as_list() == [None, 3]
    w = tf.global_variables()[0]
    out, pool_out, logit_out, wv, fw, fb = _init_run(
        [net, pooled, logits, w] + [v for v in tf.global_variables() if v.name.startswith("fc")],
        {inputs: x})
    expected = np.zeros((2, 4, 4, 4))
    for i in range(4):
        for j in range(4):
            expected[:, i, j] = np.tensordot(x[:, i:i + 3, j:j + 3], wv, ([1, 2, 3], [0, 1, 2]))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)  # biases start at 0
    np.testing.assert_allclose(pool_out, expected.reshape(2, 2, 2, 2, 2, 4).max((2, 4)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logit_out, pool_out.reshape(2, 16) @ fw + fb, rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="not decorated"):
        with slim.arg_scope([tf.layers.dense], units=3):
            pass


def test_slim_repeat_and_stack_scopes():
    inputs = tf.placeholder(tf.float32, [None, 8, 8, 3])
    net = slim.repeat(inputs, 2, slim.conv2d, 4, [3, 3], scope="conv1")
    net = slim.stack(slim.flatten(net), slim.fully_connected, [5, 6], scope="fc")
    assert [v.name for v in tf.trainable_variables()] == [
        "conv1/conv1_1/weights:0", "conv1/conv1_1/biases:0", "conv1/conv1_2/weights:0",
        "conv1/conv1_2/biases:0", "fc/fc_1/weights:0", "fc/fc_1/biases:0",
        "fc/fc_2/weights:0", "fc/fc_2/biases:0"]
    assert net.shape.as_list() == [None, 6]


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 2, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm(shape, dtype):
    x = rng.standard_normal(shape).astype(dtype) * 3 + 1
    inputs = tf.placeholder(dtype, shape)
    y = tf.contrib.layers.batch_norm(inputs, decay=0.9, scale=True)
    names = [v.name for v in tf.global_variables()]
    assert names == ["BatchNorm/gamma:0", "BatchNorm/beta:0", "BatchNorm/moving_mean:0",
                     "BatchNorm/moving_variance:0"]  # the core layer's order (Keras build)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert len(updates) == 2
    mm, mv = tf.global_variables()[2:]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, _ = sess.run([y, updates], {inputs: x})
        mean_v, var_v = sess.run([mm, mv])
    axes = tuple(range(len(shape) - 1))
    mean, var = x.astype(np.float64).mean(axes), x.astype(np.float64).var(axes)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 0.001), **tol)
    n = x.size // shape[-1]
    # contrib's batch_norm takes the fused kernel's path for float32 (rank 2 and 4): its
    # moving variance gets the Bessel-corrected batch variance; float64 is not fused
    moved_var = var * n / (n - 1) if dtype == np.float32 else var
    np.testing.assert_allclose(mean_v, 0.1 * mean, **tol)
    np.testing.assert_allclose(var_v, 0.9 + 0.1 * moved_var, **tol)


def test_batch_norm_updates_in_place_and_inference():
    x = rng.standard_normal((8, 3)).astype(np.float32)
    inputs = tf.placeholder(tf.float32, [None, 3])
    y = tf.contrib.layers.batch_norm(inputs, decay=0.5, updates_collections=None)
    test_y = tf.contrib.layers.batch_norm(inputs, is_training=False, reuse=True,
                                          scope="BatchNorm")
    assert tf.get_collection(tf.GraphKeys.UPDATE_OPS) == []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(y, {inputs: x})
        mean = sess.run(tf.global_variables()[1])
        inferred = sess.run(test_y, {inputs: x})
    np.testing.assert_allclose(mean, 0.5 * x.mean(0), rtol=1e-5, atol=1e-6)
    moving_var = 0.5 + 0.5 * x.var(0) * 8 / 7
    np.testing.assert_allclose(inferred, (x - mean) / np.sqrt(moving_var + 0.001), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm(dtype):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    inputs = tf.placeholder(dtype, [None, 4, 5])
    y = tf.contrib.layers.layer_norm(inputs)
    y2 = tf.contrib.layers.layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-2,
                                      center=False)
    assert [v.name for v in tf.trainable_variables()] == [
        "LayerNorm/beta:0", "LayerNorm/gamma:0", "LayerNorm_1/gamma:0"]
    assert tf.trainable_variables()[2].shape.as_list() == [4, 5]
    out, out2 = _init_run([y, y2], {inputs: x})
    x64 = x.astype(np.float64)
    m, v = x64.mean((1, 2), keepdims=True), x64.var((1, 2), keepdims=True)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out, (x64 - m) / np.sqrt(v + 1e-12), **tol)
    m, v = x64.mean(2, keepdims=True), x64.var(2, keepdims=True)
    np.testing.assert_allclose(out2, (x64 - m) / np.sqrt(v + 1e-12), **tol)


def test_hparams():
    hp = tf.contrib.training.HParams(learning_rate=0.1, num_layers=2, use_bn=True,
                                     name="model", sizes=[1, 2])
    hp.parse("learning_rate=1,num_layers=3, use_bn=false,sizes=[4,5,6],name=big")
    assert hp.values() == {"learning_rate": 1.0, "num_layers": 3, "use_bn": False,
                           "name": "big", "sizes": [4, 5, 6]}
    assert isinstance(hp.learning_rate, float)
    hp.set_hparam("learning_rate", 2)  # an int into a float: converted
    assert hp.learning_rate == 2.0 and isinstance(hp.learning_rate, float)
    with pytest.raises(ValueError, match="Could not cast"):
        hp.set_hparam("num_layers", 1.5)
    with pytest.raises(ValueError, match="Could not cast"):
        hp.set_hparam("use_bn", 1)
    with pytest.raises(ValueError, match="Unknown hyperparameter type for dropout"):
        hp.parse("dropout=0.1")
    with pytest.raises(ValueError, match="Could not parse"):
        hp.parse("num_layers=abc")
    with pytest.raises(ValueError, match="reserved"):
        hp.add_hparam("values", 1)
    hp.add_hparam("dropout", 0.5)
    again = tf.contrib.training.HParams(learning_rate=0.0, num_layers=0, use_bn=True,
                                        name="", sizes=[0], dropout=0.0)
    again.parse_json(hp.to_json())
    assert again.values() == hp.values()
    assert "dropout" in hp and hp.get("missing", 7) == 7
    hp.del_hparam("dropout")
    assert "dropout" not in hp
