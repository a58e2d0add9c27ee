"""batch_gemms: a sum of per-step products becomes one product over the concatenated steps.

Each rewrite is checked against a NumPy reference written here and against the same graph
compiled with the pass switched off; the static_rnn weight gradient must come out as one
MatMul, and sums the pass must leave alone keep their products.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower, optimize
from tests.gradcheck import check_gradients

RNG = np.random.default_rng(0)
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _matmul_count(fetches, feeds, shapes, disable=()):
    module = lower(list(feeds), list(fetches), [], shapes)
    stats = optimize(module, disable=list(disable))
    return sum(n.type == "MatMul" for n in module.nodes), stats


def _run(fetches, feed_dict, monkeypatch, batched):
    """fetches' values from a fresh Session, with batch_gemms on or off."""
    if batched:
        monkeypatch.delenv("GRAPHC_DISABLE_PASSES", raising=False)
    else:
        monkeypatch.setenv("GRAPHC_DISABLE_PASSES", "batch_gemms")
    with gc.Session() as sess:
        if gc.global_variables():
            sess.run(gc.global_variables_initializer())
        return sess.run(fetches, feed_dict)


def _operand(transposed, inner, outer, dtype):
    shape = (inner, outer) if transposed else (outer, inner)
    return RNG.standard_normal(shape).astype(dtype)


