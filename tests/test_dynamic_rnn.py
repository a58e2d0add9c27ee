"""dynamic_rnn, bidirectional_dynamic_rnn and raw_rnn (one while_loop over time) against
NumPy loops written here, for a number of steps known only at run time; gradients against
central differences and against static_rnn; contrib.seq2seq.sequence_loss."""
import numpy as np
import pytest

import graphc as gc
from graphc.ops import rnn
from tests.gradcheck import check_gradients

rnn_cell = gc.nn.rnn_cell


# The unrolled path is static_rnn's graph, which test_rnn.py runs on the emulated GPU; here
# it added ~2 minutes of PTX and emulation to the suite for nothing new.
NOT_ON = [{"rnn_path": "unrolled", "backend": "gpu_emulated"}]


@pytest.fixture(autouse=True, params=["loop", "unrolled"])
def rnn_path(request, monkeypatch):
    """Every case on both of dynamic_rnn's paths: the while_loop, and the unrolled steps a
    short length known when the graph is built takes (rnn.UNROLL_MAX_STEPS)."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0 if request.param == "loop" else 64)
    return request.param


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_lstm_step(w, x, c, h):
    z = np.concatenate([x, h], 1) @ w["kernel"] + w["bias"]
    i, j, f, o = np.split(z, 4, axis=1)
    new_c = c * sigmoid(f + 1.0) + sigmoid(i) * np.tanh(j)
    return new_c, np.tanh(new_c) * sigmoid(o)


def np_gru_step(w, x, h):
    gates = sigmoid(np.concatenate([x, h], 1) @ w["gates/kernel"] + w["gates/bias"])
    r, u = np.split(gates, 2, axis=1)
    cand = np.tanh(np.concatenate([x, r * h], 1) @ w["candidate/kernel"] + w["candidate/bias"])
    return u * h + (1 - u) * cand


def np_dynamic_lstm(w, xs, lengths, c, h):
    """xs [batch, time, depth]: TF1's masking: zero outputs and a frozen state past each
    example's length."""
    outs = np.zeros(xs.shape[:2] + (h.shape[1],), xs.dtype)
    for t in range(xs.shape[1]):
        nc, nh = np_lstm_step(w, xs[:, t], c, h)
        live = (t < lengths)[:, None]
        c, h = np.where(live, nc, c), np.where(live, nh, h)
        outs[:, t] = np.where(live, nh, 0)
    return outs, c, h


def weights(sess, cell, prefix):
    return {v.op.name[len(prefix):]: sess.run(v) for v in cell.variables}


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("steps", [0, 1, 7])
def test_dynamic_rnn_lstm_unknown_steps_with_lengths(dtype, steps):
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [None, None, 3])      # batch and time unknown
    lengths = gc.placeholder(gc.int32, [None])
    cell = rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    assert [v.op.name for v in cell.variables] == ["rnn/basic_lstm_cell/kernel",
                                                    "rnn/basic_lstm_cell/bias"]
    assert out.shape.as_list() == [None, None, 4]
    xv = rng.standard_normal((3, steps, 3)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = weights(sess, cell, "rnn/basic_lstm_cell/")
        got_out, got_state = sess.run([out, state], {x: xv, lengths: lv})
    zeros = np.zeros((3, 4), dtype)
    want_out, want_c, want_h = np_dynamic_lstm(w, xv, lv, zeros, zeros)
    assert got_out.shape == (3, steps, 4)
    np.testing.assert_allclose(got_out, want_out, **tol(dtype))
    np.testing.assert_allclose(got_state.c, want_c, **tol(dtype))
    np.testing.assert_allclose(got_state.h, want_h, **tol(dtype))


def test_dynamic_rnn_time_major_initial_state_gru():
    rng = np.random.default_rng(3)
    x = gc.placeholder(gc.float64, [None, 2, 3])     # [time, batch, depth]
    h0 = gc.placeholder(gc.float64, [2, 5])
    cell = rnn_cell.GRUCell(5)
    out, state = gc.nn.dynamic_rnn(cell, x, initial_state=h0, time_major=True)
    xv, hv = rng.standard_normal((6, 2, 3)), rng.standard_normal((2, 5))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = weights(sess, cell, "rnn/gru_cell/")
        got_out, got_state = sess.run([out, state], {x: xv, h0: hv})
    h, outs = hv, []
    for t in range(6):
        h = np_gru_step(w, xv[t], h)
        outs.append(h)
    np.testing.assert_allclose(got_out, np.stack(outs), rtol=1e-11)
    np.testing.assert_allclose(got_state, h, rtol=1e-11)


def test_dynamic_rnn_multi_cell_matches_static_rnn():
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((2, 5, 3))
    init = gc.constant_initializer(0.3)

    def cells():
        return rnn_cell.MultiRNNCell([rnn_cell.BasicLSTMCell(4), rnn_cell.GRUCell(3)])
    x = gc.placeholder(gc.float64, [None, 5, 3])
    with gc.variable_scope("d", initializer=init):
        d_out, d_state = gc.nn.dynamic_rnn(cells(), x, sequence_length=[5, 2], dtype=gc.float64)
    with gc.variable_scope("s", initializer=init):
        s_out, s_state = gc.nn.static_rnn(cells(), gc.unstack(x, axis=1), dtype=gc.float64,
                                          sequence_length=[5, 2])
    d_loss = gc.reduce_sum(d_out * d_out) + gc.reduce_sum(d_state[0].c)
    s_loss = gc.reduce_sum(gc.stack(s_out, 1) ** 2) + gc.reduce_sum(s_state[0].c)
    d_vars = [v for v in gc.trainable_variables() if v.op.name.startswith("d/")]
    s_vars = [v for v in gc.trainable_variables() if v.op.name.startswith("s/")]
    assert [v.op.name[2:] for v in d_vars] == [v.op.name[2:] for v in s_vars]
    d_grads = gc.gradients(d_loss, d_vars + [x])
    s_grads = gc.gradients(s_loss, s_vars + [x])
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        a, b = sess.run([d_grads, s_grads], {x: xv})
        np.testing.assert_allclose(sess.run(d_out, {x: xv}),
                                   np.stack(sess.run(s_out, {x: xv}), 1), rtol=1e-12)
    for ga, gb in zip(a, b):
        np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-12)


