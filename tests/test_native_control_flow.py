"""While and If compiled into the CPU's code (graphc/compiler/regions.py,
backends/cpu/control_flow.py) and, for the tests marked ON_BOTH_TARGETS, into the GPU's
kernels launched from the host (backends/gpu/control_flow.py, runtime/gpu/control_flow.py,
run on the emulated device, strict: a fallback to CPU code is an error): every case
against values written here with NumPy, with the ops' host kernels made to fail, so a pass
proves that no iteration ran in Python; trip counts 0, 1, 7 and data-dependent ones,
float32 and float64. What stays on the host (a body holding a host op, a loop variable
whose shape changes) is checked too, with the same numbers. tests/test_gpu_control_flow.py
has what only the GPU has (its copies, its PTX)."""
import importlib
import warnings

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.compiler import regions
from graphc.ops import rnn
from tests.gradcheck import check_gradients
from tests import native_loops
from tests.test_dynamic_rnn import np_dynamic_lstm

FLOATS = [np.float32, np.float64]
W = np.linspace(-0.5, 0.5, 9).reshape(3, 3)
# the reference executor runs While and If with their host kernels, which `native` fails
ON_BOTH_TARGETS = pytest.mark.backends("compiled", "gpu_emulated")


@pytest.fixture(autouse=True)
def target(backend_environment, monkeypatch):
    """The CPU's code unless the test runs on both targets; on the GPU, a kernel that
    falls back to CPU code is an error."""
    if backend_environment is None:
        monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")


def tol(dtype):
    return dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)


def session_run(fetches, feed=None, compiles=1, stages=("NativeStage",)):
    """The fetches of one run, checking how many compiles it took and the kinds of the
    stages it ran in (no "could not compile" fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            before = sess.compile_count
            out = sess.run(fetches, feed)
            assert sess.compile_count - before == compiles
            exe = list(sess._cache.values())[-1]  # this run's
            assert tuple(type(s).__name__ for s in exe.stages) == stages
    return out


def tanh_loop(dtype):
    return native_loops.tanh_loop(dtype, W)


def np_tanh_loop(xv, trips):
    return native_loops.np_tanh_loop(xv, W, trips)


# ------------------------------------------------------------------------ while_loop
@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_while_loop_over_a_run_time_trip_count(native, dtype, trips):
    x, n, i, h = tanh_loop(dtype)
    out = gc.reduce_sum(h, axis=1) * 2.0  # compiled code after the loop too
    xv = np.arange(-6, 9, dtype=dtype).reshape(5, 3) / 4
    want = np_tanh_loop(xv, trips)
    got_i, got_h, got_out = session_run([i, h, out], {x: xv, n: trips})
    assert got_i == trips and got_h.dtype == dtype
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    np.testing.assert_allclose(got_out, want.sum(1) * 2.0, **tol(dtype))


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
def test_while_loop_data_dependent_trip_count_and_batch_sizes(native, dtype):
    x = gc.placeholder(dtype, [None])
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 100.0, lambda v: v * 1.5 + 1.0, [x])
    with gc.Session() as sess:
        for xv in (np.array([1.0, 2.0], dtype), np.array([3.0, -1.0, 0.5, 2.0], dtype),
                   np.array([200.0, 1.0, 2.0], dtype), np.array([-4.0, 10.0], dtype)):
            want = xv.copy()
            while want.sum() < 100.0:
                want = want * dtype(1.5) + dtype(1.0)
            np.testing.assert_allclose(sess.run(y, {x: xv}), want, **tol(dtype))
        assert sess.compile_count == 1  # one variant for every batch size above 1


@ON_BOTH_TARGETS
def test_maximum_iterations_and_counter_natively(native):
    x = gc.placeholder(gc.float64, [2])
    i, h = gc.while_loop(lambda i, h: i < 10, lambda i, h: (i + 1, gc.sin(h) * 1.5),
                         [0, x], maximum_iterations=3)
    xv = np.array([0.4, -1.1])
    want = xv
    for _ in range(3):
        want = np.sin(want) * 1.5
    got_i, got_h = session_run([i, h], {x: xv})
    assert got_i == 3
    np.testing.assert_allclose(got_h, want, rtol=1e-14)


@ON_BOTH_TARGETS
def test_nested_loops_with_an_inner_trip_count_set_by_the_outer_loop(native):
    n = gc.placeholder(gc.int32, [])

    def outer(i, total):
        _, inner = gc.while_loop(lambda j, s: j < i,
                                 lambda j, s: (j + 1, s + gc.cast(j, gc.float64)),
                                 [0, gc.constant(0.0, gc.float64)])
        return i + 1, total + inner
    _, total = gc.while_loop(lambda i, t: i < n, outer, [0, gc.constant(0.0, gc.float64)])
    for nv in (0, 1, 7):
        want = sum(sum(range(i)) for i in range(nv))
        assert session_run(total, {n: nv}) == want


@ON_BOTH_TARGETS
def test_variable_reads_and_assigns_in_the_body_in_tf1_order(native):
    v = gc.Variable(1.0, dtype=gc.float64)
    before = v.read_value() * 1.0

    def body(i, acc):
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return i + 1, acc + v.read_value()
    _, acc = gc.while_loop(lambda i, a: i < 4, body, [0, gc.constant(0.0, gc.float64)])
    with gc.control_dependencies([acc]):
        after = v.read_value() * 1.0
    got_before, got_acc, got_after = session_run([before, acc, after])
    assert (got_before, got_acc, got_after) == (1.0, 2.0 + 3.0 + 4.0 + 5.0, 5.0)


@ON_BOTH_TARGETS
def test_loop_outputs_that_the_body_does_not_compute(native):
    """A body returning its input, a constant or a captured value as a loop variable (on
    the GPU: copies on the device)."""
    x = gc.placeholder(gc.float32, [3])
    c = gc.placeholder(gc.float32, [3])
    i, a, b, k = gc.while_loop(lambda i, a, b, k: i < 5,
                               lambda i, a, b, k: (i + 1, a, c, gc.constant([7.0, 8.0, 9.0])),
                               [0, x, x, x])
    xv, cv = np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0, 6.0], np.float32)
    got = session_run([i, a, b, k], {x: xv, c: cv})
    assert got[0] == 5
    np.testing.assert_array_equal(got[1], xv)
    np.testing.assert_array_equal(got[2], cv)
    np.testing.assert_array_equal(got[3], [7.0, 8.0, 9.0])


@ON_BOTH_TARGETS
def test_empty_loop_variables_and_branch_outputs(native):
    """Zero-size values: the loop's and branch's kernels have no scratch at all."""
    x = gc.placeholder(gc.float32, [0])
    y = gc.while_loop(lambda v: gc.reduce_sum(v) > 1.0, lambda v: v * 2.0, [x])
    z = gc.cond(gc.size(x) > 0, lambda: x + 1.0, lambda: x * 3.0)
    empty = np.zeros([0], np.float32)
    got_y, got_z = session_run([y, z], {x: empty})
    assert got_y.shape == (0,) and got_z.shape == (0,)


@ON_BOTH_TARGETS
def test_error_inside_a_native_loop_names_the_op_and_line_and_stops_it(native):
    """The failed check stops the loop at once (on the GPU its status is read with the
    predicate): the cond below would never end on the garbage a failed gather leaves."""
    table = gc.constant([1.0, 2.0, 3.0])
    n = gc.placeholder(gc.int32, [])
    _, s = gc.while_loop(lambda i, s: gc.logical_or(i < n, s > 1e30),
                         lambda i, s: (i + 1, s + gc.gather(table, i, name="lookup")),
                         [0, 0.0])
    with gc.Session() as sess:
        assert sess.run(s, {n: 3}) == 6.0
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(s, {n: 5})
        assert sess.run(s, {n: 2}) == 3.0  # the status was reset
    assert "lookup" in str(e.value) and "test_native_control_flow.py" in str(e.value)
    assert 'gc.gather(table, i, name="lookup")' in str(e.value)


def test_while_loop_gradient_runs_its_backward_loop_natively():
    """A forward loop whose cond bounds no counter (i * i < 25) grows its stacks as it
    runs (their rows are the trip count, set by the loop); the backward loop reads them,
    and both compile into one native stage."""
    x = gc.placeholder(gc.float64, [None])
    _, h = gc.while_loop(lambda i, h: i * i < 25, lambda i, h: (i + 1, gc.sin(h) * 1.5),
                         [0, x])
    grad = gc.gradients(gc.reduce_sum(h), x)[0]
    xv = np.array([0.3, -0.2, 1.1])
    want, value = np.ones_like(xv), xv.copy()
    for _ in range(5):
        want, value = want * 1.5 * np.cos(value), np.sin(value) * 1.5
    np.testing.assert_allclose(session_run(grad, {x: xv}, stages=("NativeStage",)),
                               want, rtol=1e-13)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_two_gradients_through_one_loop_and_one_cond_natively(native, dtype, trips):
    """Two tf.gradients of different losses through the same loop (and a cond in its
    body): two backward loops on the forward loop's stacks, all in the native code."""
    x = gc.placeholder(dtype, [None])
    w = gc.Variable(np.array(0.75, dtype), name="w")

    def body(i, h):
        return i + 1, gc.cond(i < 2, lambda: gc.sin(h) * w, lambda: h * h * 0.5)
    _, h = gc.while_loop(lambda i, h: i < trips, body, [0, x])
    g1 = gc.gradients(gc.reduce_sum(h), x)[0]
    g2x, g2w = gc.gradients(gc.reduce_sum(h * h), [x, w])
    xv = np.array([0.3, -0.2, 1.1, 0.0], dtype)
    hv, dx, dw = xv.astype(np.float64), np.ones(4), np.zeros(4)
    for i in range(trips):
        if i < 2:
            hv, dx, dw = np.sin(hv) * 0.75, np.cos(hv) * 0.75 * dx, \
                np.cos(hv) * 0.75 * dw + np.sin(hv)
        else:
            hv, dx, dw = hv * hv * 0.5, hv * dx, hv * dw
    got1, got2x, got2w = session_run([g1, g2x, g2w], {x: xv})
    np.testing.assert_allclose(got1, dx, **tol(dtype))
    np.testing.assert_allclose(got2x, 2 * hv * dx, **tol(dtype))
    np.testing.assert_allclose(got2w, np.sum(2 * hv * dw), **tol(dtype))


