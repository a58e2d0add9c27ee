"""IndexedSlices gradients and every optimizer's sparse apply, against NumPy.

The expected numbers are independent NumPy implementations of TF1's sparse update
equations (training/*.py `_apply_sparse` and the SparseApply* kernels): repeated indices
are summed first (except GradientDescent's scatter_sub), Momentum, Adagrad and RMSProp
touch only the looked-up rows, Adam decays all of m and v and updates every row.
"""
import warnings

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients

VOCAB, DIM = 6, 3
# Repeated ids, rows untouched for several steps, and a step with no lookups at all.
STEP_IDS = [[1, 3, 1, 0], [2, 2, 2], [3, 1], [], [5, 0, 5, 5]]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _hyper(value, dtype):
    """A hyperparameter as TF1 uses it: a float32 constant cast to the variable's dtype."""
    return dtype(np.float32(value))


def _table(dtype):
    return (np.arange(VOCAB * DIM).reshape(VOCAB, DIM) / 7.0 - 1.0).astype(dtype)


def _target(dtype):
    return np.linspace(-0.5, 0.5, DIM).astype(dtype)


def _rows_grad(table, ids, target):
    """d/d table of sum((table[ids] - target)^2), as (ids, one gradient row per lookup)."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids, 2 * (table[ids] - target)


def _dedup(ids, rows):
    """TF's unique (first-occurrence order) + unsorted_segment_sum."""
    unique = list(dict.fromkeys(ids.tolist()))
    summed = np.zeros((len(unique),) + rows.shape[1:], rows.dtype)
    for i, g in zip(ids, rows):
        summed[unique.index(i)] += g
    return unique, summed


class NumpySGD:
    def __init__(self, table, lr=0.1):
        self.lr = _hyper(lr, table.dtype.type)

    def step(self, table, ids, rows):
        for i, g in zip(ids, rows):  # scatter_sub, one lookup at a time
            table[i] -= g * self.lr


class NumpyMomentum:
    def __init__(self, table, lr=0.1, momentum=0.9, nesterov=False):
        t = table.dtype.type
        self.lr, self.m, self.nesterov = _hyper(lr, t), _hyper(momentum, t), nesterov
        self.accum = np.zeros_like(table)

    def step(self, table, ids, rows):
        for i, g in zip(*_dedup(ids, rows)):
            a = self.accum[i] = self.accum[i] * self.m + g
            table[i] -= g * self.lr + a * self.m * self.lr if self.nesterov else a * self.lr


class NumpyAdagrad:
    def __init__(self, table, lr=0.1, init=0.1):
        self.lr = _hyper(lr, table.dtype.type)
        self.accum = np.full_like(table, init)

    def step(self, table, ids, rows):
        for i, g in zip(*_dedup(ids, rows)):
            self.accum[i] += g * g
            table[i] -= self.lr * g * (1 / np.sqrt(self.accum[i]))


class NumpyRMSProp:
    def __init__(self, table, lr=0.05, decay=0.9, momentum=0.5, eps=1e-6, centered=False):
        t = table.dtype.type
        self.lr, self.rho, self.mo, self.eps = (_hyper(h, t) for h in (lr, decay, momentum, eps))
        self.centered = centered
        self.ms, self.mg, self.mom = np.ones_like(table), np.zeros_like(table), \
            np.zeros_like(table)

    def step(self, table, ids, rows):
        one = self.rho.dtype.type(1)
        for i, g in zip(*_dedup(ids, rows)):
            self.ms[i] = self.ms[i] * self.rho + g * g * (one - self.rho)
            denom = self.ms[i] + self.eps
            if self.centered:
                self.mg[i] = self.mg[i] * self.rho + g * (one - self.rho)
                denom = denom - self.mg[i] ** 2
            self.mom[i] = self.mom[i] * self.mo + (1 / np.sqrt(denom)) * self.lr * g
            table[i] -= self.mom[i]