def _np_product(a, b, ta, tb):
    return (a.T if ta else a) @ (b.T if tb else b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("steps,batch", [(1, 1), (2, 1), (2, 5), (7, 3), (7, 32)])
def test_weight_gradient_sum_matches_numpy_and_the_unbatched_graph(dtype, steps, batch,
                                                                   monkeypatch):
    m, n = 96, 80  # dW_t = x_t^T . g_t: [m, n] with an inner dim of the batch
    xs = [RNG.standard_normal((batch, m)).astype(dtype) for _ in range(steps)]
    gs = [RNG.standard_normal((batch, n)).astype(dtype) for _ in range(steps)]
    x_ph = [gc.placeholder(dtype, [None, m]) for _ in range(steps)]
    g_ph = [gc.placeholder(dtype, [None, n]) for _ in range(steps)]
    total = gc.add_n([gc.matmul(x, g, transpose_a=True) for x, g in zip(x_ph, g_ph)])
    count, _ = _matmul_count([total], x_ph + g_ph, [(batch, m)] * steps + [(batch, n)] * steps)
    assert count == 1
    feed = dict(zip(x_ph + g_ph, xs + gs))
    want = sum(x.T.astype(np.float64) @ g for x, g in zip(xs, gs))
    got = _run(total, feed, monkeypatch, batched=True)
    unbatched = _run(total, feed, monkeypatch, batched=False)
    assert got.dtype == dtype and got.shape == (m, n)
    np.testing.assert_allclose(got, want, **TOL[dtype])
    np.testing.assert_allclose(got, unbatched, **TOL[dtype])


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_every_transpose_combination_concatenates_along_the_inner_axis(ta, tb, monkeypatch):
    m, n, inner = 9, 7, [3, 1, 4]
    a_vals = [_operand(ta, k, m, np.float64) for k in inner]
    b_vals = [_operand(not tb, k, n, np.float64) for k in inner]
    a_ph = [gc.placeholder(gc.float64, a.shape) for a in a_vals]
    b_ph = [gc.placeholder(gc.float64, b.shape) for b in b_vals]
    total = gc.add_n([gc.matmul(a, b, transpose_a=ta, transpose_b=tb)
                      for a, b in zip(a_ph, b_ph)])
    count, stats = _matmul_count([total], a_ph + b_ph, [a.shape for a in a_vals + b_vals])
    assert count == 1 and stats["batch_gemms"]["gemms_removed"] == 2
    got = _run(total, dict(zip(a_ph + b_ph, a_vals + b_vals)), monkeypatch, batched=True)
    want = sum(_np_product(a, b, ta, tb) for a, b in zip(a_vals, b_vals))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_chained_adds_and_other_summands_keep_their_place(monkeypatch):
    x = [RNG.standard_normal((4, 9)) for _ in range(3)]
    g = [RNG.standard_normal((4, 8)) for _ in range(3)]
    bias = RNG.standard_normal((9, 8))
    x_ph = [gc.placeholder(gc.float64, [None, 9]) for _ in x]
    g_ph = [gc.placeholder(gc.float64, [None, 8]) for _ in g]
    b_ph = gc.placeholder(gc.float64, [9, 8])
    prods = [gc.matmul(a, b, transpose_a=True) for a, b in zip(x_ph, g_ph)]
    total = (prods[0] + b_ph) + prods[1] + prods[2]
    feeds = x_ph + g_ph + [b_ph]
    count, stats = _matmul_count([total], feeds, [(4, 9)] * 3 + [(4, 8)] * 3 + [(9, 8)])
    assert count == 1 and stats["batch_gemms"]["gemms_batched"] == 1
    got = _run(total, dict(zip(feeds, x + g + [bias])), monkeypatch, batched=True)
    np.testing.assert_allclose(got, bias + sum(a.T @ b for a, b in zip(x, g)), rtol=1e-12)


def _tiny_rnn(x_steps, w):
    """h_t = tanh([x_t, h_{t-1}] . w): every step's product has the same weight."""
    h = gc.zeros([int(x_steps[0].shape[0]), int(w.shape[1])], dtype=w.dtype)
    outs = []
    for x in x_steps:
        h = gc.tanh(gc.matmul(gc.concat([x, h], axis=1), w))
        outs.append(h)
    return gc.add_n(outs)


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_shared_weight_gradient_matches_finite_differences(steps):
    rng = np.random.default_rng(steps)
    inputs = [rng.standard_normal((3, 4)) for _ in range(steps)] + \
             [0.5 * rng.standard_normal((4 + 8, 8))]
    check_gradients(lambda *ph: _tiny_rnn(ph[:-1], ph[-1]), inputs, wrt=[steps])


@pytest.mark.parametrize("steps", [2, 7])
def test_static_rnn_weight_gradient_is_one_matmul(steps, monkeypatch):
    batch, width, hidden = 3, 4, 5
    gc.set_random_seed(1)  # each Session initializes the kernel to the same values
    x = gc.placeholder(gc.float32, [None, steps, width], name="x")
    cell = gc.nn.rnn_cell.BasicLSTMCell(hidden)
    outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)
    loss = gc.reduce_sum(gc.square(gc.stack(outputs, axis=1)))
    kernel = next(v for v in gc.trainable_variables() if "kernel" in v.name)
    grad = gc.gradients(loss, [kernel])[0]
    shapes = [(batch, steps, width)]
    before, _ = _matmul_count([grad], [x], shapes, disable=["batch_gemms"])
    after, stats = _matmul_count([grad], [x], shapes)
    # forward: one product per step; backward: dW per step and dh for all but the first
    assert before == steps + steps + (steps - 1)
    # dW: one product; forward: x_t . W_x of every step as one, h_t . W_h per step
    assert after == before - (steps - 1) + 1
    counts = dict(stats["batch_gemms"], nodes_removed=None)
    assert counts == {"gemms_batched": 1, "gemms_removed": steps - 1, "row_batches": 1,
                      "row_products_merged": steps, "nodes_removed": None}
    feed = {x: RNG.standard_normal(shapes[0]).astype(np.float32)}
    got = _run(grad, feed, monkeypatch, batched=True)
    want = _run(grad, feed, monkeypatch, batched=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_with_another_use_is_left_alone():
    x = [gc.placeholder(gc.float32, [4, 16]) for _ in range(3)]
    g = [gc.placeholder(gc.float32, [4, 12]) for _ in range(3)]
    prods = [gc.matmul(a, b, transpose_a=True) for a, b in zip(x, g)]
    total = gc.add_n(prods)
    shapes = [(4, 16)] * 3 + [(4, 12)] * 3
    count, stats = _matmul_count([total, prods[1]], x + g, shapes)
    # the two other products are batched; the fetched one is computed anyway
    assert count == 2 and stats["batch_gemms"]["gemms_removed"] == 1
    count, stats = _matmul_count([total, prods[1], prods[2]], x + g, shapes)
    assert count == 3 and stats["batch_gemms"]["gemms_batched"] == 0


def test_products_over_a_long_inner_dim_stay_apart():
    # copying two [4096, 64] operands each costs more than summing two [64, 64] results
    x = [gc.placeholder(gc.float32, [4096, 64]) for _ in range(2)]
    total = gc.add_n([gc.matmul(a, a, transpose_a=True) for a in x])
    count, stats = _matmul_count([total], x, [(4096, 64)] * 2)
    assert count == 2 and stats["batch_gemms"]["gemms_batched"] == 0


def test_products_with_other_flags_are_batched_apart(monkeypatch):
    a = [RNG.standard_normal((2, 8)) for _ in range(2)] + \
        [RNG.standard_normal((8, 2)) for _ in range(2)]
    ph = [gc.placeholder(gc.float64, x.shape) for x in a]
    # all four products are [8, 8]: x^T.y over rows, x.y^T over columns
    tn = [gc.matmul(ph[0], ph[1], transpose_a=True), gc.matmul(ph[1], ph[0], transpose_a=True)]
    nt = [gc.matmul(ph[2], ph[3], transpose_b=True), gc.matmul(ph[3], ph[2], transpose_b=True)]
    total = gc.add_n([tn[0], nt[0], tn[1], nt[1]])
    count, stats = _matmul_count([total], ph, [x.shape for x in a])
    assert count == 2 and stats["batch_gemms"]["gemms_batched"] == 2
    got = _run(total, dict(zip(ph, a)), monkeypatch, batched=True)
    want = a[0].T @ a[1] + a[1].T @ a[0] + a[2] @ a[3].T + a[3] @ a[2].T
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [[1, 1], [3, 3, 3, 3, 3, 3, 3], [2, 5, 1], [0, 4]])
def test_products_of_one_weight_become_one_product_of_the_stacked_rows(dtype, rows,
                                                                       monkeypatch):
    k, n = 6, 5
    w_val = RNG.standard_normal((k, n)).astype(dtype)
    a_vals = [RNG.standard_normal((r, k)).astype(dtype) for r in rows]
    same = len(set(rows)) == 1  # one unknown batch dim for all, else each its own shape
    a_ph = [gc.placeholder(dtype, [None if same else r, k]) for r in rows]
    w = gc.placeholder(dtype, [k, n])
    outs = [gc.tanh(gc.matmul(a, w)) for a in a_ph]
    count, stats = _matmul_count(outs, a_ph + [w], [a.shape for a in a_vals] + [(k, n)])
    assert count == 1 and stats["batch_gemms"]["row_products_merged"] == len(rows)
    feed = dict(zip(a_ph + [w], a_vals + [w_val]))
    got = _run(outs, feed, monkeypatch, batched=True)
    for g, a in zip(got, a_vals):
        assert g.dtype == dtype and g.shape == (a.shape[0], n)
        np.testing.assert_allclose(g, np.tanh(a.astype(np.float64) @ w_val), **TOL[dtype])