def np_tanh_loop_gradients(xv, wv, limit, stop):
    """loss = sum(h**2) after h <- tanh(h @ w + x) from h = x / 2, run min(limit, stop)
    times; (loss, d loss / d x, d loss / d w) by backpropagation written out."""
    hs = [xv * 0.5]
    for _ in range(max(min(limit, stop), 0)):
        hs.append(np.tanh(hs[-1] @ wv + xv))
    dh, dx, dw = 2 * hs[-1], np.zeros_like(xv), np.zeros_like(wv)
    for h, h_next in zip(hs[-2::-1], hs[:0:-1]):
        da = dh * (1 - h_next ** 2)
        dw, dx, dh = dw + h.T @ da, dx + da, da @ wv.T
    return (hs[-1] ** 2).sum(), dx + 0.5 * dh, dw


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("limit,stop", [(0, 9), (1, 9), (7, 9), (9, 4), (-2, 9)])
def test_while_loop_gradient_with_maximum_iterations_natively(native, dtype, limit, stop):
    """The forward loop keeps its stacks natively (on the GPU: on the device), writing row
    k in iteration k: maximum_iterations (fed) sizes them before it runs; a cond that
    stops first leaves rows the backward loop, reading them in reverse, never reads."""
    x = gc.placeholder(dtype, [None, 3])
    n = gc.placeholder(gc.int32, [])
    m = gc.placeholder(gc.int32, [])
    wv = W.astype(dtype)
    w = gc.Variable(wv)
    _, h = gc.while_loop(lambda i, h: i < m, lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [0, x * 0.5], maximum_iterations=n)
    loss = gc.reduce_sum(h * h)
    grads = gc.gradients(loss, [x, w])
    xv = np.arange(-6, 9, dtype=dtype).reshape(5, 3) / 4
    got = session_run([loss] + grads, {x: xv, n: limit, m: stop})
    for g, want in zip(got, np_tanh_loop_gradients(xv, wv, limit, stop)):
        np.testing.assert_allclose(g, want, **tol(dtype))


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_while_loop_gradient_with_a_maximum_iterations_of_a_feeds_dims(native, rows):
    """The stacks' rows are an expression of a feed's dim (negative: none) in code compiled
    once for every size."""
    x = gc.placeholder(gc.float64, [None, 3])
    wv = W
    _, h = gc.while_loop(lambda i, h: i < 100,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, wv) + x)),
                         [0, x * 0.5], maximum_iterations=gc.shape(x)[0] - 2)
    loss = gc.reduce_sum(h * h)
    xv = np.arange(-6, 3 * rows - 6, dtype=np.float64).reshape(rows, 3) / 4
    got = session_run([loss, gc.gradients(loss, x)[0]], {x: xv})
    want = np_tanh_loop_gradients(xv, wv, rows - 2, 100)
    np.testing.assert_allclose(got[0], want[0], **tol(np.float64))
    np.testing.assert_allclose(got[1], want[1], **tol(np.float64))


