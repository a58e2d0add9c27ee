"""Row scatters on the thread team, split by windows of rows
(graphc/compiler/backends/cpu/parallel.py RowWindow): each thread owns a range of the
variable's rows and applies, in order, the updates of those rows only.

So the results are the serial loop's bits whatever the team (1 thread, 2 on the team, 2
with the worker never joining), repeated indices included, and equal a NumPy loop that
applies the updates in order; a bad index is reported as the serial run reports it
(the first one). Sizes 0, 1, 7 and 1023, float32 and float64.
"""
import numpy as np
import pytest

import graphc as gc
from tests.test_parallel import executables, left_alone, on_the_team, split_everything  # noqa: F401
from runtime import jit

OPS = {"ScatterSub": (gc.scatter_sub, np.subtract),
       "ScatterAdd": (gc.scatter_add, np.add)}


def scatter_case(rows, count, cols, seed, dtype):
    """(the variable's initial value, indices with repeats, updates)."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, cols)).astype(dtype)
    # few distinct rows: most indices repeat, some several times
    idx = rng.integers(0, max(1, rows // 3 + 1), count).astype(np.int32) % max(rows, 1)
    upd = rng.standard_normal((count, cols)).astype(dtype)
    return table, idx, upd


def in_order(op, table, idx, upd, scale):
    """The reference: each update applied in turn, in the table's dtype (repeats too)."""
    out = table.copy()
    for i, r in enumerate(idx):
        out[r] = op(out[r], upd[i] * scale)
    return out


def scatter_session(op_name, table, count, threads):
    """A session with one step: table_var op= updates * 0.5 (the product computed in the
    scatter's own loop); returns (session, step, placeholders)."""
    fn = OPS[op_name][0] if op_name in OPS else gc.scatter_update
    g = gc.Graph()
    dtype = gc.float64 if table.dtype == np.float64 else gc.float32
    with g.as_default():
        var = gc.Variable(table)
        idx = gc.placeholder(gc.int32, [count])
        upd = gc.placeholder(dtype, [count, table.shape[1]])
        step = fn(var, idx, upd * np.asarray(0.5, table.dtype))
        init = var.initializer
    sess = gc.Session(graph=g, config=gc.ConfigProto(intra_op_parallelism_threads=threads))
    return sess, init, step, (idx, upd)


def run_scatter(op_name, table, idx, upd, threads, team=None):
    sess, init, step, (pi, pu) = scatter_session(op_name, table, len(idx), threads)
    sess.run(init)
    if team is None:
        return sess.run(step, {pi: idx, pu: upd}), sess
    with team():
        return sess.run(step, {pi: idx, pu: upd}), sess


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_name", sorted(OPS))
@pytest.mark.parametrize("rows,count", [(1, 0), (1, 1), (7, 7), (7, 1023), (1023, 7),
                                        (1023, 1023)])
def test_row_scatter_on_the_team_equals_numpy_in_order(split_everything, op_name, dtype,
                                                       rows, count):
    table, idx, upd = scatter_case(rows, count, 5, rows * 31 + count, dtype)
    expect = in_order(OPS[op_name][1], table, idx, upd, dtype(0.5))
    one, _ = run_scatter(op_name, table, idx, upd, 1)
    both, _ = run_scatter(op_name, table, idx, upd, 2, on_the_team)
    alone, _ = run_scatter(op_name, table, idx, upd, 2, left_alone)
    np.testing.assert_array_equal(one, expect)
    np.testing.assert_array_equal(both, expect)
    np.testing.assert_array_equal(alone, expect)


def test_row_scatter_runs_one_task_per_thread(split_everything):
    """The scatter's loop is split (it ran serially: two updates may name one row): on a
    team of 2, its region runs a task on each thread."""
    table, idx, upd = scatter_case(1023, 1023, 5, 3, np.float32)
    sess, init, step, (pi, pu) = scatter_session("ScatterSub", table, len(idx), 2)
    sess.run(init)
    sess.run(step.op, {pi: idx, pu: upd})  # not fetched: no copy of the variable
    if jit.thread_team() is None:
        pytest.skip("regions go to libgomp or run serially here: no team protocol")
    tasks = lambda: sum(e.parallel_tasks for e in executables(sess))  # noqa: E731
    before = tasks()
    with on_the_team():
        sess.run(step.op, {pi: idx, pu: upd})
    assert tasks() - before == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_update_on_the_team_same_bits(split_everything, dtype):
    """ScatterUpdate: distinct indices equal NumPy's assignment; repeated ones give the
    same bits on 1 and 2 threads (TF leaves which repeat wins unspecified)."""
    table, _, upd = scatter_case(1023, 300, 5, 9, dtype)
    distinct = np.random.default_rng(1).permutation(1023)[:300].astype(np.int32)
    expect = table.copy()
    expect[distinct] = upd * dtype(0.5)
    got, _ = run_scatter("ScatterUpdate", table, distinct, upd, 2, on_the_team)
    np.testing.assert_array_equal(got, expect)
    repeated = (distinct % 17).astype(np.int32)
    one, _ = run_scatter("ScatterUpdate", table, repeated, upd, 1)
    two, _ = run_scatter("ScatterUpdate", table, repeated, upd, 2, on_the_team)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("threads", [1, 2])
