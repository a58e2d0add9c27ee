"""Long but legal graphs compile without a Python RecursionError and match NumPy.

The compiler walks expressions and fused chains whose depth grows with the graph (an
unrolled recurrence, a concatenation of many pieces as nested selects); these tests keep
the sizes tiny and the graphs long, at the default recursion limit.
"""
import numpy as np
import pytest

import graphc as gc

BACKENDS = ["compiled", "gpu_emulated"]
# 128, not 512: the recursion depth no longer grows with the steps (fusion's MAX_CHAIN),
# but at 512 steps memory planning's superlinear time (issue 11) takes many minutes
STEPS = 128


@pytest.fixture(params=BACKENDS)
def on_backend(request, monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", request.param)
    return request.param


def test_chain_of_5000_elementwise_ops(on_backend):
    x = gc.placeholder(gc.float32, [3], name="x")
    y = x
    for i in range(2500):
        y = y * np.float32(0.999) + np.float32(0.001 * (i % 3))
    feed = np.array([1.0, -2.0, 0.5], np.float32)
    with gc.Session() as sess:
        got = sess.run(y, {x: feed})
    want = feed.copy()
    for i in range(2500):
        want = want * np.float32(0.999) + np.float32(0.001 * (i % 3))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_concat_of_1200_pieces(on_backend):
    x = gc.placeholder(gc.float32, [2], name="x")
    pieces = [x * np.float32(i + 1) for i in range(1200)]
    y = gc.concat(pieces, axis=0) - np.float32(1.0)
    feed = np.array([0.25, -3.0], np.float32)
    with gc.Session() as sess:
        got = sess.run(y, {x: feed})
    want = np.concatenate([feed * np.float32(i + 1) for i in range(1200)]) - np.float32(1.0)
    assert got.shape == (2400,)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def test_static_rnn_lstm_long_unroll(on_backend):
    steps, batch, inputs, units = STEPS, 2, 3, 2
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, steps, inputs)).astype(np.float32)
    x = gc.placeholder(gc.float32, [batch, steps, inputs], name="x")
    cell = gc.nn.rnn_cell.BasicLSTMCell(units)
    outs, state = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)
    y = gc.stack(outs, axis=1)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        kernel, bias = sess.run([cell.weights[0], cell.weights[1]])
        got, got_c = sess.run([y, state.c], {x: xs})
    # BasicLSTMCell: gates i, j, f, o from [x, h] @ kernel + bias; forget bias 1.0
    k64, b64 = kernel.astype(np.float64), bias.astype(np.float64)
    c = np.zeros((batch, units))
    h = np.zeros((batch, units))
    want = []
    for t in range(steps):
        gates = np.concatenate([xs[:, t].astype(np.float64), h], axis=1) @ k64 + b64
        i, j, f, o = np.split(gates, 4, axis=1)
        c = c * _sigmoid(f + 1.0) + _sigmoid(i) * np.tanh(j)
        h = np.tanh(c) * _sigmoid(o)
        want.append(h)
    np.testing.assert_allclose(got, np.stack(want, axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_c, c, rtol=1e-4, atol=1e-5)