class ConstantWeightsCell(rnn_cell.RNNCell):
    """h' = tanh(x Wx + h Wh), weights fixed (gradcheck feeds no variables)."""

    state_size = output_size = 2

    def call(self, inputs, state):
        wx = gc.constant([[0.5, -0.3], [0.2, 0.8]], gc.float64)
        wh = gc.constant([[0.9, 0.1], [-0.4, 0.6]], gc.float64)
        h = gc.tanh(gc.matmul(inputs, wx) + gc.matmul(state, wh))
        return h, h


@pytest.mark.parametrize("lengths", [None, [3, 1]])
def test_dynamic_rnn_gradients_finite_differences(lengths):
    def fn(x, h0):
        out, state = gc.nn.dynamic_rnn(ConstantWeightsCell(), x, initial_state=h0,
                                       sequence_length=lengths)
        return gc.concat([gc.reshape(out, [-1]), gc.reshape(state, [-1])], 0)
    rng = np.random.default_rng(7)
    check_gradients(fn, [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2))])


def test_bidirectional_dynamic_rnn_matches_static():
    rng = np.random.default_rng(8)
    xv = rng.standard_normal((3, 4, 2))
    init = gc.constant_initializer(rng.standard_normal((6, 16)) * 0.5)
    x = gc.placeholder(gc.float64, [None, None, 2])
    with gc.variable_scope("d", initializer=init):
        (fw, bw), (sfw, sbw) = gc.nn.bidirectional_dynamic_rnn(
            rnn_cell.BasicLSTMCell(4), rnn_cell.BasicLSTMCell(4), x,
            sequence_length=[4, 2, 3], dtype=gc.float64)
    xs = gc.placeholder(gc.float64, [None, 4, 2])
    with gc.variable_scope("s", initializer=init):
        s_out, s_fw, s_bw = gc.nn.static_bidirectional_rnn(
            rnn_cell.BasicLSTMCell(4), rnn_cell.BasicLSTMCell(4), gc.unstack(xs, axis=1),
            sequence_length=[4, 2, 3], dtype=gc.float64)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run([fw, bw, sfw, sbw], {x: xv})
        want = sess.run([s_out, s_fw, s_bw], {xs: xv})
    np.testing.assert_allclose(np.concatenate(got[:2], 2), np.stack(want[0], 1), rtol=1e-12)
    np.testing.assert_allclose(got[2], want[1], rtol=1e-12)
    np.testing.assert_allclose(got[3], want[2], rtol=1e-12)