def test_while_loop_gradient_with_maximum_iterations_against_finite_differences(native):
    def fn(x, w):
        return gc.while_loop(lambda h: gc.reduce_sum(h) < 50.0,
                             lambda h: gc.sin(gc.matmul(h, w)) * 1.5 + x, [x],
                             maximum_iterations=gc.shape(x)[1] + 2)
    rng = np.random.default_rng(3)
    check_gradients(fn, [rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5])


# ------------------------------ gradients of loops bounded by their cond: `i < n`
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_gradient_of_a_users_counted_loop_natively(native, dtype, trips):
    """A user's `i < n` (n fed), no maximum_iterations: the cond bounds the trip count by
    n - i's first value before the loop runs, which sizes the stacks natively."""
    x = gc.placeholder(dtype, [None, 3])
    n = gc.placeholder(gc.int32, [])
    wv = W.astype(dtype)
    w = gc.Variable(wv)
    _, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)), [0, x * 0.5])
    loss = gc.reduce_sum(h * h)
    xv = np.arange(-6, 9, dtype=dtype).reshape(5, 3) / 4
    got = session_run([loss] + gc.gradients(loss, [x, w]), {x: xv, n: trips})
    for g, want in zip(got, np_tanh_loop_gradients(xv, wv, trips, trips)):
        np.testing.assert_allclose(g, want, **tol(dtype))
        assert g.dtype == dtype


@pytest.mark.parametrize("cond,start,trips", [
    (lambda i, n: i < n, 2, 5),            # from 2: n - 2 iterations
    (lambda i, n: i <= n, 0, 8),           # inclusive: n + 1
    (lambda i, n: n > i, -3, 10),          # the limit on the left
    (lambda i, n: gc.logical_and(i < n, i < 100), 0, 7),
    (lambda i, n: i < 4, 0, 4),            # a constant limit
    (lambda i, n: i < n, 9, 0)])           # starting past the limit: none
def test_gradient_of_loops_whose_cond_bounds_a_counter_natively(native, cond, start, trips):
    x = gc.placeholder(gc.float64, [2])
    n = gc.placeholder(gc.int32, [])
    _, h = gc.while_loop(lambda i, h: cond(i, n), lambda i, h: (i + 1, gc.sin(h) * 1.5),
                         [gc.constant(start), x])
    dx = gc.gradients(gc.reduce_sum(h), x)[0]
    xv = np.array([0.4, -1.1])
    want_h, want_dx = xv, np.ones(2)
    for _ in range(trips):
        want_dx, want_h = want_dx * 1.5 * np.cos(want_h), np.sin(want_h) * 1.5
    got_h, got_dx = session_run([h, dx], {x: xv, n: 7})
    np.testing.assert_allclose(got_h, want_h, rtol=1e-14)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-13)


def test_gradient_of_nested_counted_loops_natively(native):
    """An inner `j < m` loop in an outer `i < n` one: the inner loop's stacks are values
    of the outer body, which the outer loop stacks in turn."""
    n = gc.placeholder(gc.int32, [])
    m = gc.placeholder(gc.int32, [])
    x = gc.placeholder(gc.float64, [3])

    def outer(i, h):
        _, inner = gc.while_loop(lambda j, g: j < m, lambda j, g: (j + 1, gc.sin(g) + x),
                                 [0, h * 0.5])
        return i + 1, inner
    _, h = gc.while_loop(lambda i, h: i < n, outer, [0, x])
    dx = gc.gradients(gc.reduce_sum(h * h), x)[0]
    xv = np.array([0.3, -0.7, 1.2])
    for nv, mv in ((0, 2), (1, 1), (3, 2), (2, 0)):
        def f(xv):
            h = xv
            for _ in range(nv):
                h = h * 0.5
                for _ in range(mv):
                    h = np.sin(h) + xv
            return (h * h).sum()
        want = [(f(xv + e) - f(xv - e)) / 2e-6 for e in np.eye(3) * 1e-6]
        got_h, got_dx = session_run([h, dx], {n: nv, m: mv, x: xv})
        np.testing.assert_allclose((got_h * got_h).sum(), f(xv), rtol=1e-13)
        np.testing.assert_allclose(got_dx, want, rtol=1e-6, atol=1e-8)


def test_gradient_of_a_counted_loop_against_finite_differences(native):
    def fn(x, w):
        return gc.while_loop(lambda i, h: i < 4,
                             lambda i, h: (i + 1, gc.sin(gc.matmul(h, w)) * 1.5 + x),
                             [0, x])[1]
    rng = np.random.default_rng(5)
    check_gradients(fn, [rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5])


@pytest.mark.parametrize("rows", [1, 2, 6])
def test_gradient_of_a_loop_whose_cond_computes_its_limit_natively(native, rows):
    """The limit computed in the cond from values the loop does not change (a captured
    tensor's dim, a fed count less one) is known before the loop: code compiled once
    for every size of x."""
    x = gc.placeholder(gc.float64, [None, 2])
    n = gc.placeholder(gc.int32, [])
    _, h = gc.while_loop(lambda i, h: i < gc.shape(x)[0] - 1,
                         lambda i, h: (i + 1, gc.sin(h) + x[-1] * gc.cast(i, gc.float64)),
                         [0, x[0] * 2.0])
    _, g = gc.while_loop(lambda i, g: i < n - 1, lambda i, g: (i + 1, gc.cos(g) * 1.5),
                         [0, x[-1]])
    loss = gc.reduce_sum(h * g)
    xv = np.linspace(-1, 1, 2 * rows).reshape(rows, 2)

    def f(xv):
        h, g = xv[0] * 2.0, xv[-1]
        for i in range(rows - 1):
            h = np.sin(h) + xv[-1] * i
        for _ in range(2):
            g = np.cos(g) * 1.5
        return (h * g).sum()
    want = np.zeros_like(xv)
    for at in np.ndindex(xv.shape):
        e = np.zeros_like(xv)
        e[at] = 1e-6
        want[at] = (f(xv + e) - f(xv - e)) / 2e-6
    got_loss, got_dx = session_run([loss, gc.gradients(loss, x)[0]], {x: xv, n: 3},
                                   compiles=1)
    np.testing.assert_allclose(got_loss, f(xv), rtol=1e-13)
    np.testing.assert_allclose(got_dx, want, rtol=1e-6, atol=1e-8)


