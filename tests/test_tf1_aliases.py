"""TF1-era names the corpus of tools/tf1_coverage.py calls: TF 0.x names renamed in 1.0
(graphc/tf0_names.py), tf.nn.relu_layer, tf.all_variables, contrib's apply_regularization
and slim's initializers / model_analyzer, and TensorFlow's internal module paths
(graphc/python), checked against NumPy and TF1's documented behaviour."""
import importlib

import numpy as np
import pytest

import graphc as tf


def _run(fetches, feed_dict=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feed_dict)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sub_mul_neg_are_subtract_multiply_negative(dtype):
    a = np.array([[1.5, -2.0, 0.0], [3.25, 4.0, -0.5]], dtype)
    b = np.array([[0.5, 2.0, -1.0], [1.0, -3.0, 2.0]], dtype)
    sub, mul, neg = _run([tf.sub(a, b), tf.mul(a, b), tf.neg(a)])
    np.testing.assert_array_equal(sub, a - b)
    np.testing.assert_array_equal(mul, a * b)
    np.testing.assert_array_equal(neg, -a)
    assert sub.dtype == dtype


def test_concat_v2_and_the_old_argument_order_of_concat():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0).reshape(2, 2)
    np.testing.assert_array_equal(_run(tf.concat_v2([a, b], 1)), np.concatenate([a, b], 1))
    with pytest.raises(TypeError, match="argument order of TensorFlow before 1.0"):
        tf.concat(1, [a, b])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_layer_is_relu_of_x_w_plus_b(dtype):
    rng = np.random.RandomState(0)
    x, w, b = rng.randn(4, 3).astype(dtype), rng.randn(3, 5).astype(dtype), \
        rng.randn(5).astype(dtype)
    out = tf.nn.relu_layer(x, w, b, name="layer")
    assert out.op.name == "layer"
    np.testing.assert_allclose(_run(out), np.maximum(x @ w + b, 0),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    empty = _run(tf.nn.relu_layer(np.zeros((0, 3), dtype), w, b))
    assert empty.shape == (0, 5)


def test_deconv2d_is_conv2d_transpose():
    # stride 2 with a 2x2 filter: each input pixel scatters value * filter into its own
    # 2x2 block (the Kronecker product)
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    f = np.array([[1.0, 0.5], [-2.0, 4.0]])
    out = tf.nn.deconv2d(x.reshape(1, 2, 2, 1), f.reshape(2, 2, 1, 1), [1, 4, 4, 1],
                         [1, 2, 2, 1])
    np.testing.assert_allclose(_run(out)[0, :, :, 0], np.kron(x, f))


def test_all_variables_is_global_variables():
    v = tf.Variable(1.0)
    w = tf.Variable(2.0, trainable=False)
    tf.Variable(3.0, collections=[tf.GraphKeys.LOCAL_VARIABLES])
    assert tf.all_variables() == tf.global_variables() == [v, w]


# ---------------------------------------------------------------------- summaries
def _summary(serialized):
    return tf.Summary.FromString(serialized)


def test_tf0_summaries_keep_their_tag_verbatim():
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    with tf.name_scope("scope"):
        scalar = tf.scalar_summary("my loss", tf.reduce_mean(x))
        hist = tf.histogram_summary("weights", x)
        new = tf.summary.scalar("new_loss", tf.reduce_mean(x))
    assert scalar.op.name == "scope/ScalarSummary"
    merged = tf.merge_summary([scalar, hist])
    everything = tf.merge_all_summaries()
    merged_v, everything_v, new_v = _run([merged, everything, new])
    values = {v.tag: v for v in _summary(merged_v).value}
    assert sorted(values) == ["my loss", "weights"]  # no "scope/" prefix, unlike tf.summary
    assert values["my loss"].simple_value == 2.5
    histo = values["weights"].histo
    assert (histo.min, histo.max, histo.num, histo.sum) == (1.0, 4.0, 4, 10.0)
    assert histo.sum_squares == 30.0
    assert [v.tag for v in _summary(new_v).value] == ["scope/new_loss"]
    assert sorted(v.tag for v in _summary(everything_v).value) == [
        "my loss", "scope/new_loss", "weights"]


def test_tf0_image_summary_and_summary_writer(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    images = np.zeros((2, 3, 4, 1), np.uint8)
    images[1] = 200
    summary = tf.image_summary("pics", images, max_images=2)
    value = _run(summary)
    assert sorted(v.tag for v in _summary(value).value) == ["pics/image/0", "pics/image/1"]
    assert all((v.image.height, v.image.width, v.image.colorspace) == (3, 4, 1)
               for v in _summary(value).value)
    writer = tf.train.SummaryWriter(str(tmp_path))
    assert isinstance(writer, tf.summary.FileWriter)
    writer.add_summary(_run(tf.scalar_summary("acc", tf.constant(0.75))), 3)
    writer.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    ((step, value),) = [(e.step, e.value) for e in acc.Scalars("acc")]
    assert (step, value) == (3, 0.75)


def test_tf0_summary_with_a_tensor_of_tags_is_refused_clearly():
    with pytest.raises(TypeError, match="ScalarSummary: graphc takes the tag as a Python str"):
        tf.scalar_summary(tf.constant(1.0), tf.constant(1.0))


# ------------------------------------------------------------------- contrib / slim
def test_apply_regularization_sums_the_regularizer_over_the_weights():
    rng = np.random.RandomState(1)
    a, b = rng.randn(3, 2), rng.randn(4)
    wa = tf.Variable(a, name="wa")
    wb = tf.Variable(b, name="wb")
    total = tf.contrib.layers.apply_regularization(tf.contrib.layers.l2_regularizer(0.1),
                                                   [wa, wb])
    # l2_regularizer(scale)(w) = scale * sum(w^2) / 2
    assert _run(total) == pytest.approx(0.1 * (np.sum(a ** 2) + np.sum(b ** 2)) / 2,
                                        rel=1e-14)
    assert tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES) == [total]
    tf.add_to_collection(tf.GraphKeys.WEIGHTS, wb)  # the default weights_list
    by_default = tf.contrib.slim.regularizers.apply_regularization(
        tf.contrib.layers.l1_regularizer(0.3))
    # the scale is taken in the weights' dtype (float64 here), not rounded to float32
    assert _run(by_default) == pytest.approx(0.3 * np.sum(np.abs(b)), rel=1e-14)
    tf.reset_default_graph()
    with pytest.raises(ValueError, match="no weights to regularize"):
        tf.contrib.layers.apply_regularization(tf.contrib.layers.l2_regularizer(0.1))


def test_slim_initializers_are_contrib_layers_xavier():
    slim = tf.contrib.slim
    tf.set_random_seed(4)
    fan_in, fan_out = 300, 200
    uniform = tf.get_variable("u", [fan_in, fan_out], tf.float64,
                              initializer=slim.initializers.xavier_initializer())
    conv = tf.get_variable("c", [3, 3, 40, 60], tf.float64,
                           initializer=slim.xavier_initializer_conv2d(uniform=True))
    u, c = _run([uniform, conv])
    limit = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform: +-sqrt(6 / (in + out))
    assert np.abs(u).max() <= limit and np.abs(u).max() > 0.99 * limit
    assert np.var(u) == pytest.approx(limit ** 2 / 3, rel=0.02)
    conv_limit = np.sqrt(6.0 / (9 * 40 + 9 * 60))  # receptive field times channels
    assert np.abs(c).max() <= conv_limit and np.abs(c).max() > 0.99 * conv_limit


def test_slim_model_analyzer_counts_elements_and_bytes(capsys):
    a = tf.get_variable("a", [3, 4])
    b = tf.get_variable("b", [5], tf.float64)
    c = tf.get_variable("c", [0, 7])
    total = tf.contrib.slim.model_analyzer.analyze_vars([a, b, c], print_info=True)
    assert total == (12 + 5 + 0, 12 * 4 + 5 * 8)
    printed = capsys.readouterr().out
    assert "a:0 (float32 3x4) [12, bytes: 48]" in printed
    assert "Total size of variables: 17" in printed and "Total bytes of variables: 88" in printed


# ------------------------------------------------------------ tensorflow.python paths
@pytest.mark.parametrize("module, names", [
    ("graphc.python.ops.array_ops", ["concat", "shape", "reshape", "gather_nd"]),
    ("graphc.python.ops.math_ops", ["less", "add", "reduce_sum", "matmul"]),
    ("graphc.python.ops.control_flow_ops", ["cond", "while_loop", "group"]),
    ("graphc.python.ops.data_flow_ops", ["FIFOQueue", "RandomShuffleQueue"]),
    ("graphc.python.framework.ops", ["convert_to_tensor", "Graph", "get_default_graph"]),
    ("graphc.python.framework.graph_util", ["graph_util.convert_variables_to_constants"]),
    ("graphc.python.util.compat", ["compat.as_bytes", "compat.as_text"]),
])
def test_tensorflow_python_modules_hold_the_public_objects(module, names):
    mod = importlib.import_module(module)
    for name in names:
        public = tf
        for part in name.split("."):
            public = getattr(public, part)
        assert getattr(mod, name.rsplit(".", 1)[-1]) is public


def test_tensorflow_python_gfile_training_and_device_lib(tmp_path):
    from graphc.python.client import device_lib
    from graphc.python.platform import gfile
    from graphc.python.training import training
    assert gfile.FastGFile is tf.gfile.FastGFile and gfile.Exists is tf.gfile.Exists
    assert training.NewCheckpointReader is tf.train.NewCheckpointReader
    assert training.Saver is tf.train.Saver
    devices = device_lib.list_local_devices()
    assert devices[0].name == "/device:CPU:0" and devices[0].device_type == "CPU"
    assert [d.name for d in devices if d.device_type == "GPU"] in ([], ["/device:GPU:0"])