def test_scatter_bad_index_reports_the_first_on_the_team(split_everything, threads):
    """Bad indices owned by different windows (clamped to the last row and the first):
    the error names the first bad one in the updates' order, as a serial run does."""
    table, idx, upd = scatter_case(1023, 1023, 5, 5, np.float32)
    idx[900] = -4     # clamped to row 0: the first window's
    idx[300] = 5000   # the first bad one, clamped to the last row
    with pytest.raises(gc.errors.InvalidArgumentError) as err:
        run_scatter("ScatterSub", table, idx, upd, threads, on_the_team)
    assert "5000" in str(err.value) and "-4" not in str(err.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_sgd_step_on_the_team_equals_numpy(split_everything, dtype):
    """embedding_lookup + mean + SGD (the sparse gradient's rows scattered into the table,
    repeated ids adding up): 1 and 2 threads the same bits, and NumPy's step."""
    rng = np.random.default_rng(11)
    vocab, dim, batch, k = 1023, 64, 64, 8
    table0 = (rng.standard_normal((vocab, dim)) * 0.1).astype(dtype)
    ids = rng.integers(0, 40, (batch, k)).astype(np.int32)   # many repeats
    target = rng.standard_normal((batch, dim)).astype(dtype)

    def step(threads, team):
        g = gc.Graph()
        gdt = gc.float64 if dtype == np.float64 else gc.float32
        with g.as_default():
            table = gc.Variable(table0)
            pid = gc.placeholder(gc.int32, [batch, k])
            pt = gc.placeholder(gdt, [batch, dim])
            pooled = gc.reduce_mean(gc.nn.embedding_lookup(table, pid), axis=1)
            loss = gc.reduce_sum(gc.square(pooled - pt)) * 0.5
            train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = table.initializer
        sess = gc.Session(graph=g, config=gc.ConfigProto(intra_op_parallelism_threads=threads))
        sess.run(init)
        with team():
            sess.run(train, {pid: ids, pt: target})
        return sess.run(table)

    one = step(1, on_the_team)
    two = step(2, on_the_team)
    alone = step(2, left_alone)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, alone)
    t64 = table0.astype(np.float64)
    pooled = t64[ids].mean(axis=1)
    dpooled = pooled - target
    expect = t64.copy()
    lr = np.float64(np.float32(0.1))  # TF1: the optimizer's float32 rate, cast to the var's
    np.subtract.at(expect, ids.reshape(-1), lr * np.repeat(dpooled / k, k, axis=0))
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(one, expect, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,count", [(1, 1), (7, 1023), (1023, 7), (1023, 1023)])
def test_gather_gradient_on_the_team_same_bits(split_everything, dtype, rows, count):
    """A gather's dense gradient along axis 0 (GatherGrad: zeros, then each row of the
    incoming gradient added at its index) split by windows of rows: 1 and 2 threads the
    same bits, and NumPy's in-order sum."""
    params, idx, _ = scatter_case(rows, count, 5, rows + 7 * count, dtype)

    def grad(threads, team):
        g = gc.Graph()
        with g.as_default():
            p = gc.placeholder(gc.float64 if dtype == np.float64 else gc.float32, [rows, 5])
            i = gc.placeholder(gc.int32, [count])
            y = gc.gather(p, i)
            dense = gc.convert_to_tensor(gc.gradients(gc.reduce_sum(y * y), p)[0])
        sess = gc.Session(graph=g, config=gc.ConfigProto(intra_op_parallelism_threads=threads))
        with team():
            return sess.run(dense, {p: params, i: idx})

    one = grad(1, on_the_team)
    np.testing.assert_array_equal(grad(2, on_the_team), one)
    np.testing.assert_array_equal(grad(2, left_alone), one)
    expect = np.zeros(params.shape)
    np.add.at(expect, idx, 2 * params.astype(np.float64)[idx])
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(one, expect, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_with_2d_indices_on_the_team_equals_numpy(split_everything, dtype):
    """Indices of rank 2: the row is known one loop further in (the window's test sits
    inside the second loop); repeats across both index axes apply in row-major order."""
    table, flat_idx, flat_upd = scatter_case(1023, 7 * 33, 3, 21, dtype)
    idx, upd = flat_idx.reshape(7, 33), flat_upd.reshape(7, 33, 3)
    expect = in_order(np.add, table, flat_idx, flat_upd, dtype(0.5))

    def run(threads, team):
        g = gc.Graph()
        with g.as_default():
            var = gc.Variable(table)
            pi = gc.placeholder(gc.int32, [7, 33])
            pu = gc.placeholder(gc.float64 if dtype == np.float64 else gc.float32, [7, 33, 3])
            step = gc.scatter_add(var, pi, pu * np.asarray(0.5, dtype))
            init = var.initializer
        sess = gc.Session(graph=g, config=gc.ConfigProto(intra_op_parallelism_threads=threads))
        sess.run(init)
        with team():
            return sess.run(step, {pi: idx, pu: upd})

    for threads, team in ((1, on_the_team), (2, on_the_team), (2, left_alone)):
        np.testing.assert_array_equal(run(threads, team), expect)


@pytest.mark.parametrize("threads", [1, 2])
def test_scatter_into_no_rows_reports_the_bad_index(split_everything, threads):
    """A variable of 0 rows: every index is bad, and the run says so (the windows of 0
    rows must still run the loop that checks them)."""
    table = np.zeros((0, 5), np.float32)
    idx = np.array([2, 0, 1], np.int32)
    upd = np.ones((3, 5), np.float32)
    with pytest.raises(gc.errors.InvalidArgumentError) as err:
        run_scatter("ScatterAdd", table, idx, upd, threads, on_the_team)
    assert "2" in str(err.value)