def test_gradient_of_a_loop_whose_limit_is_computed_at_run_time_keeps_the_host_path():
    """A limit known only once the graph runs (the longest of fed lengths) bounds no
    stacks before the loop: its forward loop runs on the host, with the same numbers."""
    x = gc.placeholder(gc.float64, [3])
    lengths = gc.placeholder(gc.int32, [None])
    _, h = gc.while_loop(lambda i, h: i < gc.reduce_max(lengths),
                         lambda i, h: (i + 1, gc.sin(h) * 1.5), [0, x])
    dx = gc.gradients(gc.reduce_sum(h), x)[0]
    xv = np.array([0.3, -0.2, 1.1])
    want_h, want_dx = xv, np.ones(3)
    for _ in range(4):
        want_dx, want_h = want_dx * 1.5 * np.cos(want_h), np.sin(want_h) * 1.5
    got_h, got_dx = session_run([h, dx], {x: xv, lengths: [2, 4, 1]})
    np.testing.assert_allclose(got_h, want_h, rtol=1e-14)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-13)


def test_a_trip_count_past_the_stacks_rows_is_an_error_naming_the_while(native, monkeypatch):
    """The native loop checks each iteration against the rows lowering sized its stacks
    by: a bound that does not hold (here a wrong one made up for lowering, as no cond
    gives one) fails naming the While and the user's line, and writes nothing past them."""
    lower = importlib.import_module("graphc.compiler.lower")  # the package's `lower` is a function
    x = gc.placeholder(gc.float64, [2])
    _, _, h = gc.while_loop(lambda i, j, h: i < 6, lambda i, j, h: (i + 1, j, gc.sin(h)),
                            [0, 2, x], name="overrun")
    dx = gc.gradients(gc.reduce_sum(h), x)[0]
    counter, limit, inclusive = lower.trip_bound(h.op)
    assert counter == 0
    wrong = {h.op: (1, limit, inclusive)}  # 6 - j's 2: rows for 4 iterations
    monkeypatch.setattr(lower, "trip_bound", lambda op: wrong.get(op) or regions.trip_bound(op))
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(dx, {x: np.array([0.1, 0.2])})
    message = str(e.value)
    assert "overrun" in message and "ran iteration 4" in message and "rows for 4" in message
    assert "test_native_control_flow.py" in message


@ON_BOTH_TARGETS
def test_export_runs_a_loop_and_a_branch_standalone(native, backend_environment, tmp_path):
    on_gpu = backend_environment == "gpu_emulated"
    x = gc.placeholder(gc.float32, [None], name="x")
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 100.0, lambda v: v * 2.0, [x])
    z = gc.cond(gc.reduce_sum(y) > 150.0, lambda: y - 1.0, lambda: y + 1.0)
    with gc.Session() as sess:
        path = gc.export(sess, str(tmp_path / "loop.graphc"), {"x": x}, {"z": z},
                         target="gpu" if on_gpu else "cpu")
    model = runtime.load(path, device="emulated" if on_gpu else None)
    for xv, want in (([1.0, 2.0, 3.0], [31.0, 63.0, 95.0]), ([60.0], [121.0]),
                     ([10.0, 20.0], [41.0, 81.0])):
        np.testing.assert_array_equal(model.run({"x": np.array(xv, np.float32)})["z"], want)


# ----------------------------------------------------------------------- TensorArray
@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_tensor_array_written_in_a_loop_of_run_time_length(native, dtype, trips):
    x = gc.placeholder(dtype, [None, 2])  # rows: the trip count
    n = gc.shape(x)[0]
    inputs = gc.TensorArray(dtype, size=n, element_shape=[2]).unstack(x)
    outputs = gc.TensorArray(dtype, size=n, element_shape=[2])

    def body(i, acc, ta):
        acc = acc * 0.5 + inputs.read(i)
        return i + 1, acc, ta.write(i, acc * 3.0)
    _, last, ta = gc.while_loop(lambda i, acc, ta: i < n, body,
                                [0, gc.zeros([2], dtype), outputs])
    stacked, size = ta.stack(), ta.size()
    xv = np.arange(2 * trips, dtype=dtype).reshape(trips, 2) - 3
    acc, want = np.zeros(2, dtype), []
    for row in xv:
        acc = acc * dtype(0.5) + row
        want.append(acc * 3)
    got_last, got_stacked, got_size = session_run([last, stacked, size], {x: xv})
    np.testing.assert_allclose(got_last, acc, **tol(dtype))
    np.testing.assert_allclose(got_stacked, np.reshape(want, (trips, 2)), **tol(dtype))
    assert got_size == trips and got_stacked.dtype == dtype


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_map_fn_scan_and_foldl(native, dtype, rows):
    x = gc.placeholder(dtype, [None, 3])
    doubled = gc.map_fn(lambda r: gc.tanh(r) * 2.0, x)
    running = gc.scan(lambda a, row: a * 0.9 + row, x, initializer=gc.zeros([3], dtype))
    total = gc.foldl(lambda a, row: a + row * row, x, initializer=gc.zeros([3], dtype))
    xv = np.linspace(-1, 1, 3 * rows).astype(dtype).reshape(rows, 3)
    want, a = [], np.zeros(3, dtype)
    for row in xv:
        a = a * dtype(0.9) + row
        want.append(a)
    got_doubled, got_running, got_total = session_run([doubled, running, total], {x: xv})
    np.testing.assert_allclose(got_doubled, np.tanh(xv) * 2, **tol(dtype))
    np.testing.assert_allclose(got_running, np.reshape(want, (rows, 3)), **tol(dtype))
    np.testing.assert_allclose(got_total, (xv * xv).sum(0), **tol(dtype))


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_map_fn_natively(native, dtype, rows):
    x = gc.placeholder(dtype, [None, 3])
    doubled, sums = gc.map_fn(lambda r: (gc.tanh(r) * 2.0, gc.reduce_sum(r * r)), x,
                              dtype=(dtype, dtype))
    xv = np.linspace(-2, 2, 3 * rows).astype(dtype).reshape(rows, 3)
    got_doubled, got_sums = session_run([doubled, sums], {x: xv})
    assert got_doubled.shape == (rows, 3) and got_sums.shape == (rows,)
    np.testing.assert_allclose(got_doubled, np.tanh(xv) * 2, **tol(dtype))
    np.testing.assert_allclose(got_sums, (xv * xv).sum(1), **tol(dtype))


