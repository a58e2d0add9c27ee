"""TF1 training helpers: AdadeltaOptimizer, FtrlOptimizer, cosine_decay,
ExponentialMovingAverage and layers.conv2d_transpose, against NumPy simulations of TF1's
kernels (training_ops.cc) and documented formulas."""
import math

import numpy as np
import pytest

import graphc as tf

rng = np.random.default_rng(3)
FLOATS = [np.float32, np.float64]


def _tol(dtype):
    return dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)


def _train(opt, dtype, w0, target, steps, sparse=False):
    """Runs `steps` updates of loss = sum(c * (w - target)^2) (gathered rows when sparse);
    returns the value after each step and the gradients each step used."""
    w = tf.Variable(w0.astype(dtype))
    c = np.arange(1, w0.size + 1, dtype=dtype).reshape(w0.shape)
    rows = np.array([2, 0, 2], np.int32)
    if sparse:
        picked = tf.gather(w, rows)
        loss = tf.reduce_sum(c[rows] * (picked - target[rows].astype(dtype)) ** 2)
    else:
        loss = tf.reduce_sum(c * (w - target.astype(dtype)) ** 2)
    grad = tf.gradients(loss, [w])[0]
    train = opt.minimize(loss)
    values, grads = [], []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(steps):
            grads.append(np.asarray(sess.run(tf.convert_to_tensor(grad))))
            sess.run(train)
            values.append(sess.run(w))
    return values, grads


def _f32(*hyperparameters):
    """TF1 makes float32 tensors of Python hyperparameters, then casts them to the
    variable's dtype: a float64 run sees them rounded to float32."""
    return [float(np.float32(h)) for h in hyperparameters]


def _adadelta_ref(w, grads, lr, rho, eps):
    lr, rho, eps = _f32(lr, rho, eps)
    accum, accum_update, out = np.zeros_like(w), np.zeros_like(w), []
    for g in grads:
        touched = g != 0  # the sparse kernel leaves untouched rows (g == 0 here) alone
        accum_new = rho * accum + (1 - rho) * g * g
        update = np.sqrt(accum_update + eps) / np.sqrt(accum_new + eps) * g
        accum = np.where(touched, accum_new, accum)
        accum_update = np.where(touched, rho * accum_update + (1 - rho) * update ** 2,
                                accum_update)
        w = w - lr * update
        out.append(w.copy())
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sparse", [False, True])
def test_adadelta(dtype, sparse):
    w0 = rng.standard_normal((4, 2))
    target = rng.standard_normal((4, 2))
    values, grads = _train(tf.train.AdadeltaOptimizer(0.5, rho=0.9, epsilon=1e-6), dtype, w0,
                           target, 4, sparse)
    expected = _adadelta_ref(w0.astype(np.float64), [g.astype(np.float64) for g in grads],
                             0.5, 0.9, 1e-6)
    for got, want in zip(values, expected):
        np.testing.assert_allclose(got, want, **_tol(dtype))


def _ftrl_ref(w, grads, lr, power, accum0, l1, l2, shrink):
    lr, power, l1, l2, shrink = _f32(lr, power, l1, l2, shrink)
    accum, linear, out = np.full_like(w, accum0), np.zeros_like(w), []
    for g in grads:
        touched = g != 0
        g_s = g + 2 * shrink * w
        new_accum = accum + g * g
        new_linear = linear + g_s - (new_accum ** -power - accum ** -power) / lr * w
        quadratic = new_accum ** -power / lr + 2 * l2
        new_w = np.where(np.abs(new_linear) > l1, (l1 * np.sign(new_linear) - new_linear) /
                         quadratic, 0.0)
        w = np.where(touched, new_w, w)
        accum = np.where(touched, new_accum, accum)
        linear = np.where(touched, new_linear, linear)
        out.append(w.copy())
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("power,l1,l2,shrink", [(-0.5, 0.0, 0.0, 0.0), (-0.5, 0.3, 0.1, 0.0),
                                                (-0.7, 0.05, 0.2, 0.0), (-0.5, 0.1, 0.1, 0.2)])
def test_ftrl(dtype, sparse, power, l1, l2, shrink):
    w0 = rng.standard_normal((4, 2))
    target = rng.standard_normal((4, 2))
    opt = tf.train.FtrlOptimizer(0.3, learning_rate_power=power, initial_accumulator_value=0.2,
                                 l1_regularization_strength=l1, l2_regularization_strength=l2,
                                 l2_shrinkage_regularization_strength=shrink)
    values, grads = _train(opt, dtype, w0, target, 4, sparse)
    expected = _ftrl_ref(w0.astype(np.float64), [g.astype(np.float64) for g in grads], 0.3,
                         power, 0.2, l1, l2, shrink)
    for got, want in zip(values, expected):
        np.testing.assert_allclose(got, want, **_tol(dtype))


def test_ftrl_rejects_bad_hyperparameters():
    with pytest.raises(ValueError, match="learning_rate_power"):
        tf.train.FtrlOptimizer(0.1, learning_rate_power=0.5)
    with pytest.raises(ValueError, match="l1_regularization_strength"):
        tf.train.FtrlOptimizer(0.1, l1_regularization_strength=-1.0)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_cosine_decay(dtype):
    step = tf.placeholder(tf.int64, [])
    lr = tf.train.cosine_decay(tf.constant(0.5, dtype), step, 100, alpha=0.1)
    assert lr.dtype == dtype
    with tf.Session() as sess:
        for s in (0, 1, 37, 100, 250):
            cos = 0.5 * (1 + math.cos(math.pi * min(s, 100) / 100))
            np.testing.assert_allclose(sess.run(lr, {step: s}), 0.5 * (0.9 * cos + 0.1),
                                       rtol=1e-6 if dtype == tf.float32 else 1e-14)