class NumpyAdam:
    def __init__(self, table, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8):
        t = table.dtype.type
        self.lr, self.b1, self.b2, self.eps = (_hyper(h, t) for h in (lr, beta1, beta2, eps))
        self.m, self.v = np.zeros_like(table), np.zeros_like(table)
        # beta1^t and beta2^t are float32 variables, multiplied in float32, as in TF1
        self.b1_power, self.b2_power = np.float32(beta1), np.float32(beta2)
        self.beta1, self.beta2 = np.float32(beta1), np.float32(beta2)

    def step(self, table, ids, rows):
        one = self.b1.dtype.type(1)
        self.m *= self.b1
        self.v *= self.b2
        for i, g in zip(*_dedup(ids, rows)):
            self.m[i] += g * (one - self.b1)
            self.v[i] += g * g * (one - self.b2)
        b1p, b2p = (one.dtype.type(p) for p in (self.b1_power, self.b2_power))
        lr = self.lr * np.sqrt(one - b2p) / (one - b1p)
        table -= lr * self.m / (np.sqrt(self.v) + self.eps)
        self.b1_power, self.b2_power = self.b1_power * self.beta1, self.b2_power * self.beta2


OPTIMIZERS = {
    "sgd": (lambda: gc.train.GradientDescentOptimizer(0.1), NumpySGD),
    "momentum": (lambda: gc.train.MomentumOptimizer(0.1, 0.9), NumpyMomentum),
    "nesterov": (lambda: gc.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 lambda t: NumpyMomentum(t, nesterov=True)),
    "adagrad": (lambda: gc.train.AdagradOptimizer(0.1), NumpyAdagrad),
    "rmsprop": (lambda: gc.train.RMSPropOptimizer(0.05, momentum=0.5, epsilon=1e-6),
                NumpyRMSProp),
    "rmsprop_centered": (lambda: gc.train.RMSPropOptimizer(0.05, momentum=0.5, epsilon=1e-6,
                                                           centered=True),
                         lambda t: NumpyRMSProp(t, centered=True)),
    "adam": (lambda: gc.train.AdamOptimizer(0.1), NumpyAdam),
}


def _embedding_model(dtype):
    table = gc.Variable(_table(dtype), name="table")
    ids = gc.placeholder(gc.int32, [None], name="ids")
    emb = gc.nn.embedding_lookup(table, ids)
    loss = gc.reduce_sum(gc.square(emb - _target(dtype)))
    return table, ids, loss


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_sparse_apply_matches_tf1_equations(name, dtype):
    make, numpy_opt = OPTIMIZERS[name]
    table, ids, loss = _embedding_model(dtype)
    train = make().minimize(loss)
    expected = _table(dtype)
    ref = numpy_opt(expected)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for step_ids in STEP_IDS:
            sess.run(train, {ids: np.array(step_ids, np.int32)})
            ref.step(expected, *_rows_grad(expected, step_ids, _target(dtype)))
            got = sess.run(table)
            assert got.dtype == dtype
            np.testing.assert_allclose(got, expected, **TOL[dtype], err_msg=str(step_ids))


def test_sparse_momentum_leaves_untouched_rows():
    """The bug this fixes: a dense momentum update keeps moving rows no step looks up."""
    table, ids, loss = _embedding_model(np.float32)
    train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {ids: [1]})
        after_first = sess.run(table)
        sess.run(train, {ids: [2]})
        np.testing.assert_array_equal(sess.run(table)[1], after_first[1])
        np.testing.assert_array_equal(sess.run(table)[4], _table(np.float32)[4])


