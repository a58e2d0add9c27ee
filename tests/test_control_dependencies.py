"""control_dependencies (TF1): every op created in a block gets the block's control inputs
(nested blocks accumulate, control_dependencies(None) clears), and a read of a variable
ordered after an assign (by a data or control edge) sees the assigned value. Run on every
backend (conftest.BOTH_BACKENDS); expected values are plain Python/NumPy arithmetic."""
import numpy as np
import pytest

import graphc as gc

FLOATS = [np.float32, np.float64]


def _session():
    sess = gc.Session()
    sess.run(gc.global_variables_initializer())
    return sess


# ------------------------------------------------------------------ graph structure
def test_every_op_in_the_block_gets_the_control_inputs():
    v = gc.Variable(0)
    a = gc.assign_add(v, 1)
    with gc.control_dependencies([a]):
        c = gc.constant(3)
        r = v.read_value()
        i = gc.identity(v)
        e = v * 2 + 1
    for t in (c, r, i.op.inputs[0]):  # identity(v) reads v in the block, then copies
        assert a.op in t.op.control_inputs, t.op
    # ops reading ops made in the block (the read, the constants) already wait for `a`
    assert i.op.control_inputs == [] and e.op.control_inputs == []


def test_an_op_reading_an_op_of_the_block_gets_no_control_inputs_of_that_block():
    # TF's rule (Graph._control_dependencies_for_inputs, its ops_test testBasic): the
    # input already runs after the block's control inputs. Without it every gradient op of
    # a minimize() under control_dependencies(UPDATE_OPS) waited for every update: a
    # ResNet-50 step had 378k control edges for the compiler to work through
    a, b = gc.constant(1.0), gc.constant(1.0)
    u = gc.no_op(name="u")
    with gc.control_dependencies([a]):
        c = gc.constant(1.0)
        d = gc.identity(b)
        e = gc.identity(c)
        with gc.control_dependencies([u]):
            f = gc.identity(c)  # dominated for the outer block only
            g = gc.identity(f)
        with gc.control_dependencies(None):
            h = gc.identity(c)
    assert c.op.control_inputs == [a.op] and d.op.control_inputs == [a.op]
    assert e.op.control_inputs == []
    assert f.op.control_inputs == [u] and g.op.control_inputs == []
    assert h.op.control_inputs == []


def test_nested_blocks_accumulate_and_none_clears():
    v = gc.Variable(0)
    a, b = gc.assign_add(v, 1), gc.assign_add(v, 10)
    with gc.control_dependencies([a]):
        outer = gc.constant(1)
        with gc.control_dependencies([b]):
            inner = gc.constant(2)
            with gc.control_dependencies(None):
                cleared = gc.constant(3)
                with gc.control_dependencies([a]):
                    after_clear = gc.constant(4)
        back = gc.constant(5)
    assert outer.op.control_inputs == [a.op]
    assert set(inner.op.control_inputs) == {a.op, b.op}
    assert cleared.op.control_inputs == []
    assert after_clear.op.control_inputs == [a.op]
    assert back.op.control_inputs == [a.op]


def test_variable_as_control_input_and_bad_control_input():
    v = gc.Variable(1)
    with gc.control_dependencies([v]):
        c = gc.constant(0)
    assert c.op.control_inputs == [v.op]
    with pytest.raises(TypeError, match="Control input"):
        with gc.control_dependencies([3]):
            pass


# ------------------------------------------------------------------- values
def test_identity_of_variable_sees_the_assign_int32():
    cnt = gc.Variable(0)
    with gc.control_dependencies([gc.assign_add(cnt, 100)]):
        after = gc.identity(cnt)
    with _session() as sess:
        assert [int(sess.run(after)) for _ in range(3)] == [100, 200, 300]
        assert sess.run(after).dtype == np.int32