def test_raw_rnn_matches_dynamic_rnn():
    rng = np.random.default_rng(9)
    xv = rng.standard_normal((5, 2, 3))   # [time, batch, depth]
    lv = np.array([5, 3], np.int32)
    x = gc.constant(xv)
    lengths = gc.constant(lv)
    inputs_ta = gc.TensorArray(gc.float64, size=5).unstack(x)
    cell = rnn_cell.BasicLSTMCell(4)

    def loop_fn(time, cell_output, cell_state, loop_state):
        state = cell.zero_state(2, gc.float64) if cell_output is None else cell_state
        finished = gc.greater_equal(time, lengths)
        next_input = gc.cond(gc.reduce_all(finished), lambda: gc.zeros([2, 3], gc.float64),
                             lambda: inputs_ta.read(time))
        return finished, next_input, state, None, loop_state
    with gc.variable_scope("init", initializer=gc.constant_initializer(0.2)):
        emit_ta, final_state, _ = gc.nn.raw_rnn(cell, loop_fn)
    outputs = emit_ta.stack()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = weights(sess, cell, "init/rnn/basic_lstm_cell/")
        got_out, got_state = sess.run([outputs, final_state])
    zeros = np.zeros((2, 4))
    want_out, want_c, want_h = np_dynamic_lstm(w, xv.transpose(1, 0, 2), lv, zeros, zeros)
    np.testing.assert_allclose(got_out, want_out.transpose(1, 0, 2), rtol=1e-12)
    np.testing.assert_allclose(got_state.c, want_c, rtol=1e-12)
    np.testing.assert_allclose(got_state.h, want_h, rtol=1e-12)


@pytest.mark.parametrize("flags", [dict(), dict(average_across_timesteps=False),
                                   dict(average_across_batch=False),
                                   dict(average_across_timesteps=False,
                                        average_across_batch=False),
                                   dict(average_across_timesteps=False,
                                        average_across_batch=False, sum_over_timesteps=True,
                                        sum_over_batch=True),
                                   dict(average_across_timesteps=False, sum_over_timesteps=True)])
def test_sequence_loss(flags):
    rng = np.random.default_rng(10)
    logits = rng.standard_normal((2, 3, 5))
    targets = rng.integers(0, 5, (2, 3))
    w = np.array([[1.0, 1.0, 0.0], [1.0, 0.5, 0.0]])
    loss = gc.contrib.seq2seq.sequence_loss(gc.constant(logits), gc.constant(targets),
                                            gc.constant(w), **flags)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0] * w
    avg_t, avg_b = flags.get("average_across_timesteps", True), flags.get(
        "average_across_batch", True)
    sum_t, sum_b = flags.get("sum_over_timesteps", False), flags.get("sum_over_batch", False)
    def div_no_nan(a, b):  # TF's: 0 where the count or weight sum is 0
        return np.where(b == 0, 0.0, a / np.where(b == 0, 1, b))
    if avg_t and avg_b:
        want = ce.sum() / w.sum()
    elif sum_t and sum_b:
        want = ce.sum() / np.count_nonzero(w)
    elif avg_t or avg_b:
        axis = 0 if avg_b else 1
        want = div_no_nan(ce.sum(axis), w.sum(axis))
    elif sum_t or sum_b:
        axis = 0 if sum_b else 1
        want = div_no_nan(ce.sum(axis), np.count_nonzero(w, axis))
    else:
        want = ce
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(loss), want, rtol=1e-12)
    with pytest.raises(ValueError, match="cannot be set to True at same time"):
        gc.contrib.seq2seq.sequence_loss(gc.constant(logits), gc.constant(targets),
                                         gc.constant(w), sum_over_timesteps=True)


def test_dynamic_rnn_trains_on_variable_length_sequences():
    """A sequence classifier (is the sum of the valid steps positive?) learns."""
    rng = np.random.default_rng(11)
    xv = rng.standard_normal((32, 6, 1)).astype(np.float32)
    lv = rng.integers(1, 7, 32).astype(np.int32)
    mask = np.arange(6)[None, :] < lv[:, None]
    yv = ((xv[..., 0] * mask).sum(1) > 0).astype(np.int32)
    x = gc.placeholder(gc.float32, [None, None, 1])
    lengths = gc.placeholder(gc.int32, [None])
    y = gc.placeholder(gc.int32, [None])
    with gc.variable_scope("clf", initializer=gc.glorot_uniform_initializer(seed=1)):
        _, state = gc.nn.dynamic_rnn(rnn_cell.GRUCell(8), x, sequence_length=lengths,
                                     dtype=gc.float32)
        logits = gc.layers.dense(state, 2)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train = gc.train.AdamOptimizer(0.05).minimize(loss)
    feed = {x: xv, lengths: lv, y: yv}
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(loss, feed)
        for _ in range(60):
            sess.run(train, feed)
        last = sess.run(loss, feed)
    assert last < 0.5 * first


def test_tutorial_last_output_over_unknown_steps_trains():
    """The TF1 tutorial pattern that failed with "bad operand type for abs(): 'SymDim'":
    inputs of unknown batch and time, outputs[:, -1, :] into a dense layer, Adam."""
    x = gc.placeholder(gc.float32, [None, None, 4])
    y = gc.placeholder(gc.int32, [None])
    outputs, state = gc.nn.dynamic_rnn(rnn_cell.BasicLSTMCell(6), x, dtype=gc.float32)
    last = outputs[:, -1, :]
    logits = gc.layers.dense(last, 3)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train = gc.train.AdamOptimizer(0.01).minimize(loss)
    rng = np.random.default_rng(12)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for steps in (5, 9, 1):
            feed = {x: rng.standard_normal((4, steps, 4)).astype(np.float32),
                    y: rng.integers(0, 3, 4)}
            got_last, got_h, got_loss, _ = sess.run([last, state.h, loss, train], feed)
            np.testing.assert_array_equal(got_last, got_h)   # no sequence_length: the end
            assert np.isfinite(got_loss)


