"""Loops that keep stacks for their gradient with no bound on their trip count known before
they run (`while_loop(lambda c, v: reduce_sum(c) < limit, ...)` then tf.gradients), compiled
natively on the CPU: their stacks grow on the heap during the run (graphc/compiler/
regions.py). Each case runs with the While and If host kernels made to fail (no iteration
ran in Python), against values written here with NumPy and against the reference
executor, for 0, 1, 7 and 1023 trips (past several doublings of the rows), float32 and
float64, gradients against central differences in float64; the emulated GPU gives the
same numbers (its stacks grow in device buffers: tests/test_gpu_growable_stacks.py)."""

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients
from tests.native_loops import run_in_one_stage

FLOATS = [np.float32, np.float64]
TRIPS = [0, 1, 7, 1023]


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def tanh_loop(v0, w, b, limit):
    """v <- tanh(w * v + b) while the float counter c (a vector: no bound the cond gives)
    stays below `limit`: ceil(limit) trips, known only when the loop runs."""
    c0 = gc.zeros([1], dtype=v0.dtype)

    def body(c, v):
        return c + 1, gc.tanh(w * v + b)
    return gc.while_loop(lambda c, v: gc.reduce_sum(c) < limit, body, [c0, v0])[1]


def np_tanh_loop(v0, w, b, trips, r):
    """(v after `trips` iterations, d sum(v * r) / d (v0, w, b)), in v0's dtype."""
    vs = [v0]
    for _ in range(trips):
        vs.append(np.tanh(w * vs[-1] + b))
    g, gw, gb = r.copy(), np.zeros_like(w), np.zeros_like(b)
    for k in reversed(range(trips)):
        d = g * (1 - vs[k + 1] ** 2)
        gw, gb, g = gw + d * vs[k], gb + d, d * w
    return vs[-1], (g, gw, gb)


def loop_and_grads(dtype, n=5):
    v0, w, b = (gc.placeholder(dtype, [n]) for _ in range(3))
    limit = gc.placeholder(dtype, [])
    r = np.linspace(-1.0, 1.5, n).astype(dtype)
    v = tanh_loop(v0, w, b, limit)
    grads = gc.gradients(gc.reduce_sum(v * r), [v0, w, b])
    return (v0, w, b, limit), r, [v] + grads


def feeds(placeholders, dtype, trips, n=5):
    rng = np.random.default_rng(trips)
    v0, w, b, limit = placeholders
    return {v0: rng.uniform(-1, 1, n).astype(dtype), w: rng.uniform(-0.9, 0.9, n).astype(dtype),
            b: rng.uniform(-0.5, 0.5, n).astype(dtype), limit: dtype(trips)}


@pytest.mark.parametrize("dtype", FLOATS)
def test_data_dependent_trip_counts_and_gradients_natively(native, monkeypatch, dtype):
    """0, 1, 7 and 1023 trips in one Session (its stacks grown past 16, 32... 1024 rows,
    freed and grown again each run), against NumPy and the reference executor."""
    placeholders, r, fetches = loop_and_grads(dtype)
    feed_list = [feeds(placeholders, dtype, trips) for trips in TRIPS + [7]]
    got = run_in_one_stage(fetches, feed_list)
    reference = run_in_one_stage(fetches, feed_list, "reference", monkeypatch)
    for trips, feed, g_run, r_run in zip(TRIPS + [7], feed_list, got, reference):
        v0, w, b, _ = (feed[p] for p in placeholders)
        want_v, want_grads = np_tanh_loop(v0, w, b, trips, r)
        for g, want in zip(g_run, [want_v, *want_grads]):
            assert g.dtype == dtype
            np.testing.assert_allclose(g, want, **tol(dtype))
        for g, ref in zip(g_run, r_run):
            np.testing.assert_allclose(g, ref, **tol(dtype))


@pytest.mark.parametrize("trips", [1, 7, 40])
def test_gradient_against_central_differences(native, trips):
    rng = np.random.default_rng(trips)
    inputs = [rng.uniform(-1, 1, 4), rng.uniform(-0.9, 0.9, 4), rng.uniform(-0.5, 0.5, 4)]
    check_gradients(lambda v0, w, b: tanh_loop(v0, w, b, np.float64(trips)), inputs,
                    rtol=1e-6, atol=1e-9)


