"""Shared by the tests of loops compiled natively: a small RNN loop with its NumPy
reference, and runs of a graph as one native stage."""
import warnings

import numpy as np

import graphc as gc


def tanh_loop(dtype, w, rows=None):
    """h <- tanh(h @ w + x) for n steps, from h = x / 2: an RNN cell over a small state."""
    x = gc.placeholder(dtype, [rows, w.shape[0]])
    n = gc.placeholder(gc.int32, [])
    w = gc.constant(w.astype(dtype))
    i, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [gc.constant(0), x * 0.5])
    return x, n, i, h


def np_tanh_loop(xv, w, trips):
    h = xv * 0.5
    for _ in range(trips):
        h = np.tanh(h @ w.astype(xv.dtype) + xv)
    return h


def run_in_one_stage(fetches, feed_list, backend="compiled", monkeypatch=None,
                     initialize=False, compiles=1):
    """`fetches` for each feed dict of `feed_list` in one new Session, compiled as one
    native stage (a fallback warning is an error; on the compiled backend `compiles`
    compiles, None: any, past the initializer's when `initialize`). The reference
    executor runs the host kernels of While and If (conftest's `native` lets it)."""
    if monkeypatch is not None:
        monkeypatch.setenv("GRAPHC_BACKEND", backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            if initialize:
                sess.run(gc.global_variables_initializer())
            before = sess.compile_count
            out = [sess.run(fetches, feed) for feed in feed_list]
            if backend == "compiled" and compiles is not None:
                assert sess.compile_count - before == compiles
    return out


def raw_lstm(dtype, shape, units, element_shape=None, next_input="clamped",
             broadcast_weights=False):
    """raw_rnn over a BasicLSTMCell of `units` on inputs of `shape` [steps, batch, depth]
    (steps None: known only when fed) read from an unstacked TensorArray (made with
    `element_shape`, or without one), until every example's length has passed. The next
    input: "clamped" reads row min(time, last); "cond" reads it in a tf.cond that gives
    zeros once every example has finished (TF1's raw_rnn example). The loss of the emitted
    outputs (zeros past a length) and of the final state, np_raw_lstm's; its weights r
    multiply the outputs' sum over time, or with `broadcast_weights` the stack itself
    (whose gradient sums the broadcast over the rows the loop made).
    -> (x, lengths, cell, loss, final h)"""
    from graphc.ops import rnn_cell
    steps, batch, depth = shape
    x = gc.placeholder(dtype, shape, name="x")
    lengths = gc.placeholder(gc.int32, [batch], name="lengths")
    if steps is None:
        steps = gc.shape(x)[0]
    inputs_ta = gc.TensorArray(dtype, size=steps, element_shape=element_shape).unstack(x)
    cell = rnn_cell.BasicLSTMCell(units)

    def read(time, finished):
        if next_input == "clamped":
            return inputs_ta.read(gc.minimum(time, steps - 1))
        return gc.cond(gc.reduce_all(finished), lambda: gc.zeros([batch, depth], dtype),
                       lambda: inputs_ta.read(time))

    def loop_fn(time, cell_output, cell_state, loop_state):
        state = cell.zero_state(batch, dtype) if cell_output is None else cell_state
        finished = gc.greater_equal(time, lengths)
        return finished, read(time, finished), state, None, loop_state
    with gc.variable_scope("raw", initializer=gc.random_uniform_initializer(-0.5, 0.5, seed=3)):
        emit_ta, final_state, _ = gc.nn.raw_rnn(cell, loop_fn)
    outputs = emit_ta.stack()
    r = gc.constant(_output_weights(batch, units).astype(dtype))
    weighed = outputs * r if broadcast_weights else gc.reduce_sum(outputs, axis=0) * r
    loss = gc.reduce_sum(weighed) + gc.reduce_sum(outputs * outputs) + \
        gc.reduce_sum(final_state.c * final_state.h)
    return x, lengths, cell, loss, final_state.h


def _output_weights(batch, units):
    """What raw_lstm's loss weighs the sum of each example's outputs by."""
    return np.linspace(-1.0, 1.0, batch * units).reshape(batch, units)


def raw_lstm_weights(cell):
    """raw_lstm's cell weights as initialized: {"kernel", "bias"}."""
    from tests.test_dynamic_rnn import weights
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        return weights(sess, cell, "raw/rnn/basic_lstm_cell/")


def np_raw_lstm(w, xv, lv):
    """(loss, final h) of raw_lstm in NumPy, in float64 whatever the dtype of the
    arguments (the reference a float32 run is held to); w: the cell's {"kernel", "bias"}."""
    from tests.test_dynamic_rnn import np_dynamic_lstm
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    xv = np.asarray(xv, np.float64)
    batch, units = xv.shape[1], w["bias"].shape[0] // 4
    zeros = np.zeros((batch, units), xv.dtype)
    outs, c, h = np_dynamic_lstm(w, xv.transpose(1, 0, 2), np.array(lv), zeros, zeros)
    outs = outs[:, :int(max(lv))]
    loss = (outs.sum(1) * _output_weights(batch, units)).sum() + (outs * outs).sum() + \
        (c * h).sum()
    return loss, h


def np_raw_lstm_gradients(xv, w, lv, eps=1e-6):
    """Central differences of np_raw_lstm's loss with respect to the inputs, the kernel
    and the bias (float64)."""
    arrays = [np.asarray(a, np.float64) for a in (xv, w["kernel"], w["bias"])]
    numeric = [np.zeros_like(a) for a in arrays]
    for k, array in enumerate(arrays):
        for idx in np.ndindex(array.shape):
            args = [a.copy() for a in arrays]
            args[k][idx] += eps
            up = np_raw_lstm({"kernel": args[1], "bias": args[2]}, args[0], lv)[0]
            args[k][idx] -= 2 * eps
            down = np_raw_lstm({"kernel": args[1], "bias": args[2]}, args[0], lv)[0]
            numeric[k][idx] = (up - down) / (2 * eps)
    return numeric


def assert_raw_lstm_losses(runs, feed_list, x, lengths, w, tolerance):
    """Each run's first fetch, raw_lstm's loss, against np_raw_lstm on its feed."""
    for feed, run in zip(feed_list, runs):
        want, _ = np_raw_lstm(w, feed[x], feed[lengths])
        np.testing.assert_allclose(run[0], want, **tolerance)
