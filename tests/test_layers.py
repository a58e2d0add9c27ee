"""gc.layers: variable names and collections, reuse, numbers against NumPy."""
import numpy as np
import pytest

import graphc as gc

RNG = np.random.default_rng(0)


def _run_initialized(fetches, feed=None):
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        return sess.run(fetches, feed)


def _var_names(key=gc.GraphKeys.GLOBAL_VARIABLES):
    return [v.name for v in gc.get_collection(key)]


# ------------------------------------------------------------------------------ dense
@pytest.mark.parametrize("batch,n_in,units", [(1, 1, 1), (7, 3, 5), (13, 9, 11)])
def test_dense_matches_numpy(batch, n_in, units):
    x = gc.placeholder(gc.float32, [None, n_in])
    y = gc.layers.dense(x, units, activation=gc.nn.relu)
    assert y.shape.as_list() == [None, units]
    kernel, bias = gc.trainable_variables()
    xv = RNG.standard_normal((batch, n_in)).astype(np.float32)
    out, k, b = _run_initialized([y, kernel, bias], {x: xv})
    np.testing.assert_allclose(out, np.maximum(xv @ k + b, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(b, np.zeros(units))


def test_dense_variable_names_and_collections():
    x = gc.placeholder(gc.float32, [None, 4])
    y1 = gc.layers.dense(x, 3)
    gc.layers.dense(y1, 2, use_bias=False)
    gc.layers.dense(x, 2, name="fc", trainable=False)
    assert _var_names() == ["dense/kernel:0", "dense/bias:0", "dense_1/kernel:0",
                            "fc/kernel:0", "fc/bias:0"]
    assert _var_names(gc.GraphKeys.TRAINABLE_VARIABLES) == ["dense/kernel:0", "dense/bias:0",
                                                            "dense_1/kernel:0"]
    assert y1.op.name.startswith("dense/")
    assert gc.get_collection(gc.GraphKeys.TRAINABLE_VARIABLES)[0].shape.as_list() == [4, 3]


def test_dense_inside_variable_scope():
    x = gc.placeholder(gc.float32, [None, 4])
    with gc.variable_scope("model"):
        gc.layers.dense(x, 3)
    assert _var_names() == ["model/dense/kernel:0", "model/dense/bias:0"]


def test_dense_reuse_shares_variables():
    x = gc.placeholder(gc.float32, [None, 4])
    a = gc.layers.dense(x, 3, name="fc")
    b = gc.layers.dense(x, 3, name="fc", reuse=True)
    c = gc.layers.dense(x, 3, name="fc", reuse=gc.AUTO_REUSE)
    assert len(gc.global_variables()) == 2
    xv = RNG.standard_normal((2, 4)).astype(np.float32)
    va, vb, vc = _run_initialized([a, b, c], {x: xv})
    np.testing.assert_array_equal(va, vb)
    np.testing.assert_array_equal(va, vc)


def test_dense_auto_reuse_creates_then_shares():
    x = gc.placeholder(gc.float32, [None, 4])
    gc.layers.dense(x, 3, name="shared", reuse=gc.AUTO_REUSE)
    gc.layers.dense(x, 3, name="shared", reuse=gc.AUTO_REUSE)
    assert _var_names() == ["shared/kernel:0", "shared/bias:0"]


def test_dense_name_clash_and_missing_reuse_raise():
    x = gc.placeholder(gc.float32, [None, 4])
    gc.layers.dense(x, 3, name="fc")
    with pytest.raises(ValueError, match="already exists"):
        gc.layers.dense(x, 3, name="fc")
    with pytest.raises(ValueError, match="does not exist"):
        gc.layers.dense(x, 3, name="other", reuse=True)


def test_dense_rank3_contracts_last_axis():
    x = gc.placeholder(gc.float32, [None, 5, 3])
    y = gc.layers.dense(x, 4)
    assert y.shape.as_list() == [None, 5, 4]
    xv = RNG.standard_normal((7, 5, 3)).astype(np.float32)
    out, k, b = _run_initialized([y] + gc.trainable_variables(), {x: xv})
    np.testing.assert_allclose(out, np.einsum("bti,iu->btu", xv, k) + b, rtol=1e-5, atol=1e-6)


def test_dense_reuse_without_name_shares_the_first_layer():
    x = gc.placeholder(gc.float32, [None, 4])
    gc.layers.dense(x, 3)
    gc.layers.dense(x, 3, reuse=True)
    assert _var_names() == ["dense/kernel:0", "dense/bias:0"]


def test_dense_rank3_unknown_inner_dims():
    x = gc.placeholder(gc.float32, [None, None, 3])
    y = gc.layers.dense(x, 4, use_bias=False)
    assert y.shape.as_list() == [None, None, 4]
    xv = RNG.standard_normal((2, 7, 3)).astype(np.float32)
    out, k = _run_initialized([y] + gc.trainable_variables(), {x: xv})
    np.testing.assert_allclose(out, xv @ k, rtol=1e-5, atol=1e-6)


def test_dense_unknown_last_dim_raises():
    with pytest.raises(ValueError, match="last dimension"):
        gc.layers.dense(gc.placeholder(gc.float32, [None, None]), 3)


def test_dense_default_kernel_is_glorot_uniform():
    gc.layers.dense(gc.placeholder(gc.float32, [None, 40]), 60)
    k = _run_initialized(gc.trainable_variables()[0])
    limit = np.sqrt(6.0 / (40 + 60))
    assert np.abs(k).max() <= limit
    assert np.abs(k).max() > 0.9 * limit  # spread over the range, not a narrow normal
    assert abs(k.std() - limit / np.sqrt(3)) < 0.1 * limit


def test_dense_initializers_and_regularizers():
    x = gc.placeholder(gc.float32, [None, 2])
    y = gc.layers.dense(x, 3, kernel_initializer=gc.constant_initializer(0.5),
                        bias_initializer=gc.constant_initializer(1.0),
                        kernel_regularizer=lambda w: 0.1 * gc.reduce_sum(gc.square(w)))
    reg = gc.get_collection(gc.GraphKeys.REGULARIZATION_LOSSES)
    assert len(reg) == 1
    out, reg_value = _run_initialized([y, reg[0]], {x: np.ones((1, 2), np.float32)})
    np.testing.assert_allclose(out, np.full((1, 3), 2.0))
    np.testing.assert_allclose(reg_value, 0.1 * 6 * 0.25, rtol=1e-6)


def test_dense_float64_inputs_make_float64_variables():
    y = gc.layers.dense(gc.placeholder(gc.float64, [None, 2]), 3)
    assert y.dtype == gc.float64
    assert all(v.dtype == gc.float64 for v in gc.global_variables())


# ------------------------------------------------------------------------ convolution
def _conv2d_numpy(x, k, stride, padding):
    kh, kw = k.shape[:2]
    if padding == "same":
        oh, ow = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
        ph = max((oh - 1) * stride + kh - x.shape[1], 0)
        pw = max((ow - 1) * stride + kw - x.shape[2], 0)
        x = np.pad(x, [(0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)])
    oh = (x.shape[1] - kh) // stride + 1
    ow = (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, k.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
    return out


@pytest.mark.parametrize("size,kernel,stride,padding", [
    (5, 3, 1, "valid"), (7, 3, 2, "same"), (8, 2, 2, "valid"), (6, 1, 1, "same")])
def test_conv2d_matches_numpy(size, kernel, stride, padding):
    x = gc.placeholder(gc.float32, [None, size, size, 2])
    y = gc.layers.conv2d(x, 3, kernel, strides=stride, padding=padding,
                         bias_initializer=gc.constant_initializer(0.25))
    kern, bias = gc.trainable_variables()
    assert kern.shape.as_list() == [kernel, kernel, 2, 3] and bias.shape.as_list() == [3]
    xv = RNG.standard_normal((3, size, size, 2)).astype(np.float32)
    out, k = _run_initialized([y, kern], {x: xv})
    expected = _conv2d_numpy(xv, k, stride, padding) + 0.25
    assert y.shape.as_list() == [None] + list(expected.shape[1:])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_conv2d_names_and_unknown_channels():
    x = gc.placeholder(gc.float32, [None, 4, 4, 1])
    gc.layers.conv2d(x, 2, (3, 3))
    gc.layers.conv2d(x, 2, 3, name="c")
    assert _var_names() == ["conv2d/kernel:0", "conv2d/bias:0", "c/kernel:0", "c/bias:0"]
    with pytest.raises(ValueError, match="channel dimension"):
        gc.layers.conv2d(gc.placeholder(gc.float32, [None, 4, 4, None]), 2, 3)


@pytest.mark.parametrize("layer, ndims", [("conv1d", 3), ("conv2d", 4), ("conv2d_transpose", 4)])
def test_conv_layers_refuse_an_input_of_another_rank_naming_the_layer(layer, ndims):
    x = gc.placeholder(gc.float32, [2] * (ndims + 1))
    with pytest.raises(ValueError, match=f"Input 0 of layer {layer} is incompatible with the "
                                         f"layer: expected ndim={ndims}, found ndim={ndims + 1}"):
        getattr(gc.layers, layer)(x, 2, 1)


def _pool_numpy(x, size, stride, reduce):
    oh = (x.shape[1] - size) // stride + 1
    ow = (x.shape[2] - size) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]), x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = x[:, i * stride:i * stride + size, j * stride:j * stride + size, :]
            out[:, i, j, :] = reduce(win, axis=(1, 2))
    return out


@pytest.mark.parametrize("layer,reduce", [(gc.layers.max_pooling2d, np.max),
                                          (gc.layers.average_pooling2d, np.mean)])
@pytest.mark.parametrize("size,pool,stride", [(4, 2, 2), (7, 3, 2), (5, 1, 1)])
def test_pooling_matches_numpy(layer, reduce, size, pool, stride):
    x = gc.placeholder(gc.float32, [None, size, size, 3])
    y = layer(x, pool, stride)
    xv = RNG.standard_normal((2, size, size, 3)).astype(np.float32)
    expected = _pool_numpy(xv, pool, stride, reduce)
    assert y.shape.as_list() == [None] + list(expected.shape[1:])
    np.testing.assert_allclose(_run_initialized(y, {x: xv}), expected, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- flatten
def test_flatten_keeps_unknown_batch():
    x = gc.placeholder(gc.float32, [None, 2, 3, 2])
    y = gc.layers.flatten(x)
    assert y.shape.as_list() == [None, 12]
    xv = RNG.standard_normal((5, 2, 3, 2)).astype(np.float32)
    np.testing.assert_array_equal(_run_initialized(y, {x: xv}), xv.reshape(5, 12))


def test_flatten_unknown_inner_dims():
    x = gc.placeholder(gc.float32, [3, None, 2])
    y = gc.layers.flatten(x)
    assert y.shape.as_list() == [3, None]
    xv = np.arange(18, dtype=np.float32).reshape(3, 3, 2)
    np.testing.assert_array_equal(_run_initialized(y, {x: xv}), xv.reshape(3, 6))


# --------------------------------------------------------------------------- dropout
def test_dropout_python_bool():
    x = gc.ones([200, 50])
    kept = gc.layers.dropout(x, rate=0.3, training=False)
    dropped = gc.layers.dropout(x, rate=0.3, training=True, seed=1)
    k, d = _run_initialized([kept, dropped])
    np.testing.assert_array_equal(k, np.ones((200, 50)))
    assert set(np.unique(d)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((d == 0).mean() - 0.3) < 0.03


def test_dropout_training_placeholder():
    training = gc.placeholder(gc.bool, [])
    x = gc.placeholder(gc.float32, [None, 40])
    y = gc.layers.dropout(x, rate=0.5, training=training)
    assert y.shape.as_list() == [None, 40]
    xv = np.ones((100, 40), np.float32)
    off = _run_initialized(y, {x: xv, training: False})
    np.testing.assert_array_equal(off, xv)
    on = _run_initialized(y, {x: xv, training: True})
    assert set(np.unique(on)) <= {0.0, 2.0}
    assert abs((on == 0).mean() - 0.5) < 0.05


def test_dropout_training_placeholder_gradient():
    training = gc.placeholder_with_default(False, [])
    x = gc.placeholder(gc.float32, [4, 3])
    grad, = gc.gradients(gc.reduce_sum(gc.layers.dropout(x, 0.5, training=training)), [x])
    np.testing.assert_array_equal(_run_initialized(grad, {x: np.zeros((4, 3))}), np.ones((4, 3)))


# --------------------------------------------------------------------- batch norm
def test_batch_norm_variables_and_update_ops():
    x = gc.placeholder(gc.float32, [None, 3])
    gc.layers.batch_normalization(x, training=True)
    assert _var_names() == ["batch_normalization/gamma:0", "batch_normalization/beta:0",
                            "batch_normalization/moving_mean:0",
                            "batch_normalization/moving_variance:0"]
    assert _var_names(gc.GraphKeys.TRAINABLE_VARIABLES) == ["batch_normalization/gamma:0",
                                                            "batch_normalization/beta:0"]
    assert [u.name for u in gc.get_collection(gc.GraphKeys.UPDATE_OPS)] == [
        "batch_normalization/AssignMovingAvg:0", "batch_normalization/AssignMovingAvg_1:0"]
    gc.layers.batch_normalization(x, training=False)
    assert len(gc.get_collection(gc.GraphKeys.UPDATE_OPS)) == 2  # inference adds none


def test_batch_norm_training_normalizes_and_updates_moving_averages():
    x = gc.placeholder(gc.float32, [None, 3])
    y = gc.layers.batch_normalization(x, momentum=0.9, training=True)
    updates = gc.get_collection(gc.GraphKeys.UPDATE_OPS)
    moving_mean, moving_var = gc.global_variables()[2:]
    xv = (RNG.standard_normal((64, 3)) * [1.0, 2.0, 3.0] + [1.0, -1.0, 5.0]).astype(np.float32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        out, _ = sess.run([y, updates], {x: xv})
        mm, mv = sess.run([moving_mean, moving_var])
    expected = (xv - xv.mean(0)) / np.sqrt(xv.var(0) + 1e-3)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mm, 0.1 * xv.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mv, 0.9 + 0.1 * xv.var(0), rtol=1e-4)


def test_batch_norm_inference_uses_moving_averages():
    x = gc.placeholder(gc.float32, [None, 2])
    y = gc.layers.batch_normalization(x, epsilon=0.01,
                                      moving_mean_initializer=gc.constant_initializer(1.0),
                                      moving_variance_initializer=gc.constant_initializer(4.0),
                                      gamma_initializer=gc.constant_initializer(2.0),
                                      beta_initializer=gc.constant_initializer(0.5))
    xv = RNG.standard_normal((5, 2)).astype(np.float32)
    np.testing.assert_allclose(_run_initialized(y, {x: xv}),
                               (xv - 1.0) / np.sqrt(4.01) * 2.0 + 0.5, rtol=1e-5)


def test_batch_norm_training_placeholder():
    training = gc.placeholder(gc.bool, [])
    x = gc.placeholder(gc.float32, [None, 2])
    y = gc.layers.batch_normalization(x, momentum=0.5, training=training)
    updates = gc.get_collection(gc.GraphKeys.UPDATE_OPS)
    moving_mean = gc.global_variables()[2]
    xv = (RNG.standard_normal((16, 2)) + 3.0).astype(np.float32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        infer, _ = sess.run([y, updates], {x: xv, training: False})
        np.testing.assert_allclose(infer, xv / np.sqrt(1 + 1e-3), rtol=1e-5)
        np.testing.assert_array_equal(sess.run(moving_mean), [0.0, 0.0])
        train, _ = sess.run([y, updates], {x: xv, training: True})
        np.testing.assert_allclose(train, (xv - xv.mean(0)) / np.sqrt(xv.var(0) + 1e-3),
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(sess.run(moving_mean), 0.5 * xv.mean(0), rtol=1e-5)


def test_batch_norm_channels_first_axis():
    x = gc.placeholder(gc.float32, [None, 3, 2, 2])
    y = gc.layers.batch_normalization(x, axis=1, training=True)
    assert gc.global_variables()[0].shape.as_list() == [3]
    xv = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    mean = xv.mean(axis=(0, 2, 3), keepdims=True)
    var = xv.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(_run_initialized(y, {x: xv}), (xv - mean) / np.sqrt(var + 1e-3),
                               rtol=1e-4, atol=1e-4)


def test_batch_norm_reuse():
    x = gc.placeholder(gc.float32, [None, 2])
    gc.layers.batch_normalization(x, training=True, name="bn")
    gc.layers.batch_normalization(x, training=False, name="bn", reuse=True)
    assert len(gc.global_variables()) == 4


def _np_moving_averages(batches, axis, momentum, bessel):
    """TF's updates, step by step: moving = moving * momentum + batch * (1 - momentum), the
    batch variance Bessel-corrected (n / (n - 1), n = values per channel) on the fused path."""
    mean = np.zeros(batches[0].shape[axis])
    var = np.ones(batches[0].shape[axis])
    for xv in batches:
        axes = tuple(i for i in range(xv.ndim) if i != axis)
        n = xv.size // xv.shape[axis]
        batch_var = xv.var(axis=axes, dtype=np.float64) * (n / (n - 1) if bessel else 1.0)
        mean = mean * momentum + xv.mean(axis=axes, dtype=np.float64) * (1 - momentum)
        var = var * momentum + batch_var * (1 - momentum)
    return mean, var


@pytest.mark.parametrize("shape,axis,fused,dtype,bessel", [
    ((4, 3, 5, 2), -1, None, np.float32, True),    # TF's 4-D default: the fused kernel
    ((4, 3, 5, 2), 3, True, np.float32, True),
    ((4, 2, 3, 5), 1, None, np.float32, True),     # NCHW
    ((1, 1, 2, 3), -1, None, np.float32, True),    # n = 2
    ((4, 3, 5, 2), -1, False, np.float32, False),  # fused=False: the plain variance
    ((4, 3, 5, 2), 2, None, np.float32, False),    # axis 2 cannot be fused
    ((4, 3, 5, 2), -1, None, np.float64, False),   # FusedBatchNorm has no float64
    ((6, 3), -1, None, np.float32, False),         # 2-D: never fused
    ((6, 3), -1, True, np.float32, False),
])
def test_batch_norm_moving_averages_match_tf_over_steps(shape, axis, fused, dtype, bessel):
    x = gc.placeholder(dtype, shape)
    y = gc.layers.batch_normalization(x, axis=axis, momentum=0.8, training=True, fused=fused)
    updates = gc.get_collection(gc.GraphKeys.UPDATE_OPS)
    moving_mean, moving_var = gc.global_variables()[2:]
    batches = [(RNG.standard_normal(shape) * 2 + 1).astype(dtype) for _ in range(4)]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for xv in batches:
            out, _ = sess.run([y, updates], {x: xv})
        mm, mv = sess.run([moving_mean, moving_var])
    a = axis % len(shape)
    expect_mean, expect_var = _np_moving_averages(batches, a, 0.8, bessel)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(mm, expect_mean, rtol=tol, atol=tol)
    np.testing.assert_allclose(mv, expect_var, rtol=tol, atol=tol)
    axes = tuple(i for i in range(len(shape)) if i != a)
    xv = batches[-1].astype(np.float64)
    normalized = (xv - xv.mean(axes, keepdims=True)) / np.sqrt(xv.var(axes, keepdims=True) + 1e-3)
    np.testing.assert_allclose(out, normalized, rtol=10 * tol, atol=10 * tol)


def test_fused_batch_norm_layer_training_tensor_and_inference():
    """A `training` tensor picks the batch statistics (and updates the averages with the
    corrected variance) or the moving ones (and leaves them), as TF's smart_cond."""
    training = gc.placeholder(gc.bool, [])
    x = gc.placeholder(gc.float32, [2, 2, 3, 2])
    y = gc.layers.batch_normalization(x, momentum=0.5, training=training,
                                      gamma_initializer=gc.constant_initializer(1.5),
                                      beta_initializer=gc.constant_initializer(-0.25))
    updates = gc.get_collection(gc.GraphKeys.UPDATE_OPS)
    moving_mean, moving_var = gc.global_variables()[2:]
    xv = (RNG.standard_normal((2, 2, 3, 2)) + 3).astype(np.float32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        infer, _ = sess.run([y, updates], {x: xv, training: False})
        np.testing.assert_allclose(infer, xv / np.sqrt(1 + 1e-3) * 1.5 - 0.25, rtol=1e-5)
        np.testing.assert_array_equal(sess.run(moving_var), [1.0, 1.0])
        train, _ = sess.run([y, updates], {x: xv, training: True})
        mm, mv = sess.run([moving_mean, moving_var])
    mean, var = xv.mean((0, 1, 2)), xv.var((0, 1, 2), dtype=np.float64)
    np.testing.assert_allclose(train, (xv - mean) / np.sqrt(var + 1e-3) * 1.5 - 0.25,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mm, 0.5 * mean, rtol=1e-5)
    np.testing.assert_allclose(mv, 0.5 + 0.5 * var * 12 / 11, rtol=1e-5)


# --------------------------------------------------------------- reuse of a model function
def _conv_net(x, training):
    h = gc.layers.conv2d(x, 3, 3, padding="same", activation=gc.nn.relu)
    h = gc.layers.conv2d(h, 2, 3)
    h = gc.layers.batch_normalization(h, training=training)
    return gc.layers.dense(gc.layers.flatten(h), 4)


def test_model_built_twice_under_reused_scope_shares_weights():
    """The train graph + eval graph pattern: TF counts layer names per variable scope and
    leaving a scope resets the counts under it, so the second build names its layers
    conv2d, conv2d_1, ... again and reuses them."""
    x = gc.placeholder(gc.float32, [None, 5, 5, 2])
    with gc.variable_scope("ConvNet"):
        train_out = _conv_net(x, training=True)
    n_vars = len(gc.global_variables())
    with gc.variable_scope("ConvNet", reuse=True):
        eval_out = _conv_net(x, training=True)
    assert len(gc.global_variables()) == n_vars
    assert [v.name for v in gc.trainable_variables()] == [
        "ConvNet/conv2d/kernel:0", "ConvNet/conv2d/bias:0", "ConvNet/conv2d_1/kernel:0",
        "ConvNet/conv2d_1/bias:0", "ConvNet/batch_normalization/gamma:0",
        "ConvNet/batch_normalization/beta:0", "ConvNet/dense/kernel:0", "ConvNet/dense/bias:0"]
    assert eval_out.name.startswith("ConvNet_1/dense/")
    xv = RNG.standard_normal((3, 5, 5, 2)).astype(np.float32)
    a, b = _run_initialized([train_out, eval_out], {x: xv})
    np.testing.assert_array_equal(a, b)


def test_model_built_twice_with_auto_reuse_and_nested_scopes():
    x = gc.placeholder(gc.float32, [None, 4])

    def model(inputs):
        with gc.variable_scope("model", reuse=gc.AUTO_REUSE):
            with gc.variable_scope("encoder"):
                h = gc.layers.dense(gc.layers.dense(inputs, 3), 3)
            with gc.variable_scope("decoder"):
                return gc.layers.dense(h, 2)
    first = model(x)
    names = [v.name for v in gc.global_variables()]
    second = model(x)
    assert [v.name for v in gc.global_variables()] == names == [
        "model/encoder/dense/kernel:0", "model/encoder/dense/bias:0",
        "model/encoder/dense_1/kernel:0", "model/encoder/dense_1/bias:0",
        "model/decoder/dense/kernel:0", "model/decoder/dense/bias:0"]
    xv = RNG.standard_normal((2, 4)).astype(np.float32)
    a, b = _run_initialized([first, second], {x: xv})
    np.testing.assert_array_equal(a, b)


def test_default_scope_names_count_per_scope():
    """Unique default names are per enclosing variable scope, skip names already open, and
    a re-entered scope object leaves the counts as it found them."""
    with gc.variable_scope("a") as a:
        with gc.variable_scope("block_1"):
            pass
        names = []
        for _ in range(3):
            with gc.variable_scope(None, default_name="block") as s:
                names.append(s.name)
    assert names == ["a/block", "a/block_2", "a/block_3"]
    with gc.variable_scope(a):
        with gc.variable_scope(None, default_name="block") as s:
            assert s.name == "a/block"
    with gc.variable_scope("b"):
        with gc.variable_scope(None, default_name="block") as s:
            assert s.name == "b/block"
    with pytest.raises(ValueError, match="reuse=True cannot be used without a name_or_scope"):
        with gc.variable_scope(None, default_name="block", reuse=True):
            pass


def _conv1d_reference(x, kernel, bias, stride, rate, padding):
    """NumPy 1-D convolution [b, n, c] * [k, c, f], TF's SAME/VALID padding."""
    n, k = x.shape[1], kernel.shape[0]
    span = (k - 1) * rate + 1
    if padding == "same":
        out_len = -(-n // stride)
        total = max((out_len - 1) * stride + span - n, 0)
        x = np.pad(x, [(0, 0), (total // 2, total - total // 2), (0, 0)])
    else:
        out_len = max(-(-(n - span + 1) // stride), 0)
    out = np.zeros((x.shape[0], out_len, kernel.shape[2]))
    for t in range(out_len):
        window = x[:, t * stride: t * stride + span: rate, :]  # [b, k, c]
        out[:, t] = np.einsum("bkc,kcf->bf", window, kernel)
    return out + bias


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride, rate, padding, fmt", [
    (1, 1, "valid", "channels_last"), (2, 1, "same", "channels_last"),
    (1, 2, "same", "channels_last"), (3, 1, "valid", "channels_first")])
def test_conv1d_layer_matches_numpy(dtype, stride, rate, padding, fmt):
    rng = np.random.RandomState(4)
    x = rng.randn(2, 9, 3).astype(dtype)
    fed = x if fmt == "channels_last" else x.transpose(0, 2, 1)
    y = gc.layers.conv1d(fed, 4, 3, strides=stride, dilation_rate=rate, padding=padding,
                         data_format=fmt, bias_initializer=gc.constant_initializer(0.25),
                         name="conv")
    kernel = [v for v in gc.trainable_variables() if v.op.name == "conv/kernel"][0]
    assert kernel.shape.as_list() == [3, 3, 4]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        out, k = sess.run([y, kernel])
    expected = _conv1d_reference(x.astype(np.float64), k.astype(np.float64), 0.25, stride,
                                 rate, padding)
    if fmt == "channels_first":
        out = out.transpose(0, 2, 1)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_conv1d_layer_needs_rank_3_with_known_channels():
    with pytest.raises(ValueError, match="expected ndim=3"):
        gc.layers.conv1d(np.zeros((2, 3), np.float32), 2, 1)
    with pytest.raises(ValueError, match="channel dimension of the inputs should be defined"):
        gc.layers.conv1d(gc.placeholder(gc.float32, [None, 5, None]), 2, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_layer_object_shares_its_variables_across_calls(dtype):
    rng = np.random.RandomState(5)
    a, b = rng.randn(3, 4).astype(dtype), rng.randn(2, 5, 4).astype(dtype)
    layer = gc.layers.Dense(2, activation=gc.nn.relu, name="proj",
                            bias_initializer=gc.constant_initializer(0.5))
    assert not layer.built
    with gc.variable_scope("first"):
        ya = layer(a)
    with gc.variable_scope("second"):
        yb = layer.apply(b)  # any rank >= 2: the last axis
    assert layer.built and layer.name == "proj"
    assert [v.op.name for v in layer.trainable_variables] == ["first/proj/kernel",
                                                              "first/proj/bias"]
    assert _var_names() == ["first/proj/kernel:0", "first/proj/bias:0"]
    out_a, out_b, k = _run_initialized([ya, yb, layer.kernel])
    np.testing.assert_allclose(out_a, np.maximum(a @ k + 0.5, 0), rtol=1e-5)
    np.testing.assert_allclose(out_b, np.maximum(b @ k + 0.5, 0), rtol=1e-5)
    assert out_b.shape == (2, 5, 2) and out_a.dtype == dtype
    assert layer.compute_output_shape([None, 7, 4]).as_list() == [None, 7, 2]


def test_dense_layer_objects_are_named_like_the_function():
    x = gc.zeros([1, 3])
    first, second = gc.layers.Dense(2), gc.layers.Dense(2, use_bias=False)
    first(x)
    second(x)
    gc.layers.dense(x, 2)
    assert (first.name, second.name) == ("dense", "dense_1") and second.bias is None
    assert _var_names() == ["dense/kernel:0", "dense/bias:0", "dense_1/kernel:0",
                            "dense_2/kernel:0", "dense_2/bias:0"]
    with pytest.raises(AttributeError, match="until it is called"):
        gc.layers.Dense(2).kernel
    with pytest.raises(ValueError, match="units must be a positive integer"):
        gc.layers.Dense(0)