@pytest.mark.parametrize("dtype", FLOATS)
def test_reads_identities_and_expressions_see_the_assigns(dtype):
    cnt = gc.Variable(0)
    f = gc.Variable(np.array([1.5, -2.0], dtype))
    with gc.control_dependencies([gc.assign_add(cnt, 100), gc.assign_add(f, [1.0, 0.5])]):
        after = gc.identity(cnt)
        r = f.read_value()
        i = gc.identity(f)
        e = cnt * 2 + 1
        ef = f * 3.0 - 1.0
    expect_f = np.array([1.5, -2.0], dtype)
    expect_cnt = 0
    with _session() as sess:
        for fetch in (after, r, i, e, ef, after, ef):
            got = sess.run(fetch)
            expect_cnt += 100
            expect_f = expect_f + np.array([1.0, 0.5], dtype)
            want = {after: np.int32(expect_cnt), r: expect_f, i: expect_f,
                    e: np.int32(expect_cnt * 2 + 1),
                    ef: expect_f * dtype(3.0) - dtype(1.0)}[fetch]
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_array_equal(got, want)


def test_constant_in_the_block_runs_the_assigns():
    cnt = gc.Variable(0)
    f = gc.Variable(1.5)
    with gc.control_dependencies([gc.assign_add(cnt, 100), gc.assign_add(f, 1.0)]):
        c = gc.constant(3)
    with _session() as sess:
        assert [int(sess.run(c)) for _ in range(2)] == [3, 3]
        assert int(sess.run(cnt)) == 200 and float(sess.run(f)) == 3.5


def test_nested_blocks_run_both_assigns_in_order():
    cnt = gc.Variable(1)
    with gc.control_dependencies([gc.assign_add(cnt, 10)]):
        doubled = gc.assign(cnt, cnt * 2)  # reads cnt after the add
        with gc.control_dependencies([doubled]):
            inner = cnt + 0
    with _session() as sess:
        assert int(sess.run(inner)) == 22           # (1 + 10) * 2
        assert int(sess.run(inner)) == 64           # (22 + 10) * 2


def test_fetch_the_assign_and_the_read_together():
    cnt = gc.Variable(5)
    inc = gc.assign_add(cnt, 7)
    with gc.control_dependencies([inc]):
        after = gc.identity(cnt)
        plus = cnt + 1
    with _session() as sess:
        for k in range(1, 4):
            got_inc, got_after, got_plus = sess.run([inc, after, plus])
            assert (got_inc, got_after, got_plus) == (5 + 7 * k,) * 2 + (6 + 7 * k,)


def test_read_fed_into_a_later_assign():
    cnt = gc.Variable(0)
    copy = gc.Variable(-1)
    with gc.control_dependencies([gc.assign_add(cnt, 3)]):
        store = gc.assign(copy, cnt * 10)
    with _session() as sess:
        assert [int(sess.run(store)) for _ in range(3)] == [30, 60, 90]
        assert int(sess.run(copy)) == 90


@pytest.mark.parametrize("dtype", FLOATS)
def test_value_read_before_the_assign_keeps_the_old_value(dtype):
    """`old` is ordered before the update and used after it: it must be a copy of the
    variable made before the update (compiled code once read that copy's own
    uninitialized buffer instead of the variable)."""
    v = gc.Variable(np.array([1.0, 2.0, 3.0], dtype))
    old = v.read_value()
    with gc.control_dependencies([old]):
        inc = gc.assign_add(v, [0.5, 0.25, 0.125])
    with gc.control_dependencies([inc]):
        diff = gc.identity(v) - old
        kept = old * 1.0
    start = np.array([1.0, 2.0, 3.0], dtype)
    step = np.array([0.5, 0.25, 0.125], dtype)
    with _session() as sess:
        for k in range(3):
            got_diff, got_kept = sess.run([diff, kept])
            np.testing.assert_array_equal(got_kept, start + k * step)
            np.testing.assert_array_equal(got_diff, (start + (k + 1) * step) - (start + k * step))


