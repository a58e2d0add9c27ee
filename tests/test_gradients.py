"""The gradients transformation itself: fan-out, unconnected inputs, stop_gradients, grad_ys."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order


def test_fan_out_sums_gradients():
    x = gc.placeholder(gc.float32, [])
    y = x * x + 3.0 * x
    g = gc.gradients(y, x)[0]
    with gc.Session() as sess:
        assert sess.run(g, {x: 2.0}) == pytest.approx(7.0)
    assert g.op.name.startswith("gradients/")


def test_unconnected_and_integer_inputs_get_none():
    x = gc.placeholder(gc.float32, [])
    z = gc.placeholder(gc.float32, [])
    i = gc.placeholder(gc.int32, [])
    y = x * 2.0 + gc.cast(i, gc.float32)
    assert gc.gradients(y, [z, i]) == [None, None]


def test_stop_gradient_and_stop_gradients_argument():
    x = gc.placeholder(gc.float32, [])
    a = x * 2.0
    b = gc.stop_gradient(x) * 3.0 + a
    g1 = gc.gradients(b, x)[0]
    g2 = gc.gradients(b, x, stop_gradients=[a])[0]
    with gc.Session() as sess:
        assert sess.run(g1, {x: 1.0}) == pytest.approx(2.0)
        assert g2 is None


def test_grad_ys_weights_the_output():
    x = gc.placeholder(gc.float32, [3])
    y = x * 2.0
    g = gc.gradients(y, x, grad_ys=gc.constant([1.0, 10.0, 100.0]))[0]
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(g, {x: np.ones(3)}), [2, 20, 200])


def test_gradient_with_respect_to_variable():
    w = gc.Variable([1.0, 2.0])
    loss = gc.reduce_sum(w * w)
    g = gc.gradients(loss, [w])[0]
    with gc.Session() as sess:
        sess.run(w.initializer)
        np.testing.assert_allclose(sess.run(g), [2, 4])


def test_multiple_ys_are_summed():
    x = gc.placeholder(gc.float32, [])
    g = gc.gradients([x * 2.0, x * 3.0], x)[0]
    with gc.Session() as sess:
        assert sess.run(g, {x: 1.0}) == pytest.approx(5.0)


def test_gradient_names_are_scoped():
    x = gc.placeholder(gc.float32, [2, 2])
    with gc.name_scope("dense"):
        y = gc.matmul(x, x)
    g = gc.gradients(gc.reduce_sum(y), x)[0]
    names = [op.name for op in gc.get_default_graph().get_operations()]
    assert any(n.startswith("gradients/dense/MatMul_grad/") for n in names)
    assert g is not None


def test_gradcheck_of_a_composite_through_broadcasting():
    rng = np.random.default_rng(0)
    check_gradients(lambda a, b: gc.tanh(a * b + a) / (1.0 + b * b),
                    [rng.standard_normal((3, 1)), rng.standard_normal((4,))])


def test_second_derivative_of_composite():
    rng = np.random.default_rng(1)
    check_second_order(lambda a, b: gc.exp(a) * gc.sin(b) + a * a * b,
                       [rng.standard_normal((2, 3)), rng.standard_normal((3,))])


def test_missing_gradient_raises_lookup_error():
    x = gc.placeholder(gc.float32, [2])
    y = gc.cast(gc.argmax(x), gc.float32)
    assert gc.gradients(y, x) == [None]  # argmax is not differentiable: no path