def test_gradients_returns_indexed_slices():
    params = gc.Variable(_table(np.float64))
    ids = gc.constant([[1, 3], [1, 0]])
    loss = gc.reduce_sum(gc.gather(params, ids) * 2.0)
    grad, = gc.gradients(loss, [params])
    assert isinstance(grad, gc.IndexedSlices)
    assert grad.dtype == gc.float64 and grad.graph is params.graph
    assert grad.name == grad.values.name and grad.op is grad.values.op
    assert grad.device == grad.values.device
    assert grad.shape.as_list() == [VOCAB, DIM]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        values, indices, dense_shape = sess.run([grad.values, grad.indices, grad.dense_shape])
    np.testing.assert_array_equal(indices, [1, 3, 1, 0])
    np.testing.assert_array_equal(values, np.full((4, DIM), 2.0))
    np.testing.assert_array_equal(dense_shape, [VOCAB, DIM])


def test_gather_on_other_axis_gradient_is_dense():
    params = gc.constant(_table(np.float32))
    grad, = gc.gradients(gc.reduce_sum(gc.gather(params, [2, 2], axis=1)), [params])
    assert isinstance(grad, gc.Tensor)
    expected = np.zeros((VOCAB, DIM), np.float32)
    expected[:, 2] = 2
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(grad), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_densify_indexed_slices(dtype):
    values = np.arange(12, dtype=dtype).reshape(4, 3)
    indices = np.array([4, 0, 4, 2])
    slices = gc.IndexedSlices(gc.constant(values), gc.constant(indices),
                              gc.constant([5, 3]))
    dense = gc.convert_to_tensor(slices)
    doubled = gc.multiply(slices, 2)  # an op given IndexedSlices densifies it
    assert dense.shape.as_list() == [5, 3] and dense.dtype == gc.as_dtype(dtype)
    expected = np.zeros((5, 3), dtype)
    np.add.at(expected, indices, values)
    with gc.Session() as sess:
        got, got2 = sess.run([dense, doubled])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got2, 2 * expected)
    with pytest.raises(ValueError, match="dtype"):
        gc.convert_to_tensor(slices, dtype=gc.int32)


def test_densify_warns_when_large():
    slices = gc.IndexedSlices(gc.zeros([1, 10]), gc.constant([0]),
                              gc.constant([10 ** 7, 10]))
    with pytest.warns(UserWarning, match="100000000 elements"):
        gc.convert_to_tensor(slices)


def test_densify_without_dense_shape_raises():
    slices = gc.IndexedSlices(gc.zeros([1, 2]), gc.constant([0]))
    with pytest.raises(ValueError, match="without dense_shape"):
        gc.convert_to_tensor(slices)


def test_gradients_aggregate_slices_by_concatenation():
    params = gc.Variable(_table(np.float32))
    loss = gc.reduce_sum(gc.gather(params, [1, 2])) + 3.0 * gc.reduce_sum(
        gc.gather(params, gc.constant([2], gc.int64)))
    grad, = gc.gradients(loss, [params])
    assert isinstance(grad, gc.IndexedSlices) and grad.indices.dtype == gc.int64
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        values, indices = sess.run([grad.values, grad.indices])
        dense = sess.run(gc.convert_to_tensor(grad))
    assert sorted(indices.tolist()) == [1, 2, 2]
    expected = np.zeros((VOCAB, DIM), np.float32)
    np.add.at(expected, indices, values)
    np.testing.assert_array_equal(dense[[1, 2]], [[1] * DIM, [4] * DIM])
    np.testing.assert_array_equal(dense, expected)


def test_gradients_mixed_sparse_and_dense_is_dense():
    params = gc.Variable(_table(np.float64))
    loss = gc.reduce_sum(gc.gather(params, [1, 1])) + gc.reduce_sum(params * params)
    grad, = gc.gradients(loss, [params])
    assert isinstance(grad, gc.Tensor)
    expected = 2 * _table(np.float64)
    expected[1] += 2
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        np.testing.assert_allclose(sess.run(grad), expected, rtol=1e-14)


