"""The float32 fast paths of kernels/math_approx.py: exp for arguments known to be <= 0
(softmax's exp(x - max), attrs {"nonpositive": True}), exp and tanh built on the magic-number
reduction. Dense checks of the error bounds stated in test_scalar_ops.ACCURACY_BOUNDS, and
the softmax lowerings using the nonpositive exp."""
import numpy as np
import pytest

import graphc as gc
from tools.transcendental_accuracy import build_loop_module, jit_elementwise, optimize

RNG = np.random.default_rng(7)


def max_ulp(got, want):
    """Max error in ulps of the rounded reference (finite nonzero results), and whether
    the other results (0, inf, nan) are exactly the reference's."""
    with np.errstate(over="ignore"):
        rounded = want.astype(np.float32)
    finite = np.isfinite(rounded) & (rounded != 0)
    ulp = np.spacing(np.abs(rounded[finite])).astype(np.float64)
    err = np.abs(got[finite].astype(np.float64) - want[finite]) / ulp
    return float(err.max()), np.array_equal(got[~finite], rounded[~finite], equal_nan=True)


def exp_ref(x):
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.longdouble)).astype(np.float64)


@pytest.mark.parametrize("nonpositive", [False, True])
def test_float32_exp_dense(nonpositive):
    hi = 0.0 if nonpositive else 89.0
    x = np.concatenate([RNG.uniform(-110, hi, 400_000), RNG.uniform(-1, 0, 100_000) *
                        10.0 ** RNG.uniform(-30, 0, 100_000)]).astype(np.float32)
    attrs = {"nonpositive": True} if nonpositive else None
    got, _ = jit_elementwise("Exp", ["float32"], "float32", attrs)(x)
    ulps, specials = max_ulp(got, exp_ref(x))
    assert ulps <= 2 and specials, ulps
    # subnormal results round once, exactly as the long double reference
    edges = np.array([-103.2, -104.0, -100.0, -87.5, -87.3, -95.123, -120.0], np.float32)
    np.testing.assert_array_equal(
        jit_elementwise("Exp", ["float32"], "float32", attrs)(edges)[0],
        exp_ref(edges).astype(np.float32))


def test_nonpositive_exp_specials():
    x = np.array([-np.inf, np.nan, -0.0, 0.0, -1e-30, -1e-45], np.float32)
    got, _ = jit_elementwise("Exp", ["float32"], "float32", {"nonpositive": True})(x)
    np.testing.assert_array_equal(got, np.array([0.0, np.nan, 1.0, 1.0, 1.0, 1.0], np.float32))


def test_float32_tanh_dense():
    x = np.concatenate([RNG.uniform(-20, 20, 400_000),
                        RNG.uniform(-1, 1, 200_000) * 10.0 ** RNG.uniform(-38, 0, 200_000),
                        np.arange(0, 10, 1 / 4096)]).astype(np.float32)
    got, _ = jit_elementwise("Tanh", ["float32"], "float32")(x)
    ulps, specials = max_ulp(got, np.tanh(x.astype(np.float64)))
    assert ulps <= 3 and specials, ulps
    assert np.all(np.abs(got) <= 1)
    tiny = np.array([1e-30, -1e-30, 1e-45, -0.0, 0.0], np.float32)
    got = jit_elementwise("Tanh", ["float32"], "float32")(tiny)[0]
    np.testing.assert_array_equal(got, tiny)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(tiny))


@pytest.mark.parametrize("op_type", ["Exp", "Tanh", "Sigmoid"])
def test_fast_paths_use_no_float_to_int_conversion(op_type):
    """The magic-number reduction needs no rint/fptosi (and so no nan special case)."""
    text = str(optimize(build_loop_module(op_type, ["float32"], "float32", name="v")))
    assert " x float>" in text
    assert "fptosi" not in text and "roundeven" not in text


def _softmax_module_ir(build):
    """The optimized LLVM IR of the executable computing build()'s fetches."""
    from graphc.compiler.backends import cpu as cpu_backend
    captured = {}
    original = cpu_backend.generate

    def spy(module, target=None, **options):
        spec = original(module, target, **options)
        captured["ir"] = spec["llvm_ir"]
        return spec
    cpu_backend.generate = spy
    try:
        with gc.Graph().as_default():
            fetch, feed = build()
            with gc.Session() as sess:
                value = sess.run(fetch, feed)
    finally:
        cpu_backend.generate = original
    return captured["ir"], value


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (5, 129)])
def test_softmax_xent_with_extremes_matches_reference(rows, cols):
    logits = RNG.normal(size=(rows, cols)).astype(np.float32) * 30
    logits[0, 0] = -200.0  # exp(x - max) underflows past the subnormals
    if cols > 1:
        logits[-1, -1] = 95.0  # a large max: every other exp is small or subnormal
    labels = RNG.integers(0, cols, rows).astype(np.int32)

    def build():
        x = gc.placeholder(gc.float32, [None, cols])
        y = gc.placeholder(gc.int32, [None])
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=x))
        grad = gc.gradients(loss, x)[0]
        return [loss, grad, gc.nn.softmax(x), gc.nn.log_softmax(x)], {x: logits, y: labels}
    ir, got = _softmax_module_ir(build)
    assert "shl" in ir  # the magic-number exp
    shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
    prob = np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    onehot = np.eye(cols)[labels]
    np.testing.assert_allclose(got[0], -log_prob[np.arange(rows), labels].mean(), rtol=1e-5)
    np.testing.assert_allclose(got[1], (prob - onehot) / rows, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got[2], prob, rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(got[3], log_prob, rtol=1e-5, atol=1e-6)  # float32 log(sum)


def test_softmax_nan_row_stays_nan():
    logits = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0], [np.inf, 0.0, 1.0]], np.float32)
    with gc.Graph().as_default():
        x = gc.placeholder(gc.float32, [3, 3])
        with gc.Session() as sess:
            got = sess.run(gc.nn.softmax(x), {x: logits})
    assert np.isnan(got[0]).all() and np.isnan(got[2]).all()
    want = np.exp(logits[1] - 3) / np.exp(logits[1] - 3).sum()
    np.testing.assert_allclose(got[1], want, rtol=1e-6)