@pytest.mark.parametrize("make", [
    lambda: rnn_cell.LSTMCell(4, use_peepholes=True, cell_clip=0.8, num_proj=3),
    lambda: rnn_cell.BasicRNNCell(3),
    lambda: rnn_cell.MultiRNNCell([rnn_cell.GRUCell(3),
                                   rnn_cell.BasicLSTMCell(2, state_is_tuple=False)])])
def test_dynamic_rnn_cells_match_static_rnn_with_gradients(make):
    rng = np.random.default_rng(13)
    xv = rng.standard_normal((2, 4, 3))
    x = gc.placeholder(gc.float64, [None, 4, 3])
    init = gc.random_uniform_initializer(-0.5, 0.5, seed=3)
    with gc.variable_scope("d", initializer=init):
        d_out, _ = gc.nn.dynamic_rnn(make(), x, sequence_length=[4, 3], dtype=gc.float64)
    with gc.variable_scope("s", initializer=init):
        s_out, _ = gc.nn.static_rnn(make(), gc.unstack(x, axis=1), sequence_length=[4, 3],
                                    dtype=gc.float64)
        s_out = gc.stack(s_out, 1)
    d_vars = [v for v in gc.trainable_variables() if v.op.name.startswith("d/")]
    s_vars = [v for v in gc.trainable_variables() if v.op.name.startswith("s/")]
    d_grads = gc.gradients(gc.reduce_sum(gc.sin(d_out)), d_vars + [x])
    s_grads = gc.gradients(gc.reduce_sum(gc.sin(s_out)), s_vars + [x])
    copies = [gc.assign(d, s) for d, s in zip(d_vars, s_vars)]   # the same weights in both
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(copies)
        a, b = sess.run([[d_out] + d_grads, [s_out] + s_grads], {x: xv})
    for ga, gb in zip(a, b):
        np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-12)


def test_minimize_and_a_second_gradient_through_one_dynamic_rnn():
    """optimizer.minimize(loss) and then tf.gradients of another quantity (a summary's
    gradient norm, say) through the same loop: each its own backward loop on the forward
    loop's stacks; both checked against central differences in float64."""
    rng = np.random.default_rng(5)
    x = gc.placeholder(gc.float64, [2, 4, 3])
    with gc.variable_scope("twice", initializer=gc.glorot_uniform_initializer(seed=2)):
        out, state = gc.nn.dynamic_rnn(rnn_cell.LSTMCell(3), x, sequence_length=[4, 2],
                                       dtype=gc.float64)
    loss = gc.reduce_sum(gc.sin(out)) + gc.reduce_sum(state.h * state.h)
    lr = 0.1
    train = gc.train.GradientDescentOptimizer(lr).minimize(loss)
    other = gc.reduce_sum(out * out)
    gx = gc.gradients(other, x)[0]
    variables = gc.trainable_variables()
    directions = [rng.standard_normal(v.shape.as_list()) for v in variables]
    eps = gc.placeholder(gc.float64, [])
    base = [gc.Variable(v.initialized_value(), trainable=False) for v in variables]
    moved = gc.group(*[v.assign(b + eps * d) for v, b, d in zip(variables, base, directions)])
    xv = rng.standard_normal((2, 4, 3))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        loss_at = {}
        for e in (1e-6, -1e-6, 0.0):
            sess.run(moved, {eps: e})
            loss_at[e] = sess.run(loss, {x: xv})
        got_gx = sess.run(gx, {x: xv})
        want_gx = np.zeros_like(xv)
        for i in range(xv.size):
            step = np.zeros_like(xv)
            step.flat[i] = 1e-6
            want_gx.flat[i] = (sess.run(other, {x: xv + step}) -
                               sess.run(other, {x: xv - step})) / 2e-6
        before = sess.run(variables)
        sess.run(train, {x: xv})
        after = sess.run(variables)
    # the step minimize took, projected on the directions, is -lr times loss's slope there
    slope = (loss_at[1e-6] - loss_at[-1e-6]) / 2e-6
    taken = sum(np.sum((a - b) * d) for a, b, d in zip(after, before, directions))
    np.testing.assert_allclose(taken, -lr * slope, rtol=1e-6)
    np.testing.assert_allclose(got_gx, want_gx, rtol=1e-6, atol=1e-8)
    assert np.all(got_gx[1, 2:] == 0)  # steps past a sequence's length get no gradient
