"""RNN cells, static_rnn, static_bidirectional_rnn against NumPy written here, with the
weights read back from the session; TF1's variable names; gradients through unrolled
cells; a tiny training run."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients

rnn_cell = gc.nn.rnn_cell


# ----------------------------------------------------------------------------- NumPy cells
def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_basic_rnn(w, x, h):
    out = np.tanh(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"])
    return out, out


def np_basic_lstm(w, x, state, forget_bias=1.0):
    c, h = state
    z = np.concatenate([x, h], 1) @ w["kernel"] + w["bias"]
    i, j, f, o = np.split(z, 4, axis=1)
    new_c = c * sigmoid(f + forget_bias) + sigmoid(i) * np.tanh(j)
    new_h = np.tanh(new_c) * sigmoid(o)
    return new_h, (new_c, new_h)


def np_lstm(w, x, state, peepholes=False, cell_clip=None, num_proj=None, forget_bias=1.0):
    c, m = state
    z = np.concatenate([x, m], 1) @ w["kernel"] + w["bias"]
    i, j, f, o = np.split(z, 4, axis=1)
    if peepholes:
        f = f + w["w_f_diag"] * c
        i = i + w["w_i_diag"] * c
    new_c = sigmoid(f + forget_bias) * c + sigmoid(i) * np.tanh(j)
    if cell_clip is not None:
        new_c = np.clip(new_c, -cell_clip, cell_clip)
    if peepholes:
        o = o + w["w_o_diag"] * new_c
    new_m = sigmoid(o) * np.tanh(new_c)
    if num_proj is not None:
        new_m = new_m @ w["projection/kernel"]
    return new_m, (new_c, new_m)


def np_gru(w, x, h):
    gates = sigmoid(np.concatenate([x, h], 1) @ w["gates/kernel"] + w["gates/bias"])
    r, u = np.split(gates, 2, axis=1)
    cand = np.tanh(np.concatenate([x, r * h], 1) @ w["candidate/kernel"] + w["candidate/bias"])
    new_h = u * h + (1 - u) * cand
    return new_h, new_h


def cell_weights(sess, cell, prefix):
    """{local name: value} of a cell's variables, names relative to `prefix`."""
    return {v.op.name[len(prefix):]: sess.run(v) for v in cell.variables}


def random_state(rng, size, batch):
    if isinstance(size, tuple):
        return tuple(random_state(rng, s, batch) for s in size)
    return rng.standard_normal((batch, size))


def state_placeholders(size, batch, dtype):
    if isinstance(size, tuple):
        ph = [state_placeholders(s, batch, dtype) for s in size]
        return type(size)(*ph) if hasattr(size, "_fields") else tuple(ph)
    return gc.placeholder(dtype, [batch, size])


def flat(x):
    return [y for part in x for y in flat(part)] if isinstance(x, tuple) else [x]


# (name, make cell, numpy step, variable local names)
CELLS = [
    ("basic_rnn", lambda: rnn_cell.BasicRNNCell(5), np_basic_rnn, ["kernel", "bias"]),
    ("basic_lstm", lambda: rnn_cell.BasicLSTMCell(5), np_basic_lstm, ["kernel", "bias"]),
    ("basic_lstm_fb", lambda: rnn_cell.BasicLSTMCell(5, forget_bias=0.3),
     lambda w, x, s: np_basic_lstm(w, x, s, forget_bias=0.3), ["kernel", "bias"]),
    ("lstm", lambda: rnn_cell.LSTMCell(5), np_lstm, ["kernel", "bias"]),
    ("lstm_peep_clip_proj",
     lambda: rnn_cell.LSTMCell(5, use_peepholes=True, cell_clip=0.5, num_proj=3),
     lambda w, x, s: np_lstm(w, x, s, True, 0.5, 3),
     ["kernel", "bias", "w_f_diag", "w_i_diag", "w_o_diag", "projection/kernel"]),
    ("gru", lambda: rnn_cell.GRUCell(5), np_gru,
     ["gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"]),
]
SCOPES = {"basic_rnn": "basic_rnn_cell", "basic_lstm": "basic_lstm_cell",
          "basic_lstm_fb": "basic_lstm_cell", "lstm": "lstm_cell",
          "lstm_peep_clip_proj": "lstm_cell", "gru": "gru_cell"}