# ------------------------------------------- gradients of map_fn, scan, foldl, foldr
def np_scan_gradients(xv, wv, g_out):
    """a_k = tanh(a_{k-1} * w + x_k) from a_{-1} = 0, every a_k weighted by g_out[k]:
    (the a_k, d / d x, d / d w) by backpropagation written out."""
    acc, outs = np.zeros_like(wv), []
    for row in xv:
        acc = np.tanh(acc * wv + row)
        outs.append(acc)
    dx, dw, da = np.zeros_like(xv), np.zeros_like(wv), np.zeros_like(wv)
    for k in range(len(xv) - 1, -1, -1):
        d = (da + g_out[k]) * (1 - outs[k] ** 2)
        before = outs[k - 1] if k else np.zeros_like(wv)
        dx[k], dw, da = d, dw + d * before, d * wv
    return np.reshape(outs, xv.shape), dx, dw


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_scan_gradient_natively(native, dtype, rows):
    """scan's trip count is its elements' rows (maximum_iterations, as TF1 gives it): the
    forward loop keeps its stacks natively, sized by a feed's dim."""
    x = gc.placeholder(dtype, [None, 3])
    wv = np.array([0.5, -1.25, 0.75], dtype)
    w = gc.Variable(wv)
    out = gc.scan(lambda a, row: gc.tanh(a * w + row), x, initializer=gc.zeros([3], dtype))
    g_out = np.linspace(-1, 1, 3 * rows).reshape(rows, 3).astype(dtype)
    loss = gc.reduce_sum(out * g_out)
    xv = np.linspace(-1.5, 2, 3 * rows).reshape(rows, 3).astype(dtype)
    got = session_run([out] + gc.gradients(loss, [x, w]), {x: xv})
    for g, want in zip(got, np_scan_gradients(xv, wv, g_out)):
        np.testing.assert_allclose(g, want, **tol(dtype))
        assert g.dtype == dtype


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_map_fn_and_fold_gradients_natively(native, dtype, rows):
    x = gc.placeholder(dtype, [None, 3])
    mapped = gc.map_fn(lambda r: gc.sin(r) * r, x)
    left = gc.foldl(lambda a, r: a * 0.5 + r * r, x, initializer=gc.ones([3], dtype))
    right = gc.foldr(lambda a, r: a * 0.5 + r * r, x, initializer=gc.ones([3], dtype))
    loss = gc.reduce_sum(mapped) + gc.reduce_sum(left * [1.0, 2.0, 3.0]) + \
        gc.reduce_sum(right * [-1.0, 0.5, 1.0])
    xv = np.linspace(-1.5, 2, 3 * rows).reshape(rows, 3).astype(dtype)
    got_loss, got_dx = session_run([loss, gc.gradients(loss, x)[0]], {x: xv})
    scale_left = 0.5 ** np.arange(rows - 1, -1, -1)[:, None]  # row k's weight in foldl
    want_dx = np.sin(xv) + xv * np.cos(xv) + 2 * xv * scale_left * [1.0, 2.0, 3.0] + \
        2 * xv * scale_left[::-1] * [-1.0, 0.5, 1.0]
    want_left, want_right = np.ones(3), np.ones(3)
    for row in xv.astype(np.float64):
        want_left = want_left * 0.5 + row * row
    for row in xv.astype(np.float64)[::-1]:
        want_right = want_right * 0.5 + row * row
    want_loss = (np.sin(xv) * xv).sum() + (want_left * [1, 2, 3]).sum() + \
        (want_right * [-1, 0.5, 1]).sum()
    np.testing.assert_allclose(got_loss, want_loss, **tol(dtype))
    np.testing.assert_allclose(got_dx, want_dx.astype(dtype), **tol(dtype))


def test_map_fn_scan_and_foldl_gradients_against_finite_differences(native):
    def fn(x, w):
        mapped = gc.map_fn(lambda r: gc.tanh(r * w), x)
        running = gc.scan(lambda a, r: gc.sin(a * w) + r, x)
        return mapped + running + gc.foldl(lambda a, r: a * w + r, x)
    rng = np.random.default_rng(4)
    check_gradients(fn, [rng.standard_normal((5, 3)), rng.standard_normal(3)])


def backward_bytes_per_iteration(steps):
    """Bytes that one iteration of the backward loop of a map_fn over `steps` rows writes
    (its kernels' outputs and the loop variables it copies), the rows that a kernel
    changes in its loop variable's own buffer not counted (the whole array is not
    touched then)."""
    from graphc.compiler.regions import value_bytes, written_in_place
    from graphc.compiler.driver import schedule_module
    from graphc.compiler.lower import lower
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [steps, 3])
        y = gc.map_fn(lambda r: gc.sin(r) * r, x) + \
            gc.scan(lambda a, r: a * r, x, initializer=gc.ones([3], gc.float64))
        dx = gc.gradients(gc.reduce_sum(y), x)[0]
        module = lower([x], [dx], [], [(steps, 3)])
    schedule_module(module)
    loops = [node for node in module.nodes if node.type == "While" and "grad" in node.name]
    assert len(loops) == 2 and all(node.regions for node in loops)
    total = 0
    for node in loops:
        body = node.regions["body"]
        n = node.attrs["num_loop_vars"]
        kept = {body.outputs[j] for j in written_in_place(body, n)}
        total += sum(value_bytes(v) for k in body.kernels for v in k.outputs if v not in kept)
        total += sum(value_bytes(v) for v in body.outputs[:n] if v.node.type == "Parameter")
    return total