def test_training_step_inside_a_block_is_unaffected():
    """The UPDATE_OPS pattern: a step under control_dependencies runs the extra update and
    applies exactly one plain gradient descent step (checked against NumPy)."""
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((8, 3)).astype(np.float64)
    yv = rng.standard_normal((8, 1)).astype(np.float64)
    w0 = rng.standard_normal((3, 1))
    x = gc.placeholder(gc.float64, [None, 3])
    y = gc.placeholder(gc.float64, [None, 1])
    w = gc.Variable(w0)
    steps = gc.Variable(0, trainable=False)
    loss = gc.reduce_mean(gc.square(gc.matmul(x, w) - y))
    gc.add_to_collection(gc.GraphKeys.UPDATE_OPS, gc.assign_add(steps, 1))
    with gc.control_dependencies(gc.get_collection(gc.GraphKeys.UPDATE_OPS)):
        train = gc.train.GradientDescentOptimizer(0.25).minimize(loss)
    expect = w0.copy()
    with _session() as sess:
        for k in range(1, 4):
            sess.run(train, {x: xv, y: yv})
            expect = expect - 0.25 * (2.0 / len(xv)) * xv.T @ (xv @ expect - yv)
            np.testing.assert_allclose(sess.run(w), expect, rtol=1e-12, atol=1e-12)
            assert int(sess.run(steps)) == k


def test_batch_norm_update_ops_around_minimize():
    rng = np.random.default_rng(1)
    xv = (rng.standard_normal((16, 2)) * 3 + 4).astype(np.float32)
    x = gc.placeholder(gc.float32, [None, 2])
    h = gc.layers.batch_normalization(x, training=True, momentum=0.5)
    loss = gc.reduce_mean(gc.square(h))
    with gc.control_dependencies(gc.get_collection(gc.GraphKeys.UPDATE_OPS)):
        train = gc.train.GradientDescentOptimizer(0.01).minimize(loss)
    mean = [v for v in gc.global_variables() if "moving_mean" in v.name][0]
    with _session() as sess:
        expect = np.zeros(2, np.float32)
        for _ in range(3):
            sess.run(train, {x: xv})
            expect = expect * 0.5 + xv.mean(0) * 0.5
            np.testing.assert_allclose(sess.run(mean), expect, rtol=1e-5)


def test_group_as_control_input_and_gradients_built_in_the_block():
    w = gc.Variable(np.array([1.0, -2.0, 0.5]))
    c = gc.Variable(0, trainable=False)
    with gc.control_dependencies([gc.group(gc.assign_add(c, 1), gc.assign_add(c, 10))]):
        loss = gc.reduce_sum(w * w * 3.0)
        grad = gc.gradients(loss, w)[0]
        seen = gc.identity(c)
    with _session() as sess:
        got_grad, got_seen = sess.run([grad, seen])
        np.testing.assert_allclose(got_grad, 6.0 * np.array([1.0, -2.0, 0.5]), rtol=1e-15)
        assert int(got_seen) == 11
        assert int(sess.run(seen)) == 22


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 1023])
def test_a_read_fetched_and_used_after_the_update_keeps_the_old_value(dtype, n):
    """read_value() before an assign_add it gates: the fetched read and the difference
    computed after the update both see the value before it (compiled code fetched the
    variable as it was after the run, and the difference read the updated variable)."""
    start = np.arange(n, dtype=dtype) / 3
    step = np.full(n, 0.5, dtype)
    v = gc.Variable(start, name="v")
    old = v.read_value()
    with gc.control_dependencies([old]):
        inc = gc.assign_add(v, step)
    with gc.control_dependencies([inc]):
        diff = gc.identity(v) - old
    with _session() as sess:
        sess.run(v.initializer)
        got_diff, got_old = sess.run([diff, old])
        np.testing.assert_array_equal(got_old, start)
        np.testing.assert_array_equal(got_diff, (start + step) - start)
        np.testing.assert_array_equal(sess.run(v), start + step)
        # fetching the read alone (no update in the run) is the variable
        np.testing.assert_array_equal(sess.run(old), start + step)