def test_gradient_through_ops_densifies():
    """An IndexedSlices reaching a differentiable op other than Identity arrives dense."""
    x = gc.constant(_table(np.float64))
    y = gc.gather(x * 3.0, [0, 0, 5])
    grad, = gc.gradients(gc.reduce_sum(y), [x])
    assert isinstance(grad, gc.Tensor)
    expected = np.zeros((VOCAB, DIM))
    expected[0], expected[5] = 6.0, 3.0
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(grad), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_by_global_norm_keeps_indexed_slices(dtype):
    table, ids, loss = _embedding_model(dtype)
    w = gc.Variable(np.array([3.0, -4.0], dtype))
    loss = loss + gc.reduce_sum(w * w)
    grads = gc.gradients(loss, [table, w])
    clipped, norm = gc.clip_by_global_norm(grads, 2.0)
    assert isinstance(clipped[0], gc.IndexedSlices)
    by_norm = gc.clip_by_norm(grads[0], 0.5)
    assert isinstance(by_norm, gc.IndexedSlices)
    feed = {ids: [1, 3, 1]}
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run([clipped[0].values, clipped[0].indices, clipped[1], norm,
                        by_norm.values], feed)
    _, rows = _rows_grad(_table(dtype), [1, 3, 1], _target(dtype))
    dw = 2 * np.array([3.0, -4.0], dtype)
    # TF1 measures an IndexedSlices by its values, repeated indices not summed
    expected_norm = np.sqrt(np.sum(rows ** 2) + np.sum(dw ** 2))
    scale = 2.0 / max(expected_norm, 2.0)
    np.testing.assert_allclose(got[3], expected_norm, **TOL[dtype])
    np.testing.assert_allclose(got[0], rows * scale, **TOL[dtype])
    np.testing.assert_array_equal(got[1], [1, 3, 1])
    np.testing.assert_allclose(got[2], dw * scale, **TOL[dtype])
    np.testing.assert_allclose(got[4], rows * 0.5 / max(np.sqrt(np.sum(rows ** 2)), 0.5),
                               **TOL[dtype])


def test_clipped_sparse_gradients_train_with_sparse_semantics():
    table, ids, loss = _embedding_model(np.float64)
    opt = gc.train.MomentumOptimizer(0.1, 0.9)
    grads_and_vars = opt.compute_gradients(loss, [table])
    clipped, _ = gc.clip_by_global_norm([g for g, _ in grads_and_vars], 1.0)
    train = opt.apply_gradients(zip(clipped, [table]))
    expected = _table(np.float64)
    ref = NumpyMomentum(expected)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for step_ids in STEP_IDS:
            sess.run(train, {ids: step_ids})
            step_ids, rows = _rows_grad(expected, step_ids, _target(np.float64))
            norm = np.sqrt(np.sum(rows ** 2))
            ref.step(expected, step_ids, rows * (1.0 / max(norm, 1.0)))
            np.testing.assert_allclose(sess.run(table), expected, **TOL[np.float64])


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_embedding_with_zero_lookups(name):
    make, numpy_opt = OPTIMIZERS[name]
    table, ids, loss = _embedding_model(np.float64)
    grad, = gc.gradients(loss, [table])
    train = make().minimize(loss)
    expected = _table(np.float64)
    ref = numpy_opt(expected)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        values, indices = sess.run([grad.values, grad.indices], {ids: []})
        assert values.shape == (0, DIM) and indices.shape == (0,)
        for _ in range(2):
            sess.run(train, {ids: []})
            ref.step(expected, *_rows_grad(expected, [], _target(np.float64)))
        np.testing.assert_allclose(sess.run(table), expected, **TOL[np.float64])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_minimize_mixes_dense_and_sparse_variables(dtype):
    """The table gets the sparse update, the dense layer the dense one, in one step."""
    table, ids, _ = _embedding_model(dtype)
    w0 = np.linspace(-1, 1, DIM * 2).reshape(DIM, 2).astype(dtype)
    w = gc.Variable(w0)
    emb = gc.nn.embedding_lookup(table, ids)
    out = gc.matmul(emb, w)
    loss = gc.reduce_sum(out * out)
    train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    t_exp, w_exp = _table(dtype), w0.copy()
    acc_t, acc_w = np.zeros_like(t_exp), np.zeros_like(w_exp)
    lr, mo = _hyper(0.1, dtype), _hyper(0.9, dtype)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for step_ids in [[0, 2, 0], [4], [2, 2]]:
            sess.run(train, {ids: step_ids})
            e = t_exp[step_ids]
            d_out = 2 * (e @ w_exp)
            dw, de = e.T @ d_out, d_out @ w_exp.T
            acc_w = acc_w * mo + dw
            w_exp -= lr * acc_w
            for i, g in zip(*_dedup(np.array(step_ids), de)):
                acc_t[i] = acc_t[i] * mo + g
                t_exp[i] -= lr * acc_t[i]
            got_t, got_w = sess.run([table, w])
            np.testing.assert_allclose(got_t, t_exp, **TOL[dtype])
            np.testing.assert_allclose(got_w, w_exp, **TOL[dtype])