def random_biases(sess, cell, rng):
    """Non-zero biases (they start at 0 or 1), so that the test sees where they go."""
    for v in cell.variables:
        if v.shape.ndims == 1:
            v.load(rng.standard_normal(v.shape.as_list()), sess)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name,make,np_step,var_names", CELLS, ids=[c[0] for c in CELLS])
def test_cell_step_matches_numpy(name, make, np_step, var_names, batch):
    rng = np.random.default_rng(0)
    cell = make()
    x = gc.placeholder(gc.float64, [None, 7])
    state = state_placeholders(cell.state_size, None, gc.float64)
    out, new_state = cell(x, state)
    assert out.shape.as_list() == [None, cell.output_size]
    assert sorted(v.op.name for v in cell.variables) == sorted(
        f"{SCOPES[name]}/{n}" for n in var_names)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        random_biases(sess, cell, rng)
        w = cell_weights(sess, cell, SCOPES[name] + "/")
        xv = rng.standard_normal((batch, 7))
        sv = random_state(rng, cell.state_size, batch)
        feed = {x: xv, **dict(zip(flat(state), flat(sv)))}
        got_out, got_state = sess.run([out, new_state], feed)
    want_out, want_state = np_step(w, xv, sv)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-10, atol=1e-12)
    for g, e in zip(flat(tuple(got_state) if isinstance(got_state, tuple) else got_state),
                    flat(want_state)):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_lstm_cell_state_shapes_and_zero_state():
    cell = rnn_cell.LSTMCell(4, num_proj=2)
    assert cell.state_size == rnn_cell.LSTMStateTuple(4, 2) and cell.output_size == 2
    z = cell.zero_state(3, gc.float32)
    assert isinstance(z, rnn_cell.LSTMStateTuple)
    assert z.c.shape.as_list() == [3, 4] and z.h.shape.as_list() == [3, 2]
    batch = gc.placeholder(gc.int32, [])
    zd = rnn_cell.GRUCell(6).zero_state(batch, gc.float64)
    assert zd.shape.as_list() == [None, 6] and zd.dtype == gc.float64
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(zd, {batch: 5}), np.zeros((5, 6)))


def test_basic_lstm_state_not_tuple_matches_tuple():
    rng = np.random.default_rng(1)
    x = gc.constant(rng.standard_normal((2, 3)))
    c, h = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    init = gc.constant_initializer(rng.standard_normal((7, 16)))
    with gc.variable_scope("a", initializer=init):
        out_t, st_t = rnn_cell.BasicLSTMCell(4)(x, rnn_cell.LSTMStateTuple(
            gc.constant(c), gc.constant(h)))
    with gc.variable_scope("b", initializer=init):
        cell = rnn_cell.BasicLSTMCell(4, state_is_tuple=False)
        assert cell.state_size == 8
        out_c, st_c = cell(x, gc.constant(np.concatenate([c, h], 1)))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        a, b, sa, sb = sess.run([out_t, out_c, st_t, st_c])
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(np.concatenate(sa, 1), sb)


# ----------------------------------------------------------------------------- static_rnn
def np_unroll(np_step, w, xs, state, lengths=None):
    outs = []
    for t, x in enumerate(xs):
        out, new = np_step(w, x, state)
        if lengths is not None:
            done = (t >= np.asarray(lengths))[:, None]
            out = np.where(done, 0.0, out)
            new = tuple(np.where(done, s, n) for s, n in zip(flat(state), flat(new)))
            new = new if isinstance(state, tuple) else new[0]
        outs.append(out)
        state = new
    return outs, state