def test_backward_tensor_array_gradients_touch_rows_not_the_whole_array():
    """The gradient of an array that a loop reads is summed into the rows read, and the
    gradient of an array it writes has the written rows zeroed, in the variable's own
    buffer: a backward iteration writes as many bytes for 4 steps as for 64 (before, it
    made a zero array of all the rows per read and copied the written array's: O(T^2))."""
    assert backward_bytes_per_iteration(64) == backward_bytes_per_iteration(4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_gradient_of_an_array_read_twice_per_iteration_natively(native, dtype, trips):
    """Two reads per step (one from the end): their gradients are summed into the
    array's rows one after the other."""
    x = gc.placeholder(dtype, [None, 2])
    n = gc.shape(x)[0]
    inputs = gc.TensorArray(dtype, size=n, element_shape=[2]).unstack(x)

    def body(i, acc):
        return i + 1, acc * inputs.read(i) + gc.sin(inputs.read(n - 1 - i))
    _, acc = gc.while_loop(lambda i, acc: i < n, body, [0, gc.ones([2], dtype)],
                           maximum_iterations=n)
    xv = np.linspace(-1, 1.5, 2 * trips).reshape(trips, 2).astype(dtype)
    got_acc, got_dx = session_run([acc, gc.gradients(gc.reduce_sum(acc), x)[0]], {x: xv})
    accs = [np.ones(2)]
    for k in range(trips):
        accs.append(accs[-1] * xv[k] + np.sin(xv[trips - 1 - k]))
    dx, da = np.zeros((trips, 2)), np.ones(2)
    for k in range(trips - 1, -1, -1):
        dx[k] += da * accs[k]
        dx[trips - 1 - k] += da * np.cos(xv[trips - 1 - k])
        da = da * xv[k]
    np.testing.assert_allclose(got_acc, accs[-1], **tol(dtype))
    np.testing.assert_allclose(got_dx, dx, **tol(dtype))


@ON_BOTH_TARGETS
def test_nested_loops_writing_tensor_arrays(native):
    """An inner loop fills a row array per outer step; the outer loop stacks the rows."""
    n = gc.placeholder(gc.int32, [])
    outer = gc.TensorArray(gc.float64, size=n, element_shape=[3])

    def outer_body(i, ta):
        row = gc.TensorArray(gc.float64, size=3, element_shape=[])
        _, row = gc.while_loop(
            lambda j, r: j < 3,
            lambda j, r: (j + 1, r.write(j, gc.cast(i * 10 + j, gc.float64))), [0, row])
        return i + 1, ta.write(i, row.stack())
    _, outer = gc.while_loop(lambda i, ta: i < n, outer_body, [0, outer])
    for nv in (0, 1, 4):
        want = np.array([[i * 10 + j for j in range(3)] for i in range(nv)],
                        np.float64).reshape(nv, 3)
        np.testing.assert_array_equal(session_run(outer.stack(), {n: nv}), want)


@ON_BOTH_TARGETS
def test_a_loop_reading_its_array_around_a_write(native):
    """Reads of the array before and after this step's write, in both orders of the
    ops: the write happens in place only where no later kernel reads the old array."""
    n = gc.placeholder(gc.int32, [])
    ta = gc.TensorArray(gc.float64, size=n + 1, element_shape=[]).write(0, 1.0)

    def body(i, ta, total):
        new = ta.write(i + 1, ta.read(i) * 2.0)
        # the old array read after the new one is made, and the new one read too
        return i + 1, new, total + ta.read(i) + new.read(i + 1) * 0.5
    _, ta, total = gc.while_loop(lambda i, ta, t: i < n, body,
                                 [0, ta, gc.constant(0.0, gc.float64)])
    for nv in (0, 1, 7):
        values = [2.0 ** k for k in range(nv + 1)]
        want_total = sum(values[k] + values[k + 1] * 0.5 for k in range(nv))
        got_values, got_total = session_run([ta.stack(), total], {n: nv})
        np.testing.assert_array_equal(got_values, values)
        assert got_total == want_total


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_array_gradients(native, dtype):
    """gather's gradient adds the rows it read (twice here), scatter's zeroes the rows
    it overwrote."""
    x = gc.placeholder(dtype, [4, 2])
    ta = gc.TensorArray(dtype, size=4, element_shape=[2]).unstack(x)
    picked = ta.gather([3, 1, 3])
    loss = gc.reduce_sum(picked * picked * gc.constant([[1.0], [2.0], [3.0]], dtype))
    g = gc.gradients(loss, x)[0]
    xv = np.arange(8, dtype=dtype).reshape(4, 2) - 2.5
    want = np.zeros_like(xv)
    for weight, row in zip((1.0, 2.0, 3.0), (3, 1, 3)):
        want[row] += 2 * weight * xv[row]
    np.testing.assert_allclose(session_run(g, {x: xv}), want, **tol(dtype))


def test_tensor_array_gradient_operands_that_do_not_fit_are_lowering_errors():
    """Both targets' gradient kernels take their operands from loops/tensor_array_grads.py,
    which names the op and the dims or dtype that do not fit."""
    from graphc.compiler.ir import Node, Value
    from graphc.compiler.loops.tensor_array_grads import (gather_grad_operands,
                                                          scatter_grad_operands)
    from graphc.compiler.loops.views import LoweringError

    def node(op_type, inputs, out):
        n = Node(7, op_type, "ta_grad", {})
        n.inputs = [Value(n, k, dtype, dims) for k, (dtype, dims) in enumerate(inputs)]
        n.outputs = [Value(n, 0, *out)]
        return n
    g, flow, rows = ("float64", (3, 2)), ("float32", ()), ("int32", (3,))
    ok = node("TensorArrayGatherGrad", [g, flow, rows], ("float64", (5, 2)))
    assert gather_grad_operands(ok)[2] is None
    for inputs, out, message in (
            ([g, flow, ("int32", (2,))], ("float64", (5, 2)), r"adds \(3, 2\) into \(5, 2\) "
                                                              r"at \(2,\) indices"),
            ([g, flow, rows, ("float64", (4, 2))], ("float64", (5, 2)), "adds"),
            ([("int32", (3, 2)), flow, rows], ("int32", (5, 2)), "sums int32 rows")):
        with pytest.raises(LoweringError, match=message) as e:
            gather_grad_operands(node("TensorArrayGatherGrad", inputs, out))
        assert "'ta_grad' (op: 'TensorArrayGatherGrad')" in str(e.value)
    assert scatter_grad_operands(node("TensorArrayScatterGrad", [g, flow, rows],
                                      ("float64", (3, 2))))[2].dims == (3, 2)
    with pytest.raises(LoweringError, match=r"takes \(4, 2\) rows of \(3, 2\)"):
        scatter_grad_operands(node("TensorArrayScatterGrad", [g, flow, rows],
                                   ("float64", (4, 2))))


def test_error_inside_a_native_branch_names_the_op_and_line(native):
    table = gc.constant([1.0, 2.0, 3.0])
    i = gc.placeholder(gc.int32, [])
    y = gc.cond(i > 0, lambda: gc.gather(table, i, name="branch_lookup"), lambda: 0.0)
    with gc.Session() as sess:
        assert sess.run(y, {i: 2}) == 3.0 and sess.run(y, {i: -4}) == 0.0
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(y, {i: 9})
    assert "branch_lookup" in str(e.value) and "test_native_control_flow.py" in str(e.value)


@ON_BOTH_TARGETS
def test_tensor_array_errors_in_a_native_loop_name_the_op_and_line(native):
    n = gc.placeholder(gc.int32, [])
    ta = gc.TensorArray(gc.float32, size=3, element_shape=[])
    _, ta = gc.while_loop(lambda i, ta: i < n,
                          lambda i, ta: (i + 1, ta.write(i // 2, 1.0, name="twice")), [0, ta])
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(ta.stack(), {n: 1}), [1.0, 0.0, 0.0])
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(ta.stack(), {n: 2})
        assert "index 0 because it has already been written" in str(e.value)
        assert "twice" in str(e.value) and "test_native_control_flow.py" in str(e.value)
        past_end = gc.TensorArray(gc.float32, size=3, element_shape=[]).write(n, 1.0)
        with pytest.raises(gc.errors.InvalidArgumentError, match="index 3 but array is not "
                                                                 "resizeable and size is: 3"):
            sess.run(past_end.stack(), {n: 3})
        with pytest.raises(gc.errors.InvalidArgumentError, match="read from index 5 but "
                                                                 "array size is: 3"):
            sess.run(past_end.read(5), {n: 0})


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", [0, 1, 7, 70])
def test_dynamic_rnn_over_a_run_time_length_natively(native, monkeypatch, dtype, steps):
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 64)  # time unknown: never unrolled
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [None, None, 3])
    lengths = gc.placeholder(gc.int32, [None])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    xv = rng.standard_normal((3, steps, 3)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {v.op.name[len("rnn/basic_lstm_cell/"):]: sess.run(v) for v in cell.variables}
        before = sess.compile_count
        got_out, got_c, got_h = sess.run([out, state.c, state.h], {x: xv, lengths: lv})
        assert sess.compile_count - before == 1
    zeros = np.zeros((3, 4), dtype)
    want_out, want_c, want_h = np_dynamic_lstm(w, xv, lv, zeros, zeros)
    loose = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else tol(dtype)
    np.testing.assert_allclose(got_out, want_out, **loose)
    np.testing.assert_allclose(got_c, want_c, **loose)
    np.testing.assert_allclose(got_h, want_h, **loose)


@ON_BOTH_TARGETS
@pytest.mark.parametrize("lengths", [None, [3, 1]])
def test_dynamic_rnn_training_gradients_against_finite_differences(native, monkeypatch,
                                                                   lengths):
    """The forward loop keeps its stacks (rows: the time steps), the backward loop reads
    them back; d/dx, d/dh0 and d/dweights against central differences."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)

    class Cell(gc.nn.rnn_cell.RNNCell):
        state_size = output_size = 2

        def __init__(self, wx, wh):
            super().__init__()
            self.wx, self.wh = wx, wh

        def call(self, inputs, state):
            h = gc.tanh(gc.matmul(inputs, self.wx) + gc.matmul(state, self.wh))
            return h, h

    def fn(x, h0, wx, wh):
        out, state = gc.nn.dynamic_rnn(Cell(wx, wh), x, initial_state=h0,
                                       sequence_length=lengths)
        return gc.concat([gc.reshape(out, [-1]), gc.reshape(state, [-1])], 0)
    rng = np.random.default_rng(7)
    check_gradients(fn, [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2)),
                         rng.standard_normal((2, 2)) * 0.6, rng.standard_normal((2, 2)) * 0.6])


def np_lstm_loss(w, xv, lv):
    """The training loss of test_dynamic_rnn_training_step_natively, in NumPy."""
    zeros = np.zeros((xv.shape[0], 4), xv.dtype)
    out, c, _ = np_dynamic_lstm(w, xv, lv, zeros, zeros)
    return (out * np.linspace(-1, 1, out.size).reshape(out.shape)).sum() + (c * c).sum()


def np_central_differences(f, arrays, name, eps=1e-6):
    """d f(arrays) / d arrays[name], float64 central differences."""
    grad = np.zeros_like(arrays[name], np.float64)
    for at in np.ndindex(grad.shape):
        moved = {k: v.astype(np.float64) for k, v in arrays.items()}
        moved[name][at] += eps
        up = f(moved)
        moved[name][at] -= 2 * eps
        grad[at] = (up - f(moved)) / (2 * eps)
    return grad


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", [0, 1, 7])
def test_dynamic_rnn_training_step_natively(native, monkeypatch, dtype, steps):
    """Forward loop (stacks sized by its maximum_iterations, the time steps), backward loop
    and the TensorArray gradients in one native stage; the gradients against central
    differences of the NumPy LSTM, and one descent step on them."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 64)  # time unknown: never unrolled
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [3, None, 3])
    lengths = gc.placeholder(gc.int32, [3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    weighting = gc.placeholder(dtype, [3, None, 4])
    loss = gc.reduce_sum(out * weighting) + gc.reduce_sum(state.c * state.c)
    grads = gc.gradients(loss, [x] + cell.variables)
    train = gc.train.GradientDescentOptimizer(0.5).apply_gradients(
        list(zip(grads[1:], cell.variables)))
    xv = rng.standard_normal((3, steps, 3)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    feed = {x: xv, lengths: lv, weighting: np.linspace(-1, 1, 12 * steps).reshape(3, steps, 4)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not compile" fallback
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            w = {v.op.name[len("rnn/basic_lstm_cell/"):]: sess.run(v) for v in cell.variables}
            before = sess.compile_count
            got = sess.run([loss] + grads, feed)
            assert sess.compile_count - before == 1  # one native stage, no host one between
            sess.run(train, feed)
            trained = sess.run(cell.variables)
    arrays = dict(w, x=xv)
    names = [v.op.name.split("/")[-1] for v in cell.variables]

    def f(a):
        return np_lstm_loss({"kernel": a["kernel"], "bias": a["bias"]}, a["x"], lv)
    loose = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0], f(arrays), **tol(dtype) if steps else {})
    for name, g in zip(["x"] + names, got[1:]):
        np.testing.assert_allclose(g, np_central_differences(f, arrays, name), **loose)
    for name, g, new in zip(names, got[2:], trained):
        np.testing.assert_allclose(new, w[name] - 0.5 * g, **tol(dtype))


# ------------------------------------------------------------------------------ cond
@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
def test_cond_runs_only_the_taken_branch_natively(native, dtype):
    x = gc.placeholder(dtype, [None, 3])
    p = gc.placeholder(gc.bool, [])
    v = gc.Variable(0.0, dtype=gc.float64)

    def then():
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return gc.exp(x) * 2.0, gc.reduce_sum(x, axis=0)

    def other():
        with gc.control_dependencies([gc.assign_add(v, 10.0)]):
            return gc.sin(x) - 1.0, gc.reduce_max(x, axis=0)
    a, b = gc.cond(p, then, other)
    xv = np.linspace(-1, 1, 12).astype(dtype).reshape(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            sess.run(v.initializer)
            before = sess.compile_count
            got_a, got_b = sess.run([a, b], {x: xv, p: True})
            np.testing.assert_allclose(got_a, np.exp(xv) * 2.0, **tol(dtype))
            np.testing.assert_allclose(got_b, xv.sum(0), **tol(dtype))
            got_a, got_b = sess.run([a, b], {x: xv, p: False})
            np.testing.assert_allclose(got_a, np.sin(xv) - 1.0, **tol(dtype))
            np.testing.assert_allclose(got_b, xv.max(0), **tol(dtype))
            assert sess.compile_count - before == 1
            assert sess.run(v) == 11.0  # each branch's assign ran once, when it was taken


@pytest.mark.parametrize("dtype", FLOATS)
def test_cond_gradient_with_saved_intermediates_natively(native, dtype):
    """The forward If outputs the taken branch's intermediates for its gradient If (zeros
    from the other branch): a training step with a cond compiles whole."""
    x = gc.placeholder(dtype, [None])
    p = gc.placeholder(gc.bool, [])
    w = gc.Variable(np.array([0.7, -1.3], dtype))
    y = gc.cond(p, lambda: gc.sin(w[0] * x) * gc.exp(w[1]), lambda: w[0] * w[0] * x)
    loss = gc.reduce_sum(y * y)
    grad = gc.gradients(loss, w)[0]
    xv = np.array([0.5, -2.0, 1.5], dtype)
    a, b = np.array([0.7, -1.3], dtype)
    want = {True: lambda: np.array([np.sum(2 * np.sin(a * xv) * np.exp(b) * np.cos(a * xv) *
                                           xv * np.exp(b)),
                                    np.sum(2 * (np.sin(a * xv) * np.exp(b)) ** 2)]),
            False: lambda: np.array([np.sum(2 * a * a * xv * 2 * a * xv), 0.0])}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            sess.run(w.initializer)
            before = sess.compile_count
            for taken in (True, False):
                np.testing.assert_allclose(sess.run(grad, {x: xv, p: taken}), want[taken](),
                                           **tol(dtype))
            assert sess.compile_count - before == 1


@ON_BOTH_TARGETS
def test_cond_gradient_takes_only_the_taken_branch(native):
    x = gc.placeholder(gc.float64, [3])
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: gc.sin(x) * x, lambda: gc.exp(x))
    g = gc.gradients(gc.reduce_sum(y), x)[0]
    xv = np.array([0.3, -1.2, 2.0])
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(g, {x: xv, p: True}),
                                   np.cos(xv) * xv + np.sin(xv), rtol=1e-13)
        np.testing.assert_allclose(sess.run(g, {x: xv, p: False}), np.exp(xv), rtol=1e-13)


@ON_BOTH_TARGETS
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_cond_inside_a_loop_and_a_loop_inside_cond(native, dtype, trips):
    n = gc.placeholder(gc.int32, [])
    x = gc.placeholder(dtype, [2])

    def body(i, h):
        return i + 1, gc.cond(gc.equal(i % 2, 0), lambda: h * 2.0, lambda: h - 1.0)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    y = gc.cond(n > 3, lambda: gc.while_loop(lambda v: gc.reduce_sum(v) < 50.0,
                                             lambda v: v + 3.0, [h]),
                lambda: h * 0.5)
    xv = np.array([1.5, -0.5], dtype)
    want = xv.copy()
    for i in range(trips):
        want = want * 2 if i % 2 == 0 else want - 1
    got_h, got_y = session_run([h, y], {n: trips, x: xv})
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    if trips > 3:
        while want.sum() < 50.0:
            want = want + 3
    else:
        want = want * 0.5
    np.testing.assert_allclose(got_y, want, **tol(dtype))


@ON_BOTH_TARGETS
def test_integer_cond_inside_a_loop_and_a_loop_inside_cond(native):
    n = gc.placeholder(gc.int32, [])

    def body(i, s):  # the Collatz step, counting its steps
        even = gc.equal(gc.floormod(s, 2), 0)
        return i + 1, gc.cond(even, lambda: s // 2, lambda: 3 * s + 1)
    steps, _ = gc.while_loop(lambda i, s: s > 1, body, [0, n])
    halved = gc.cond(n > 10, lambda: gc.while_loop(lambda v: v > 10, lambda v: v // 2, [n]),
                     lambda: n + 100)

    def collatz(v):
        k = 0
        while v > 1:
            v, k = (v // 2 if v % 2 == 0 else 3 * v + 1), k + 1
        return k

    def halve(v):
        if v <= 10:
            return v + 100
        while v > 10:
            v //= 2
        return v
    for nv in (1, 7, 27, 6, 100):
        assert session_run([steps, halved], {n: nv}) == [collatz(nv), halve(nv)]


# ------------------------------------------------------------------- kept on the host
def test_a_body_holding_a_host_op_keeps_the_host_path():
    x = gc.placeholder(gc.float64, [3])
    start = gc.tanh(x) * 2.0

    def body(v):
        doubled = gc.py_func(lambda a: a * 2.0, [v], gc.float64)
        doubled.set_shape([3])
        return doubled
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 10.0, body, [start])
    out = gc.sqrt(y * y + 1.0)
    xv = np.array([0.5, -1.0, 2.0])
    want = np.tanh(xv) * 2.0
    while want.sum() < 10.0:
        want = want * 2.0
    # the ops before and after the loop compile: two native stages around the host one
    np.testing.assert_allclose(
        session_run(out, {x: xv}, compiles=2, stages=("NativeStage", "HostStage", "NativeStage")),
        np.sqrt(want * want + 1.0), rtol=1e-14)


def test_a_fetched_loop_variable_whose_shape_invariant_is_looser_runs_on_the_host():
    """Its dims are known only once the loop has run, and the runtime sizes fetches
    before: the one compile finds so, the loop runs on the host."""
    x = gc.placeholder(gc.float32, [3])
    y = gc.while_loop(lambda v: gc.size(v) < 10, lambda v: gc.concat([v, v], 0), [x],
                      shape_invariants=[gc.TensorShape([None])])
    np.testing.assert_array_equal(session_run(y, {x: np.array([1.0, 2.0, 3.0], np.float32)},
                                              compiles=1), [1.0, 2.0, 3.0] * 4)


def test_a_loop_variable_whose_shape_invariant_is_looser_compiles_natively(native):
    """Its dim doubles each iteration, carried by the loop (regions.carried_symbol); what
    the graph reads of it after the loop runs natively too."""
    x = gc.placeholder(gc.float32, [3])
    y = gc.while_loop(lambda v: gc.size(v) < 10, lambda v: gc.concat([v, v], 0), [x],
                      shape_invariants=[gc.TensorShape([None])])
    got = session_run([gc.reduce_sum(y), gc.size(y)],
                      {x: np.array([1.0, 2.0, 3.0], np.float32)})
    assert got[0] == 24.0 and got[1] == 12


def test_a_loop_variable_growing_along_an_unknown_dim_runs_on_the_host():
    """TF1 lets a [None] loop variable change its size without a shape invariant; the
    native loop needs one buffer size, which lowering finds it does not have: that loop
    runs on the host, the ops around it natively (no fallback warning)."""
    x = gc.placeholder(gc.float32, [None])
    y = gc.while_loop(lambda v: gc.size(v) < 10, lambda v: gc.concat([v, v], 0), [x])
    out = gc.sqrt(y * y + 1.0)
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    # one compile that finds the loop cannot be native, then the one after the loop
    np.testing.assert_allclose(session_run(out, {x: xv}, compiles=2),
                               np.sqrt(np.tile(xv, 4) ** 2 + 1.0), rtol=1e-6)