def test_no_warning_for_embedding_gradients():
    """The optimizers never densify a gradient through convert_to_tensor (TF warns there)."""
    table, ids, loss = _embedding_model(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for make, _ in OPTIMIZERS.values():
            make().minimize(loss)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_update_scatters_into_the_table(name, backend_environment, monkeypatch,
                                                 tmp_path):
    """No dense gradient of the table in the compiled code: the step's modules hold
    nothing of the table's shape but the variables and the scatters into them (Adam also
    decays all of m and v and updates every row, as TF1 does, from no dense gradient)."""
    kind = backend_environment if backend_environment == "gpu_emulated" else "compiled"
    vocab = 1000
    table = gc.Variable(np.zeros((vocab, DIM), np.float32), name="table")
    ids = gc.placeholder(gc.int32, [None])
    loss = gc.reduce_sum(gc.square(gc.nn.embedding_lookup(table, ids) - 1.0))
    train = OPTIMIZERS[name][0]().minimize(loss)
    with gc.Session(config=gc.ConfigProto(backend=kind)) as sess:
        sess.run(gc.global_variables_initializer())
        monkeypatch.setenv("GRAPHC_DUMP", str(tmp_path))
        sess.run(train, {ids: [1, 5, 1]})
    dumps = list(tmp_path.glob("*/*-fusion.txt"))  # numbered after the passes
    assert dumps
    made = [line.split(f"f32[{vocab},{DIM}] ", 1)[1].split("(", 1)[0]
            for f in dumps for line in f.read_text().splitlines()
            if f"= f32[{vocab},{DIM}] " in line]
    scatters = {"ScatterUpdate", "ScatterAdd", "ScatterSub"}
    assert scatters & set(made)
    assert "GatherGrad" not in made
    if name != "adam":
        assert set(made) <= scatters | {"VariableV2"}, made


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_ops(dtype):
    ref = gc.Variable(np.arange(12, dtype=dtype).reshape(4, 3))
    ids = gc.placeholder(gc.int64, [None])
    rows = gc.placeholder(dtype, [None, 3])
    added = gc.scatter_add(ref, ids, rows)
    subtracted = gc.scatter_sub(ref, ids, rows)
    updated = gc.scatter_update(ref, gc.constant([[2], [0]]), gc.constant(
        np.array([[[7, 8, 9]], [[1, 2, 3]]], dtype)))
    assert added.shape.as_list() == [4, 3] and added.dtype == gc.as_dtype(dtype)
    want = np.arange(12, dtype=dtype).reshape(4, 3)
    r = np.linspace(0.5, 3, 9).reshape(3, 3).astype(dtype)
    with gc.Session() as sess:
        sess.run(ref.initializer)
        got = sess.run(added, {ids: [1, 3, 1], rows: r})
        np.add.at(want, [1, 3, 1], r)
        np.testing.assert_array_equal(got, want)
        sess.run(subtracted.op, {ids: [0, 0], rows: r[:2]})
        np.subtract.at(want, [0, 0], r[:2])
        sess.run(updated.op)
        want[2], want[0] = [7, 8, 9], [1, 2, 3]
        np.testing.assert_array_equal(sess.run(ref), want)
        sess.run(added.op, {ids: [], rows: np.zeros((0, 3), dtype)})
        np.testing.assert_array_equal(sess.run(ref), want)
        with pytest.raises(gc.errors.InvalidArgumentError, match=r"= 4 is not in \[0, 4\)"):
            sess.run(added.op, {ids: [0, 4], rows: r[:2]})
    with pytest.raises(ValueError, match="Shapes of updates"):
        gc.scatter_add(ref, [0, 1], gc.zeros([3, 3], dtype))


def test_unique_in_order_of_first_occurrence():
    x = gc.placeholder(gc.int64, [None])
    y, idx = gc.unique(x, out_idx=gc.int64)
    assert idx.dtype == gc.int64
    with gc.Session() as sess:
        got_y, got_idx = sess.run([y, idx], {x: [7, 2, 7, 9, 2, 2]})
        np.testing.assert_array_equal(got_y, [7, 2, 9])
        np.testing.assert_array_equal(got_idx, [0, 1, 0, 2, 1, 1])
        empty_y, empty_idx = sess.run([y, idx], {x: np.zeros(0, np.int64)})
        assert empty_y.shape == (0,) and empty_idx.shape == (0,)


def test_repeated_indices_scatter_without_lost_adds(monkeypatch):
    """A scatter's loop is never split over the thread team: split, threads adding into
    one row lost terms (a sum of 200000 ones came out 175000)."""
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")  # split every loop it may
    x = gc.placeholder(gc.float32, [3, 64])
    i = gc.placeholder(gc.int32, [None])
    grad = gc.convert_to_tensor(gc.gradients(gc.reduce_sum(gc.gather(x, i)), x)[0])
    ids = np.zeros(200000, np.int32)
    ids[::7] = 2
    with gc.Session() as sess:
        got = sess.run(grad, {x: np.ones((3, 64), np.float32), i: ids})
    want = np.zeros((3, 64), np.float32)
    want[0], want[2] = np.sum(ids == 0), np.sum(ids == 2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_partitioned_embedding_gets_sparse_shard_gradients(strategy):
    """embedding_lookup of a list of shards: each shard's gradient is an IndexedSlices of
    its own rows, and training the shards trains the rows of the logical table."""
    full = _table(np.float64)[:5]
    ids_of = {"mod": [[0, 2, 4], [1, 3]], "div": [[0, 1, 2], [3, 4]]}[strategy]
    shards = [gc.Variable(full[rows]) for rows in ids_of]
    ids = gc.placeholder(gc.int32, [None])
    emb = gc.nn.embedding_lookup(shards, ids, partition_strategy=strategy)
    loss = gc.reduce_sum(gc.square(emb - _target(np.float64)))
    grads = gc.gradients(loss, shards)
    assert all(isinstance(g, gc.IndexedSlices) for g in grads)
    train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    expected = full.copy()
    ref = NumpyMomentum(expected)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for step_ids in [[3, 0, 4, 3], [1], [], [2, 2, 0]]:
            sess.run(train, {ids: step_ids})
            ref.step(expected, *_rows_grad(expected, step_ids, _target(np.float64)))
            for shard, rows in zip(shards, ids_of):
                np.testing.assert_allclose(sess.run(shard), expected[rows],
                                           **TOL[np.float64])


def test_variable_scatter_methods_take_indexed_slices():
    v = gc.Variable(np.zeros((3, 2)))
    delta = gc.IndexedSlices(gc.constant([[1.0, 2.0], [3.0, 4.0]], gc.float64),
                             gc.constant([2, 2]), gc.constant([3, 2]))
    add, sub = v.scatter_add(delta), v.scatter_sub(-delta)
    with pytest.raises(TypeError, match="not IndexedSlices"):
        v.scatter_update(gc.constant([[1.0, 2.0]], gc.float64))
    with gc.Session() as sess:
        sess.run(v.initializer)
        sess.run(add.op)
        np.testing.assert_array_equal(sess.run(sub), [[0, 0], [0, 0], [8, 12]])


def test_gate_graph_keeps_sparse_gradients():
    table, ids, loss = _embedding_model(np.float64)
    opt = gc.train.MomentumOptimizer(0.1, 0.9)
    grads_and_vars = opt.compute_gradients(loss, gate_gradients=opt.GATE_GRAPH)
    assert isinstance(grads_and_vars[0][0], gc.IndexedSlices)
    train = opt.apply_gradients(grads_and_vars)
    expected = _table(np.float64)
    ref = NumpyMomentum(expected)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for step_ids in STEP_IDS[:3]:
            sess.run(train, {ids: step_ids})
            ref.step(expected, *_rows_grad(expected, step_ids, _target(np.float64)))
        np.testing.assert_allclose(sess.run(table), expected, **TOL[np.float64])


# ---------------------------------------------- embedding bag training (the benchmark's)
# tools/peers_bench.py's embedding_train at a small size: ids [batch, BAG] looked up in a
# [BAG_VOCAB, BAG_DIM] table, mean-pooled, a dense layer, sparse xent, one SGD step.
BAG_VOCAB, BAG_DIM, BAG, BAG_CLASSES = 9, 5, 4, 7


def _bag_ids(batch):
    """Ids with 0 and the last row, an id repeated inside a bag and across bags."""
    rng = np.random.default_rng(batch)
    ids = rng.integers(0, BAG_VOCAB, (batch, BAG))
    if batch:
        ids[0, :] = [0, BAG_VOCAB - 1, 3, 3]
        ids[-1, 0] = 3
    return ids.astype(np.int32)


def _bag_weights(dtype):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(shape).astype(dtype)
            for shape in ((BAG_VOCAB, BAG_DIM), (BAG_DIM, BAG_CLASSES), (BAG_CLASSES,))]


def _numpy_bag_step(table, w, b, ids, labels, lr):
    """TF1's embedding_lookup -> reduce_mean -> dense -> mean sparse xent -> SGD, in
    float64: (loss, new table, new w, new b). The table's gradient is a row per lookup,
    subtracted one lookup at a time (scatter_sub adds up repeated ids)."""
    t, w64, b64 = (a.astype(np.float64) for a in (table, w, b))
    batch = ids.shape[0]
    pooled = t[ids].mean(axis=1) if batch else np.zeros((0, BAG_DIM))
    logits = pooled @ w64 + b64
    shifted = logits - logits.max(axis=1, keepdims=True) if batch else logits
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(batch)
    loss = -log_prob[rows, labels].mean() if batch else np.nan
    dlogits = np.exp(log_prob)
    dlogits[rows, labels] -= 1
    dlogits /= max(batch, 1)
    dpooled = dlogits @ w64.T
    new_table = t.copy()
    np.subtract.at(new_table, ids.reshape(-1),
                   lr * np.repeat(dpooled / BAG, BAG, axis=0))
    return loss, new_table, w64 - lr * pooled.T @ dlogits, b64 - lr * dlogits.sum(axis=0)


@pytest.mark.parametrize("batch", [0, 1, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_bag_training_step_matches_numpy(batch, dtype):
    table0, w0, b0 = _bag_weights(dtype)
    ids_v = _bag_ids(batch)
    labels_v = (np.arange(batch) * 3 % BAG_CLASSES).astype(np.int32)
    if batch:
        labels_v[-1] = BAG_CLASSES - 1
    lr = 0.5
    with gc.Graph().as_default():
        ids = gc.placeholder(gc.int32, [None, BAG])
        labels = gc.placeholder(gc.int32, [None])
        table, w, b = (gc.Variable(a) for a in (table0, w0, b0))
        pooled = gc.reduce_mean(gc.nn.embedding_lookup(table, ids), axis=1)
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=gc.matmul(pooled, w) + b))
        train = gc.train.GradientDescentOptimizer(lr).minimize(loss)
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            got_loss, _ = sess.run([loss, train], {ids: ids_v, labels: labels_v})
            got = sess.run([table, w, b])
    want_loss, *want = _numpy_bag_step(table0, w0, b0, ids_v, labels_v,
                                       np.float64(dtype(np.float32(lr))))
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    if batch:
        np.testing.assert_allclose(got_loss, want_loss, **tol)
    else:
        assert np.isnan(got_loss)  # the mean of no losses, as in TF
    for g, expected, name in zip(got, want, ["table", "w", "b"]):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, expected, err_msg=name, **tol)
    untouched = np.setdiff1d(np.arange(BAG_VOCAB), ids_v)
    np.testing.assert_array_equal(got[0][untouched], table0[untouched])