@pytest.mark.parametrize("lengths", [None, [4, 0, 2], [5, 5, 5]])
def test_static_rnn_lstm_with_sequence_length(lengths):
    rng = np.random.default_rng(2)
    steps, batch = 5, 3
    xs_v = [rng.standard_normal((batch, 2)) for _ in range(steps)]
    xs = [gc.placeholder(gc.float64, [None, 2]) for _ in range(steps)]
    cell = rnn_cell.BasicLSTMCell(3)
    seq = None if lengths is None else gc.placeholder(gc.int32, [None])
    outs, state = gc.nn.static_rnn(cell, xs, dtype=gc.float64, sequence_length=seq)
    assert len(outs) == steps and isinstance(state, rnn_cell.LSTMStateTuple)
    assert [v.op.name for v in gc.global_variables()] == ["rnn/basic_lstm_cell/kernel",
                                                          "rnn/basic_lstm_cell/bias"]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        random_biases(sess, cell, rng)
        w = cell_weights(sess, cell, "rnn/basic_lstm_cell/")
        feed = dict(zip(xs, xs_v))
        if seq is not None:
            feed[seq] = lengths
        got_outs, got_state = sess.run([outs, state], feed)
    zero = (np.zeros((batch, 3)), np.zeros((batch, 3)))
    want_outs, want_state = np_unroll(np_basic_lstm, w, xs_v, zero, lengths)
    for g, e in zip(got_outs, want_outs):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    for g, e in zip(got_state, want_state):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_static_rnn_initial_state_and_scope():
    rng = np.random.default_rng(3)
    xs_v = [rng.standard_normal((2, 3)) for _ in range(3)]
    h0 = rng.standard_normal((2, 4))
    cell = rnn_cell.GRUCell(4)
    outs, state = gc.nn.static_rnn(cell, [gc.constant(x) for x in xs_v],
                                   initial_state=gc.constant(h0), scope="enc")
    assert sorted(v.op.name for v in gc.global_variables()) == [
        "enc/gru_cell/candidate/bias", "enc/gru_cell/candidate/kernel",
        "enc/gru_cell/gates/bias", "enc/gru_cell/gates/kernel"]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = cell_weights(sess, cell, "enc/gru_cell/")
        got_outs, got_state = sess.run([outs, state])
    want_outs, want_state = np_unroll(np_gru, w, xs_v, h0)
    np.testing.assert_allclose(got_state, want_state, rtol=1e-10)
    np.testing.assert_allclose(got_outs, want_outs, rtol=1e-10)
    np.testing.assert_allclose(got_outs[-1], got_state)


def test_static_rnn_errors():
    xs = [gc.placeholder(gc.float32, [None, 3]) for _ in range(2)]
    with pytest.raises(ValueError, match="dtype must be specified"):
        gc.nn.static_rnn(rnn_cell.BasicRNNCell(2), xs)
    with pytest.raises(ValueError, match="Input size"):
        gc.nn.static_rnn(rnn_cell.BasicRNNCell(2), [gc.placeholder(gc.float32, [2, None])],
                         dtype=gc.float32)
    with pytest.raises(TypeError):
        gc.nn.static_rnn(rnn_cell.BasicRNNCell(2), xs[0], dtype=gc.float32)
    with pytest.raises(ValueError, match="sequence_length must be a vector"):
        gc.nn.static_rnn(rnn_cell.BasicRNNCell(2), xs, dtype=gc.float32,
                         sequence_length=[[1, 2]])


def test_static_rnn_dynamic_batch_zero_state():
    xs = [gc.placeholder(gc.float32, [None, 3]) for _ in range(2)]
    outs, state = gc.nn.static_rnn(rnn_cell.BasicRNNCell(2), xs, dtype=gc.float32)
    assert outs[0].shape.as_list() == [None, 2]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        out = sess.run(outs[1], {x: np.ones((7, 3), np.float32) for x in xs})
    assert out.shape == (7, 2)