@pytest.mark.parametrize("steps", [1, 2, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_static_rnn_input_projection_matches_numpy(steps, dtype, monkeypatch):
    batch, width, hidden = 3, 4, 5
    xs = RNG.standard_normal((batch, steps, width)).astype(dtype)
    kernel = (0.5 * RNG.standard_normal((width + hidden, 4 * hidden))).astype(dtype)
    bias = RNG.standard_normal(4 * hidden).astype(dtype)
    x = gc.placeholder(dtype, [None, steps, width])
    cell = gc.nn.rnn_cell.BasicLSTMCell(hidden, dtype=dtype)
    outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=dtype)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        variables = {v.name.split("/")[-1].split(":")[0]: v for v in gc.trainable_variables()}
        variables["kernel"].load(kernel, sess)
        variables["bias"].load(bias, sess)
        got = sess.run(outputs, {x: xs})
    # TF's BasicLSTMCell: gates i, j, f, o of [x, h] . kernel + bias; forget bias 1
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h = np.zeros((batch, hidden))
    c = np.zeros((batch, hidden))
    for t in range(steps):
        i, j, f, o = np.split(np.concatenate([xs[:, t], h], 1) @ kernel + bias, 4, axis=1)
        c = c * sig(f + 1.0) + sig(i) * np.tanh(j)
        h = np.tanh(c) * sig(o)
        np.testing.assert_allclose(got[t], h, **TOL[dtype])


def test_products_whose_left_operands_depend_on_each_other_stay_apart():
    # h_{t+1} = tanh(h_t . w): each product needs the one before it
    h0 = h = gc.placeholder(gc.float32, [2, 4])
    w = gc.placeholder(gc.float32, [4, 4])
    outs = []
    for _ in range(5):
        h = gc.tanh(gc.matmul(h, w))
        outs.append(h)
    count, stats = _matmul_count(outs, [h0, w], [(2, 4), (4, 4)])
    assert count == 5 and stats["batch_gemms"]["row_batches"] == 0


# ------------------------------------------ shared_transposes: one weight read transposed
def _transposed_products(module):
    return [n for n in module.nodes if n.type == "MatMul" and n.attrs.get("transpose_b")]


def _run_without(fetches, feed_dict, monkeypatch, disabled):
    monkeypatch.setenv("GRAPHC_DISABLE_PASSES", ",".join(disabled))
    with gc.Session() as sess:
        return sess.run(fetches, feed_dict)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [[3] * 8, [1, 7, 0, 5, 2, 4, 1, 3, 6]])
