"""Fed integers that a loop body reads: as data (dynamic_rnn's sequence_length masks the
state) they must not specialize the compiled code on their values, or every batch would
compile again; as a shape (a reshape in the body) they must, since the code needs it as
a constant (graphc/compiler/lower.py, `_captured_constant`)."""
import numpy as np
import pytest

import graphc as gc
from graphc.ops import rnn
from tests.test_dynamic_rnn import np_dynamic_lstm

FLOATS = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_new_sequence_lengths_reuse_the_compiled_step(native, monkeypatch, dtype):
    """Batches of other lengths, other time steps and another batch size run the code the
    first batch compiled (a length vector of at most 64 numbers looked like a shape value:
    the loop compiled again for each batch), with TF1's masking past each length."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 64)  # time unknown: never unrolled
    x = gc.placeholder(dtype, [None, None, 3])
    lengths = gc.placeholder(gc.int32, [None])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    loss = gc.reduce_sum(out) + gc.reduce_sum(state.c)
    grad_x, = gc.gradients(loss, [x])
    rng = np.random.default_rng(0)
    batches = [(4, 5, [5, 2, 0, 3]), (4, 5, [1, 5, 4, 4]), (4, 7, [7, 1, 6, 2]),
               (3, 1, [1, 0, 1]), (4, 0, [0, 0, 0, 0])]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {v.op.name[len("rnn/basic_lstm_cell/"):]: sess.run(v) for v in cell.variables}
        compiles = []
        for batch, steps, lv in batches:
            xv = rng.standard_normal((batch, steps, 3)).astype(dtype)
            lv = np.array(lv, np.int32)
            before = sess.compile_count
            got_out, got_c, got_dx = sess.run([out, state.c, grad_x], {x: xv, lengths: lv})
            compiles.append(sess.compile_count - before)
            zeros = np.zeros((batch, 4), dtype)
            want_out, want_c, _ = np_dynamic_lstm(w, xv, lv, zeros, zeros)
            np.testing.assert_allclose(got_out, want_out, **tol(dtype))
            np.testing.assert_allclose(got_c, want_c, **tol(dtype))
            # masking: the input past a sequence's length has no effect on the loss
            for row, n in enumerate(lv):
                assert not got_dx[row, n:].any()
    # new lengths, more steps: no compile (the batches of one and no step may take one
    # each: sizes 0 and 1 can be specialized, as for any feed)
    assert compiles[:3] == [1, 0, 0] and sum(compiles) <= 3


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_fed_shape_read_in_a_body_specializes_the_code(native, dtype):
    """A body reshaping by a fed shape compiles natively, on the fed value: another value
    compiles another variant, the same value runs the first again."""
    v0 = gc.placeholder(dtype, [None])
    shape = gc.placeholder(gc.int32, [2])
    n = gc.placeholder(gc.int32, [])

    def body(i, v):
        m = gc.reshape(v, shape)  # rows x cols
        return i + 1, gc.reshape(m * 0.5 + gc.reduce_sum(m, axis=1, keepdims=True), [-1])

    _, v = gc.while_loop(lambda i, v: i < n, body, [gc.constant(0), v0])
    values = np.arange(6, dtype=dtype) / 5

    def want(rows, cols, trips):
        m = values.reshape(rows, cols)
        for _ in range(trips):
            m = m * 0.5 + m.sum(axis=1, keepdims=True)
        return m.reshape(-1)

    with gc.Session() as sess:
        compiles = []
        for rows, cols in [(2, 3), (3, 2), (2, 3)]:
            before = sess.compile_count
            got = sess.run(v, {v0: values, shape: [rows, cols], n: 3})
            compiles.append(sess.compile_count - before)
            np.testing.assert_allclose(got, want(rows, cols, 3), **tol(dtype))
    assert compiles == [1, 1, 0]