def _ema_decay(n):
    """TF1 computes the decay in float32 (a float32 tensor of 0.9, num_updates cast to
    float32), then casts it to the variable's dtype."""
    n = np.float32(n)
    return float(min(np.float32(0.9), (np.float32(1) + n) / (np.float32(10) + n)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_exponential_moving_average(dtype):
    v = tf.Variable(np.array([1.0, -2.0], dtype))
    step = tf.Variable(0, trainable=False)
    fed = tf.placeholder(dtype, [])
    loss_like = fed * 2.0  # a tensor's shadow starts at zeros
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
    with tf.control_dependencies([v.assign_add(np.array([1.0, 1.0], dtype)),
                                  step.assign_add(1)]):
        train = tf.no_op()
    with tf.control_dependencies([train]):
        update = ema.apply([v, loss_like])
    shadow, loss_shadow = ema.average(v), ema.average(loss_like)
    assert shadow.name == "Variable/ExponentialMovingAverage:0"
    assert v in tf.moving_average_variables() and shadow not in tf.trainable_variables()
    want, want_loss, value, n = np.array([1.0, -2.0]), 0.0, np.array([1.0, -2.0]), 0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(4):
            sess.run(update, {fed: n + 0.5})
            want_loss = want_loss - (1 - _ema_decay(n + 1)) * (want_loss - 2 * (n + 0.5))
            value, n = value + 1.0, n + 1
            want = want - (1 - _ema_decay(n)) * (want - value)
            np.testing.assert_allclose(sess.run(shadow), want, **_tol(dtype))
            np.testing.assert_allclose(sess.run(loss_shadow), want_loss, **_tol(dtype))
    restore = ema.variables_to_restore()
    assert restore["Variable/ExponentialMovingAverage"] is v and restore["Variable_1"] is step
    with pytest.raises(ValueError, match="already computed"):
        ema.apply([v])


def _conv_transpose_ref(x, kernel, stride, padding):
    n, h, w, c = x.shape
    kh, kw, f, _ = kernel.shape
    full = np.zeros((n, (h - 1) * stride + kh, (w - 1) * stride + kw, f))
    for i in range(h):
        for j in range(w):
            full[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :] += np.einsum(
                "nc,xyfc->nxyf", x[:, i, j, :], kernel)
    if padding == "valid":  # a stride past the kernel leaves rows no input reaches: zeros
        out_h, out_w = h * stride + max(kh - stride, 0), w * stride + max(kw - stride, 0)
        full = np.pad(full, ((0, 0), (0, max(out_h - full.shape[1], 0)),
                             (0, max(out_w - full.shape[2], 0)), (0, 0)))
        return full[:, :out_h, :out_w]
    pad_h = max((h - 1) * stride + kh - h * stride, 0) // 2
    pad_w = max((w - 1) * stride + kw - w * stride, 0) // 2
    return full[:, pad_h:pad_h + h * stride, pad_w:pad_w + w * stride]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel_size,stride,padding", [(3, 2, "valid"), (3, 2, "same"),
                                                        (2, 2, "same"), (3, 1, "valid"),
                                                        (1, 3, "valid")])
def test_conv2d_transpose_layer(dtype, kernel_size, stride, padding):
    x = rng.standard_normal((2, 3, 4, 2)).astype(dtype)
    inputs = tf.placeholder(dtype, [None, 3, 4, 2])
    y = tf.layers.conv2d_transpose(inputs, 5, kernel_size, strides=stride, padding=padding,
                                   bias_initializer=tf.constant_initializer(0.5))
    kernel = [v for v in tf.trainable_variables() if v.name.endswith("kernel:0")][0]
    assert kernel.shape.as_list() == [kernel_size, kernel_size, 5, 2]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, k = sess.run([y, kernel], {inputs: x})
    expected = _conv_transpose_ref(x.astype(np.float64), k.astype(np.float64), stride,
                                   padding) + 0.5
    assert y.shape.as_list() == [None] + list(expected.shape[1:])
    np.testing.assert_allclose(out, expected, **_tol(dtype))


def _adamw_ref(w, grads, wd, lr, b1, b2, eps, decayed_rows=None):
    lr, b1, b2, eps, wd = _f32(lr, b1, b2, eps, wd)
    m, v, out = np.zeros_like(w), np.zeros_like(w), []
    # beta1_power/beta2_power are float32 variables (made from Python floats) multiplied in
    # float32 after each step, as TF1's
    p1, p2 = np.float32(b1), np.float32(b2)
    for g in grads:
        rows = np.ones_like(w, bool) if decayed_rows is None else decayed_rows
        w = np.where(rows, w - wd * w, w)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        lr_t = lr * np.sqrt(1 - float(p2)) / (1 - float(p1))
        w = w - lr_t * m / (np.sqrt(v) + eps)
        p1, p2 = np.float32(p1 * np.float32(b1)), np.float32(p2 * np.float32(b2))
        out.append(w.copy())
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sparse", [False, True])
def test_adamw(dtype, sparse):
    w0 = rng.standard_normal((4, 2))
    target = rng.standard_normal((4, 2))
    opt = tf.contrib.opt.AdamWOptimizer(0.1, learning_rate=0.05)
    values, grads = _train(opt, dtype, w0, target, 3, sparse)
    rows = None
    if sparse:  # the gathered rows (2 and 0) decay; the others only follow Adam's m, v
        rows = np.zeros((4, 2), bool)
        rows[[0, 2]] = True
    expected = _adamw_ref(w0.astype(np.float64), [g.astype(np.float64) for g in grads], 0.1,
                          0.05, 0.9, 0.999, 1e-8, rows)
    for got, want in zip(values, expected):
        np.testing.assert_allclose(got, want, **_tol(dtype))