def test_dynamic_rnn_unrolled_matches_static_rnn():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((3, 4, 2))
    init = gc.constant_initializer(rng.standard_normal((5, 12)))
    x = gc.placeholder(gc.float64, [None, 4, 2])
    with gc.variable_scope("d", initializer=init):
        outs, state = gc.nn.dynamic_rnn(rnn_cell.BasicLSTMCell(3), x, dtype=gc.float64,
                                        sequence_length=[4, 1, 3])
    with gc.variable_scope("s", initializer=init):
        souts, sstate = gc.nn.static_rnn(rnn_cell.BasicLSTMCell(3), gc.unstack(x, axis=1),
                                         dtype=gc.float64, sequence_length=[4, 1, 3])
    assert outs.shape.as_list() == [None, 4, 3]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        a, b, sa, sb = sess.run([outs, souts, state, sstate], {x: xv})
    np.testing.assert_allclose(a, np.stack(b, 1))
    np.testing.assert_allclose(sa, sb)


# ----------------------------------------------------------------------------- bidirectional
def np_reverse(xs, lengths):
    out = [x.copy() for x in xs]
    for b, n in enumerate(lengths):
        for t in range(n):
            out[t][b] = xs[n - 1 - t][b]
    return out


@pytest.mark.parametrize("lengths", [None, [3, 1]])
def test_static_bidirectional_rnn(lengths):
    rng = np.random.default_rng(5)
    steps, batch = 3, 2
    xs_v = [rng.standard_normal((batch, 2)) for _ in range(steps)]
    xs = [gc.constant(x) for x in xs_v]
    fw, bw = rnn_cell.BasicLSTMCell(3), rnn_cell.GRUCell(2)
    outs, st_fw, st_bw = gc.nn.static_bidirectional_rnn(fw, bw, xs, dtype=gc.float64,
                                                        sequence_length=lengths)
    assert sorted(v.op.name for v in gc.global_variables()) == [
        "bidirectional_rnn/bw/gru_cell/candidate/bias",
        "bidirectional_rnn/bw/gru_cell/candidate/kernel",
        "bidirectional_rnn/bw/gru_cell/gates/bias", "bidirectional_rnn/bw/gru_cell/gates/kernel",
        "bidirectional_rnn/fw/basic_lstm_cell/bias",
        "bidirectional_rnn/fw/basic_lstm_cell/kernel"]
    assert outs[0].shape.as_list() == [batch, 5]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        wf = cell_weights(sess, fw, "bidirectional_rnn/fw/basic_lstm_cell/")
        wb = cell_weights(sess, bw, "bidirectional_rnn/bw/gru_cell/")
        got, got_fw, got_bw = sess.run([outs, st_fw, st_bw])
    lens = lengths or [steps] * batch
    zero = np.zeros((batch, 3))
    want_fw, want_st_fw = np_unroll(np_basic_lstm, wf, xs_v, (zero, zero), lengths)
    tmp, want_st_bw = np_unroll(np_gru, wb, np_reverse(xs_v, lens), np.zeros((batch, 2)),
                                lengths)
    want_bw = np_reverse(tmp, lens)
    for g, f, b in zip(got, want_fw, want_bw):
        np.testing.assert_allclose(g, np.concatenate([f, b], 1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_fw, want_st_fw, rtol=1e-10)
    np.testing.assert_allclose(got_bw, want_st_bw, rtol=1e-10)


# ----------------------------------------------------------------------------- MultiRNNCell
@pytest.mark.parametrize("state_is_tuple", [True, False])
def test_multi_rnn_cell(state_is_tuple):
    rng = np.random.default_rng(6)
    xs_v = [rng.standard_normal((2, 3)) for _ in range(3)]
    if state_is_tuple:
        cells = [rnn_cell.BasicLSTMCell(4), rnn_cell.GRUCell(2)]
    else:
        cells = [rnn_cell.BasicLSTMCell(4, state_is_tuple=False), rnn_cell.GRUCell(2)]
    cell = rnn_cell.MultiRNNCell(cells, state_is_tuple=state_is_tuple)
    assert cell.output_size == 2
    outs, state = gc.nn.static_rnn(cell, [gc.constant(x) for x in xs_v], dtype=gc.float64)
    assert sorted(v.op.name for v in gc.global_variables()) == [
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias",
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel",
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias",
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel",
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias",
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel"]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w0 = cell_weights(sess, cells[0], "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/")
        w1 = cell_weights(sess, cells[1], "rnn/multi_rnn_cell/cell_1/gru_cell/")
        got_outs, got_state = sess.run([outs, state])
    s0, s1 = (np.zeros((2, 4)), np.zeros((2, 4))), np.zeros((2, 2))
    for t, x in enumerate(xs_v):
        h, s0 = np_basic_lstm(w0, x, s0)
        out, s1 = np_gru(w1, h, s1)
        np.testing.assert_allclose(got_outs[t], out, rtol=1e-10)
    if state_is_tuple:
        np.testing.assert_allclose(got_state[0], s0, rtol=1e-10)
        np.testing.assert_allclose(got_state[1], s1, rtol=1e-10)
    else:
        np.testing.assert_allclose(got_state, np.concatenate(s0 + (s1,), 1), rtol=1e-10)


def test_two_cells_in_one_scope_get_unique_names_and_reuse():
    x = gc.placeholder(gc.float32, [None, 3])
    a, b = rnn_cell.BasicRNNCell(2), rnn_cell.BasicRNNCell(2)
    s = a.zero_state(1, gc.float32)
    a(x, s)
    b(x, s)
    a(x, s)  # reuses a's variables
    assert [v.op.name for v in gc.global_variables()] == [
        "basic_rnn_cell/kernel", "basic_rnn_cell/bias",
        "basic_rnn_cell_1/kernel", "basic_rnn_cell_1/bias"]
    named = rnn_cell.GRUCell(2, name="my_gru")
    named(x, s, scope="explicit")
    assert gc.global_variables()[-1].op.name == "explicit/candidate/bias"


def test_cell_needs_static_input_depth():
    with pytest.raises(ValueError, match="inputs.shape"):
        rnn_cell.BasicRNNCell(2)(gc.placeholder(gc.float32, [None, None]),
                                 gc.zeros([1, 2]))


def test_contrib_style_aliases():
    for name in ["RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell",
                 "MultiRNNCell", "DropoutWrapper", "ResidualWrapper", "LSTMStateTuple"]:
        assert hasattr(gc.nn.rnn_cell, name)
    import graphc.contrib.rnn as contrib_rnn
    assert contrib_rnn.BasicLSTMCell is rnn_cell.BasicLSTMCell
    assert contrib_rnn.static_rnn is gc.nn.static_rnn


# ----------------------------------------------------------------------------- wrappers
def test_dropout_and_residual_wrappers():
    x = gc.constant(np.ones((4, 6)))
    keep = gc.placeholder(gc.float64, [])
    inner = rnn_cell.BasicRNNCell(6)
    cell = rnn_cell.DropoutWrapper(inner, output_keep_prob=keep, seed=3)
    out, state = cell(x, cell.zero_state(4, gc.float64))
    res = rnn_cell.ResidualWrapper(rnn_cell.BasicRNNCell(6))
    rout, _ = res(x, res.zero_state(4, gc.float64))
    assert [v.op.name for v in cell.variables] == ["basic_rnn_cell/kernel",
                                                   "basic_rnn_cell/bias"]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        full, st = sess.run([out, state], {keep: 1.0})
        half = sess.run(out, {keep: 0.5})
        r, inner_out = sess.run([rout, res.cell(x, res.zero_state(4, gc.float64))[0]])
    np.testing.assert_allclose(full, st)
    kept = half != 0
    assert 0 < kept.sum() < half.size
    np.testing.assert_allclose(half[kept], 2 * full[kept])
    np.testing.assert_allclose(r, inner_out + 1.0)
    with pytest.raises(ValueError, match="keep_prob"):
        rnn_cell.DropoutWrapper(inner, input_keep_prob=0.0)


# ----------------------------------------------------------------------------- gradients
def fed_weights(cell, weights):
    """The cell with its variables replaced by the given tensors, in creation order, so
    that check_gradients can feed the weights like the inputs."""
    queue = list(weights)
    cell.add_variable = lambda name, shape, initializer=None, dtype=None: queue.pop(0)
    return cell


# (make cell, state width (an LSTM's c and h concatenated), weight shapes for depth 2)
GRAD_CELLS = [
    ("basic_lstm", lambda: rnn_cell.BasicLSTMCell(2), 4, [(4, 8), (8,)]),
    ("lstm_peepholes_proj", lambda: rnn_cell.LSTMCell(2, use_peepholes=True, num_proj=1), 3,
     [(3, 8), (8,), (2,), (2,), (2,), (2, 1)]),
    ("gru", lambda: rnn_cell.GRUCell(2), 2, [(4, 4), (4,), (4, 2), (2,)]),
    ("basic_rnn", lambda: rnn_cell.BasicRNNCell(2), 2, [(4, 2), (2,)]),
]


@pytest.mark.parametrize("name,make_cell,state_width,weight_shapes", GRAD_CELLS,
                         ids=[c[0] for c in GRAD_CELLS])
def test_gradients_through_unrolled_cell(name, make_cell, state_width, weight_shapes):
    """Inputs, initial state and weights, through 3 steps with sequence lengths [3, 1]."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 2, 2))
    h = rng.standard_normal((2, state_width))
    weights = [0.7 * rng.standard_normal(s) for s in weight_shapes]

    def fn(xp, hp, *wp):
        cell = fed_weights(make_cell(), wp)
        if isinstance(cell.state_size, tuple):
            c0, h0 = gc.split(hp, list(cell.state_size), axis=1)
            state = rnn_cell.LSTMStateTuple(c0, h0)
        else:
            state = hp
        outs, final = gc.nn.static_rnn(cell, gc.unstack(xp, num=3), initial_state=state,
                                       sequence_length=[3, 1])
        return gc.concat(outs + flat(tuple(final) if isinstance(final, tuple) else final), 1)
    check_gradients(fn, [x, h] + weights)


@pytest.mark.parametrize("make_cell", [lambda: rnn_cell.BasicLSTMCell(2),
                                       lambda: rnn_cell.GRUCell(2)],
                         ids=["lstm", "gru"])
def test_gradients_wrt_weights(make_cell):
    """d loss / d each variable against central differences, loading perturbed values."""
    rng = np.random.default_rng(8)
    x = gc.constant(rng.standard_normal((3, 2, 2)))
    cell = make_cell()
    with gc.variable_scope("g", initializer=gc.random_normal_initializer(seed=2)):
        outs, final = gc.nn.static_rnn(cell, gc.unstack(x), dtype=gc.float64,
                                       sequence_length=[3, 2])
    y = gc.concat(outs + flat(final), 1)
    loss = gc.reduce_sum(y * gc.constant(rng.standard_normal((2, 2 * 3 + len(flat(final)) * 2))))
    grads = gc.gradients(loss, cell.variables)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        random_biases(sess, cell, rng)
        analytic = sess.run(grads)
        for var, g in zip(cell.variables, analytic):
            value = sess.run(var)
            numeric = np.zeros_like(value)
            for j in range(value.size):
                for sign in (1, -1):
                    v = value.copy()
                    v.reshape(-1)[j] += sign * 1e-6
                    var.load(v, sess)
                    numeric.reshape(-1)[j] += sign * sess.run(loss) / 2e-6
            var.load(value, sess)
            np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-7, err_msg=var.op.name)


# ----------------------------------------------------------------------------- training
def test_tiny_lstm_training_reduces_loss():
    """Classify whether the sum of a short sequence is positive."""
    rng = np.random.default_rng(9)
    data = rng.standard_normal((64, 4, 1)).astype(np.float32)
    labels = (data.sum(axis=(1, 2)) > 0).astype(np.int32)
    gc.set_random_seed(0)
    x = gc.placeholder(gc.float32, [None, 4, 1])
    y = gc.placeholder(gc.int32, [None])
    outs, _ = gc.nn.static_rnn(rnn_cell.BasicLSTMCell(8), gc.unstack(x, axis=1),
                               dtype=gc.float32)
    logits = gc.layers.dense(outs[-1], 2)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train = gc.train.AdamOptimizer(0.05).minimize(loss)
    feed = {x: data, y: labels}
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(loss, feed)
        for _ in range(40):
            sess.run(train, feed)
        last = sess.run(loss, feed)
    assert last < 0.5 * first