def test_products_of_one_transposed_weight_read_it_transposed_once(dtype, rows,
                                                                  monkeypatch):
    k, n = 9, 6   # g_t [r, k] . w^T, w [n, k]: the backward input gradient of a recurrence
    w_val = RNG.standard_normal((n, k)).astype(dtype)
    g_vals = [RNG.standard_normal((r, k)).astype(dtype) for r in rows]
    same = len(set(rows)) == 1
    g_ph = [gc.placeholder(dtype, [None if same else r, k]) for r in rows]
    w = gc.placeholder(dtype, [n, k])
    outs = [gc.tanh(gc.matmul(g, w, transpose_b=True)) for g in g_ph]
    # batch_gemms off: it would stack these independent products into one
    off = ["batch_gemms"]
    module = lower(g_ph + [w], outs, [], [g.shape for g in g_vals] + [(n, k)])
    stats = optimize(module, disable=off)
    assert stats["shared_transposes"]["products_untransposed"] == len(rows)
    assert not _transposed_products(module)
    assert [n_.type for n_ in module.nodes].count("Transpose") == 1
    feed = dict(zip(g_ph + [w], g_vals + [w_val]))
    got = _run_without(outs, feed, monkeypatch, off)
    untransposed = _run_without(outs, feed, monkeypatch, off + ["shared_transposes"])
    for g, o, u in zip(g_vals, got, untransposed):
        assert o.dtype == dtype and o.shape == (g.shape[0], n)
        np.testing.assert_allclose(o, np.tanh(g.astype(np.float64) @ w_val.T), **TOL[dtype])
        np.testing.assert_allclose(o, u, **TOL[dtype])


def test_a_weight_read_transposed_by_few_products_is_left_alone():
    # 7 < MIN_PRODUCTS: the Transpose would cost about what their packs lose
    g = [gc.placeholder(gc.float32, [2, 8]) for _ in range(7)]
    w = gc.placeholder(gc.float32, [5, 8])
    outs = [gc.matmul(x, w, transpose_b=True) for x in g]
    module = lower(g + [w], outs, [], [(2, 8)] * 7 + [(5, 8)])
    stats = optimize(module, disable=["batch_gemms"])
    assert stats["shared_transposes"]["operands_transposed"] == 0
    assert len(_transposed_products(module)) == 7


@pytest.mark.parametrize("steps", [9, 12])
def test_static_rnn_input_gradients_read_the_weight_transposed_once(steps, monkeypatch):
    batch, width, hidden = 3, 4, 5
    gc.set_random_seed(2)  # each Session initializes the kernel to the same values
    x = gc.placeholder(gc.float64, [None, steps, width], name="x")
    cell = gc.nn.rnn_cell.BasicLSTMCell(hidden, dtype=gc.float64)
    outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float64)
    loss = gc.reduce_sum(gc.square(gc.stack(outputs, axis=1)))
    grads = gc.gradients(loss, gc.trainable_variables())  # x needs none: no dx_t products
    module = lower([x], grads, [], [(batch, steps, width)])
    stats = optimize(module)
    # dh_{t-1} = dG_t . W_h^T for every step but the first
    assert stats["shared_transposes"]["products_untransposed"] == steps - 1
    assert not _transposed_products(module)
    feed = {x: RNG.standard_normal((batch, steps, width))}

    def run(disabled):
        monkeypatch.setenv("GRAPHC_DISABLE_PASSES", disabled)
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            return sess.run(grads, feed)
    for got, want in zip(run(""), run("shared_transposes")):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rnn_with_a_weight_read_transposed_matches_finite_differences():
    rng = np.random.default_rng(11)
    steps = 9
    inputs = [rng.standard_normal((3, 4)) for _ in range(steps)] + \
             [0.5 * rng.standard_normal((4 + 8, 8))]
    check_gradients(lambda *ph: _tiny_rnn(ph[:-1], ph[-1]), inputs)


def test_team_sized_rnn_gradients_do_not_depend_on_the_thread_count(monkeypatch):
    # lstm_train's sizes: dG_t . W_h^T is [32, 1024] . [1024, 256], cut in two units
    batch, steps, width, hidden = 32, 9, 128, 256
    x = gc.placeholder(gc.float32, [batch, steps, width], name="x")
    cell = gc.nn.rnn_cell.BasicLSTMCell(hidden)
    outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)
    loss = gc.reduce_sum(gc.square(gc.stack(outputs, axis=1)))
    grads = gc.gradients(loss, gc.trainable_variables())
    feed = {x: RNG.standard_normal((batch, steps, width)).astype(np.float32)}
    kernel = (0.1 * RNG.standard_normal((width + hidden, 4 * hidden))).astype(np.float32)
    kernel_var = next(v for v in gc.trainable_variables() if "kernel" in v.name)

    def run(threads, disabled=""):
        monkeypatch.setenv("GRAPHC_DISABLE_PASSES", disabled)
        config = gc.ConfigProto(intra_op_parallelism_threads=threads)
        with gc.Session(config=config) as sess:
            sess.run(gc.global_variables_initializer())
            kernel_var.load(kernel, sess)
            return sess.run(grads, feed)
    one, two = run(1), run(2)
    for a, b, c in zip(one, two, run(2, "shared_transposes")):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)