def test_a_gradient_of_a_loop_saving_several_stacks_of_other_shapes(native):
    """Stacks of different row sizes (a matrix product's operands, a scalar) grow
    together; the trip count is set by the data (a norm crossing a threshold)."""
    rng = np.random.default_rng(3)
    m = rng.uniform(-0.5, 0.5, (3, 3))
    h0 = rng.uniform(0.5, 1.0, (2, 3))
    h0_t, m_t = gc.placeholder(gc.float64, [2, 3]), gc.placeholder(gc.float64, [3, 3])

    def body(h, s):
        h = gc.sigmoid(gc.matmul(h, m_t)) * 1.5
        return h, s + gc.reduce_sum(h * h) * 0.01
    h, s = gc.while_loop(lambda h, s: s < 1.0, body, [h0_t, gc.constant(0.0, gc.float64)])
    loss = gc.reduce_sum(h) + s
    grads = gc.gradients(loss, [h0_t, m_t])
    (got,) = run_in_one_stage([loss] + grads, [{h0_t: h0, m_t: m}])

    def np_loss(h, m):
        s, trips = 0.0, 0
        while s < 1.0:
            h = 1.5 / (1 + np.exp(-h @ m))
            s, trips = s + np.sum(h * h) * 0.01, trips + 1
        return np.sum(h) + s, trips
    want, trips = np_loss(h0, m)
    assert trips > 16  # the stacks grew past their first rows
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    eps = 1e-6
    for x, g in ((h0, got[1]), (m, got[2])):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            x[idx] += eps
            up = np_loss(h0, m)[0]
            x[idx] -= 2 * eps
            down = np_loss(h0, m)[0]
            x[idx] += eps
            numeric[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-8)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_the_grown_stacks_are_freed_after_each_run(native):
    """200 runs of 1023 trips keeping 8 KiB a trip each (two stacks of 512 float64): a run
    that kept them would hold 16 MiB more each; the process grows by a fraction of one."""
    placeholders, _, fetches = loop_and_grads(np.float64, n=512)
    feed = feeds(placeholders, np.float64, 1023, n=512)
    with gc.Session() as sess:
        for _ in range(10):
            sess.run(fetches, feed)
        before = _rss_bytes()
        for _ in range(200):
            sess.run(fetches, feed)
        grown = _rss_bytes() - before
        assert sess.compile_count == 1
    assert grown < 16 * 2 ** 20, f"the process grew by {grown} bytes over 200 runs"


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_emulated_gpu_gives_the_same_numbers(monkeypatch, dtype):
    """The GPU target grows the forward loop's stacks in device buffers, which the
    backward loop reads (tests/test_gpu_growable_stacks.py)."""
    placeholders, _, fetches = loop_and_grads(dtype)
    feed_list = [feeds(placeholders, dtype, trips) for trips in (0, 7, 40)]
    cpu = run_in_one_stage(fetches, feed_list)
    gpu = run_in_one_stage(fetches, feed_list, "gpu_emulated", monkeypatch)
    for c_run, g_run in zip(cpu, gpu):
        for c, g in zip(c_run, g_run):
            np.testing.assert_allclose(g, c, **tol(dtype))


def test_a_loop_nested_in_a_loop_body_still_gives_its_gradient(monkeypatch):
    """An unbounded loop inside another loop's body keeps the host path (its stacks would
    outlive the body's entry that frees them): the same numbers as the reference."""
    x = gc.placeholder(gc.float64, [3])

    def outer(i, v):
        inner = gc.while_loop(lambda c, u: gc.reduce_sum(c) < 3.0,
                              lambda c, u: (c + 1, gc.sin(u) + 0.5),
                              [gc.zeros([1], gc.float64), v])[1]
        return i + 1, inner
    y = gc.while_loop(lambda i, v: i < 2, outer, [0, x])[1]
    dx = gc.gradients(gc.reduce_sum(y * y), x)[0]
    feed = [{x: np.array([0.3, -0.2, 1.1])}]
    got = run_in_one_stage([y, dx], feed)
    reference = run_in_one_stage([y, dx], feed, "reference", monkeypatch)
    u = feed[0][x]
    for _ in range(6):
        u = np.sin(u) + 0.5
    np.testing.assert_allclose(got[0][0], u, rtol=1e-13)
    for g, r in zip(got[0], reference[0]):
        np.testing.assert_allclose(g, r, rtol=1e-13)