def test_embedding_bag_gradients_match_finite_differences():
    ids_v = _bag_ids(7)
    labels_v = (np.arange(7) % BAG_CLASSES).astype(np.int32)

    def model(table, w, b):
        pooled = gc.reduce_mean(gc.nn.embedding_lookup(table, ids_v), axis=1)
        return gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels_v, logits=gc.matmul(pooled, w) + b)
    check_gradients(model, _bag_weights(np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatters_of_computed_updates_match_numpy(dtype):
    # the updates' elementwise/broadcast producers are computed in the scatter's loop;
    # repeated ids add up, and updates read from the scattered variable see its old rows
    ref0 = np.linspace(-2, 3, 15).reshape(5, 3).astype(dtype)
    ids_v = np.array([4, 1, 4, 4, 0], np.int32)
    col_v = np.array([0.5, -1.0, 2.0], dtype)
    rows_v = np.linspace(0.25, 2, 5).astype(dtype)
    ref = gc.Variable(ref0)
    ids = gc.placeholder(gc.int32, [None])
    col = gc.placeholder(dtype, [3])
    rows = gc.placeholder(dtype, [None])
    computed = gc.expand_dims(rows, 1) * col + 1.0  # a broadcast [n, 3]
    add = gc.scatter_add(ref, ids, computed)
    sub = gc.scatter_sub(ref, ids, gc.gather(ref, ids) * 0.5)
    update = gc.scatter_update(ref, ids[:2], gc.tanh(computed[:2]))
    feed = {ids: ids_v, col: col_v, rows: rows_v}
    want = ref0.astype(np.float64)
    want_computed = rows_v[:, None].astype(np.float64) * col_v + 1.0
    with gc.Session() as sess:
        sess.run(ref.initializer)
        sess.run(add.op, feed)
        np.add.at(want, ids_v, want_computed)
        got_add = sess.run(ref)
        sess.run(sub.op, feed)
        np.subtract.at(want, ids_v, want[ids_v] * 0.5)
        got_sub = sess.run(ref)
        sess.run(update.op, feed)
        want[ids_v[:2]] = np.tanh(want_computed[:2])
        got_update = sess.run(ref)
        empty = {ids: np.zeros(0, np.int32), col: col_v, rows: np.zeros(0, dtype)}
        sess.run(add.op, empty)
        got_empty = sess.run(ref)
    ref1 = ref0.astype(np.float64)
    np.add.at(ref1, ids_v, want_computed)
    for got, expected, name in [(got_add, ref1, "scatter_add"), (got_update, want, "all"),
                                (got_empty, want, "empty")]:
        assert got.dtype == dtype
        np.testing.assert_allclose(got, expected, err_msg=name, **TOL[dtype])
    ref2 = ref1.copy()
    np.subtract.at(ref2, ids_v, ref1[ids_v] * 0.5)
    np.testing.assert_allclose(got_sub, ref2, err_msg="scatter_sub", **TOL[dtype])