def test_an_error_in_the_loop_after_its_stacks_grew_names_the_op_and_frees_them(native):
    """A gather past its table's 600 rows in iteration 600 (the stacks grown to 1024
    rows) fails naming the gather and the user's line; the Session then runs a loop that
    stays inside the table, and 60 failing runs keep nothing (4 MiB a stack each if they
    did)."""
    table = gc.constant(np.linspace(0.0, 1.0, 600 * 512).reshape(600, 512))
    v0 = gc.placeholder(gc.float64, [512])
    limit = gc.placeholder(gc.float64, [])

    def body(c, v):
        row = gc.gather(table, gc.cast(c[0], gc.int32))  # the line the error names
        return c + 1, gc.tanh(v * row + 0.1)
    v = gc.while_loop(lambda c, v: gc.reduce_sum(c) < limit, body,
                      [gc.zeros([1], gc.float64), v0])[1]
    dv = gc.gradients(gc.reduce_sum(v), v0)[0]
    feed = {v0: np.full(512, 0.5)}
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run([v, dv], {**feed, limit: 700.0})
        assert "GatherV2" in str(e.value) and "test_native_unbounded_stacks.py" in str(e.value)
        good = sess.run([v, dv], {**feed, limit: 19.0})
        before = _rss_bytes()
        for _ in range(60):
            with pytest.raises(gc.errors.InvalidArgumentError):
                sess.run([v, dv], {**feed, limit: 1000.0})
        grown = _rss_bytes() - before
        assert sess.compile_count == 1
    want = np.full(512, 0.5)
    rows = np.linspace(0.0, 1.0, 600 * 512).reshape(600, 512)
    for k in range(19):
        want = np.tanh(want * rows[k] + 0.1)
    np.testing.assert_allclose(good[0], want, rtol=1e-13)
    assert grown < 16 * 2 ** 20, f"the process grew by {grown} bytes over 60 failing runs"


def test_an_exported_file_grows_its_stacks_standalone(native, tmp_path):
    """The file's spec (its dims set during the run, runtime/verify.py checks them) runs
    the loop and its gradient through runtime.load alone, for trip counts it never saw."""
    import runtime
    placeholders, r, fetches = loop_and_grads(np.float64)
    names = ["v0", "w", "b", "limit"]
    path = str(tmp_path / "unbounded.gcf")
    with gc.Session() as sess:
        gc.export(sess, path, dict(zip(names, placeholders)),
                  dict(zip(["v", "dv0", "dw", "db"], fetches)))
    loaded = runtime.load(path)
    for trips in (0, 33, 300):
        feed = feeds(placeholders, np.float64, trips)
        got = loaded.run({n: feed[p] for n, p in zip(names, placeholders)})
        v0, w, b, _ = (feed[p] for p in placeholders)
        want_v, want_grads = np_tanh_loop(v0, w, b, trips, r)
        for key, want in zip(["v", "dv0", "dw", "db"], [want_v, *want_grads]):
            np.testing.assert_allclose(got[key], want, **tol(np.float64))


def test_stacks_that_leave_the_native_stage_keep_the_host_path():
    """A py_func between the loop and the gradient puts the backward loop in a later
    native stage: the stacks would be that stage's feeds, sized before the run, so the
    forward loop runs on the host; the numbers are the same."""
    x = gc.placeholder(gc.float64, [3])

    def body(c, v):
        return c + 1, gc.sin(v) * 1.2
    y = gc.while_loop(lambda c, v: gc.reduce_sum(c) < 9.0, body,
                      [gc.zeros([1], gc.float64), x])[1]
    doubled = gc.py_func(lambda a: a * 2.0, [y], gc.float64)
    doubled.set_shape([3])
    dx = gc.gradients(gc.reduce_sum(y * gc.stop_gradient(doubled)), x)[0]
    xv = np.array([0.3, 0.5, -1.0])
    with gc.Session() as sess:
        got_y, got_dx = sess.run([y, dx], {x: xv})
    v, chain = xv, np.ones(3)
    for _ in range(9):
        chain, v = chain * 1.2 * np.cos(v), np.sin(v) * 1.2
    np.testing.assert_allclose(got_y, v, rtol=1e-13)
    np.testing.assert_allclose(got_dx, 2 * v * chain, rtol=1e-12)
