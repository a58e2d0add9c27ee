"""Loops that used to run on the host, compiled natively on the CPU (graphc/compiler/
regions.py): random ops in loop bodies (each iteration draws new numbers; a gradient
reuses the forward iteration's draws). Each case runs with the While and If host kernels
made to fail (a pass proves no iteration ran in Python), against values written here with
NumPy and against the reference executor, 0, 1 and many trips, float32 and float64,
gradients against central differences in float64; the emulated GPU gives the same
numbers."""

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.ops import rnn
from tests.native_loops import run_in_one_stage

FLOATS = [np.float32, np.float64]
TRIPS = [0, 1, 7]


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")


def tol(dtype):
    return dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)


def run_twice(fetches, feed=None, backend="compiled", monkeypatch=None):
    """Two runs of `fetches` in one new Session: the second continues the random streams."""
    return run_in_one_stage(fetches, [feed, feed], backend, monkeypatch, initialize=True)


def uniform_draws(shape, seed, runs, dtype):
    """The numbers a random_uniform op seeded `seed` gives in its first `runs` runs, drawn
    by a lone op outside any loop in a graph of its own: iteration k of a loop draws what
    run k of such an op does (TF1: each iteration draws new numbers)."""
    with gc.Graph().as_default():
        u = gc.random_uniform(shape, dtype=dtype, seed=seed)
        with gc.Session() as sess:
            return [sess.run(u) for _ in range(runs)]


# ----------------------------------------------------------------- random ops in bodies
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", TRIPS)
def test_random_uniform_in_a_while_body_draws_anew_each_iteration(native, monkeypatch,
                                                                   dtype, trips):
    x = gc.placeholder(dtype, [4])
    n = gc.placeholder(gc.int32, [])

    def body(i, h):
        return i + 1, h * 0.5 + gc.random_uniform([4], dtype=dtype, seed=3)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    xv = np.array([1.0, -2.0, 0.5, 3.0], dtype)
    draws = uniform_draws([4], 3, 2 * trips, dtype)
    want = []
    for run in range(2):  # the second run goes on where the first stopped
        value = xv.copy()
        for k in range(trips):
            value = value * dtype(0.5) + draws[run * trips + k]
        want.append(value)
    got = run_twice(h, {x: xv, n: trips})
    reference = run_twice(h, {x: xv, n: trips}, "reference", monkeypatch)
    for g, r, w in zip(got, reference, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, **tol(dtype))
        np.testing.assert_array_equal(g, r)
    if trips > 1:
        assert not np.array_equal(draws[0], draws[1])


def dropout_loop(x, n, keep, dtype):
    """h <- dropout(h) * 0.9 + h * 0.2 for n iterations."""
    def body(i, h):
        return i + 1, gc.nn.dropout(h, keep_prob=keep, seed=7) * 0.9 + h * 0.2
    return gc.while_loop(lambda i, h: i < n, body, [0, x])[1]


def np_dropout_loop(xv, trips, keep, dtype):
    """(value, d value / d x) of dropout_loop, its masks those graphc's dropout makes
    from the draws (nn_ops.dropout: kept where u < keep, scaled by 1 / keep; TF1 keeps
    where u >= 1 - keep, the same law on another stream than graphc's anyway)."""
    value, grad = xv.copy(), np.ones_like(xv)
    for u in uniform_draws(xv.shape, 7, trips, dtype):
        mask = (u < dtype(keep)).astype(dtype) / dtype(keep)
        value, grad = value * mask * dtype(0.9) + value * dtype(0.2), \
            grad * (mask * dtype(0.9) + dtype(0.2))
    return value, grad


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", TRIPS)
def test_dropout_in_a_loop_body_and_its_gradient_reuse_the_forward_mask(native, dtype,
                                                                         trips):
    """The backward loop reads each iteration's mask from the stacks the forward loop
    kept: the gradient is that of the masks the forward run drew."""
    x = gc.placeholder(dtype, [6])
    h = dropout_loop(x, trips, 0.5, dtype)
    dx = gc.gradients(gc.reduce_sum(h), x)[0]
    xv = np.linspace(-1.5, 2.0, 6).astype(dtype)
    want_h, want_dx = np_dropout_loop(xv, trips, 0.5, dtype)
    (got_h, got_dx), _ = run_twice([h, dx], {x: xv})
    np.testing.assert_allclose(got_h, want_h, **tol(dtype))
    np.testing.assert_allclose(got_dx, want_dx, **tol(dtype))


def test_dropout_loop_gradient_against_central_differences(native):
    """float64, each loss evaluated in a Session of its own (the first run of each draws
    the same masks)."""
    xv = np.linspace(-1.5, 2.0, 5)
    x = gc.placeholder(gc.float64, [5])
    loss = gc.reduce_sum(gc.sin(dropout_loop(x, 4, 0.6, np.float64)))
    dx = gc.gradients(loss, x)[0]

    def first_run(fetch, value):
        with gc.Session() as sess:
            return sess.run(fetch, {x: value})
    got = first_run(dx, xv)
    eps, numeric = 1e-6, np.zeros(5)
    for j in range(5):
        step = np.zeros(5)
        step[j] = eps
        numeric[j] = (first_run(loss, xv + step) - first_run(loss, xv - step)) / (2 * eps)
    np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8)
    assert np.any(got == 0.0) or np.all(got != 0.0)  # masks drew zeros or not: both fine


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", TRIPS)
def test_dynamic_rnn_with_dropout_in_its_cell_trains_natively(native, monkeypatch, dtype,
                                                              steps):
    """DropoutWrapper's input, state and output dropout inside dynamic_rnn's loop, with
    the loss' gradients: one native stage, the same numbers as the reference executor in
    two runs (the second draws new masks)."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)  # never unrolled: the While
    gc.set_random_seed(2)  # the same initial weights in each Session
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [3, None, 2])
    cell = gc.nn.rnn_cell.DropoutWrapper(gc.nn.rnn_cell.BasicLSTMCell(4),
                                         input_keep_prob=0.7, state_keep_prob=0.8,
                                         output_keep_prob=0.6, seed=11)
    lengths = gc.placeholder(gc.int32, [3])
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    loss = gc.reduce_sum(out * out) + gc.reduce_sum(state.h)
    grads = gc.gradients(loss, [x] + cell.variables)
    feed = {x: rng.standard_normal((3, steps, 2)).astype(dtype),
            lengths: np.array([steps, steps // 2, 0], np.int32)}
    got = run_twice([loss] + grads, feed)
    reference = run_twice([loss] + grads, feed, "reference", monkeypatch)
    for g_run, r_run in zip(got, reference):
        for g, r in zip(g_run, r_run):
            np.testing.assert_allclose(g, r, **tol(dtype))
    if steps > 1:
        assert got[0][0] != got[1][0]  # new masks each run


@pytest.mark.parametrize("dtype", FLOATS)
def test_random_ops_in_loop_bodies_on_the_emulated_gpu(monkeypatch, dtype):
    """The GPU target runs the same loop (its body's kernels launched from the host) with
    the same numbers as the CPU's code."""
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")  # a CPU fallback is an error
    x = gc.placeholder(dtype, [6])
    h = dropout_loop(x, 5, 0.5, dtype)
    h = h + gc.while_loop(lambda i, v: i < 3, lambda i, v: (
        i + 1, v + gc.random_normal([6], dtype=dtype, seed=5)), [0, x])[1]
    dx = gc.gradients(gc.reduce_sum(h * h), x)[0]
    feed = {x: np.linspace(-1.5, 2.0, 6).astype(dtype)}
    cpu = run_twice([h, dx], feed)
    gpu = run_twice([h, dx], feed, "gpu_emulated", monkeypatch)
    for c_run, g_run in zip(cpu, gpu):
        for c, g in zip(c_run, g_run):
            np.testing.assert_allclose(g, c, **tol(dtype))


def test_a_model_exported_before_any_run_draws_a_loop_bodys_numbers(native, tmp_path):
    """export stores the starting state of the random ops it compiled, a body's too: the
    loaded file draws what the Session's first run does."""
    x = gc.placeholder(gc.float64, [4])

    def body(i, h):
        return i + 1, h * 0.5 + gc.random_uniform([4], dtype=gc.float64, seed=3)
    _, h = gc.while_loop(lambda i, h: i < 3, body, [0, x])
    path = str(tmp_path / "loop.gcf")
    xv = np.array([1.0, -2.0, 0.5, 3.0])
    with gc.Session() as sess:
        gc.export(sess, path, {"x": x}, {"h": h})
        want = sess.run(h, {x: xv})
    np.testing.assert_array_equal(runtime.load(path).run({"x": xv})["h"], want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_random_ops_in_a_cond_and_a_nested_loop_inside_a_loop(native, monkeypatch, dtype):
    """Only a taken branch draws (its op's run counter moves when it runs), and an inner
    loop's op draws once per inner iteration: the reference executor's counts, in two
    runs, with the gradient through all of it."""
    x = gc.placeholder(dtype, [3])
    n = gc.placeholder(gc.int32, [])

    def inner(j, v):
        return j + 1, v + gc.random_normal([3], dtype=dtype, seed=4) * 0.1

    def body(i, h):
        h = gc.cond(i % 3 < 1, lambda: gc.nn.dropout(h, keep_prob=0.5, seed=6),
                    lambda: h * gc.random_uniform([3], 0.5, 1.5, dtype=dtype, seed=9))
        _, h = gc.while_loop(lambda j, v: j < i, inner, [0, h])
        return i + 1, gc.tanh(h)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    dx = gc.gradients(gc.reduce_sum(h * h), x)[0]
    feed = {x: np.array([0.3, -1.2, 2.0], dtype), n: 5}
    got = run_twice([h, dx], feed)
    reference = run_twice([h, dx], feed, "reference", monkeypatch)
    for g_run, r_run in zip(got, reference):
        for g, r in zip(g_run, r_run):
            np.testing.assert_allclose(g, r, **tol(dtype))
    assert not np.array_equal(got[0][0], got[1][0])


@pytest.mark.parametrize("dtype", FLOATS)
def test_map_fn_with_noise_per_element_and_its_gradient(native, dtype):
    """map_fn's loop draws one row of noise per element (iteration k: run k of the op),
    and its gradient reads them back."""
    x = gc.placeholder(dtype, [4, 3])
    y = gc.map_fn(lambda row: row * gc.random_uniform([3], dtype=dtype, seed=8), x)
    dx = gc.gradients(gc.reduce_sum(gc.sin(y)), x)[0]
    xv = np.linspace(-1.0, 1.5, 12).reshape(4, 3).astype(dtype)
    noise = np.stack(uniform_draws([3], 8, 4, dtype))
    (got_y, got_dx), _ = run_twice([y, dx], {x: xv})
    np.testing.assert_allclose(got_y, xv * noise, **tol(dtype))
    np.testing.assert_allclose(got_dx, np.cos(xv * noise) * noise, **tol(dtype))


def test_an_error_of_a_random_op_in_a_body_names_the_op_and_line(native):
    lo = gc.placeholder(gc.int32, [])

    def body(i, s):
        draw = gc.random_uniform([2], lo, 5, dtype=gc.int32, seed=1, name="bad_draw")
        return i + 1, s + gc.reduce_sum(draw)
    _, s = gc.while_loop(lambda i, s: i < 3, body, [0, 0])
    with gc.Session() as sess:
        assert 0 <= sess.run(s, {lo: 0}) <= 24
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(s, {lo: 5})
    assert "bad_draw" in str(e.value) and "test_native_growable.py" in str(e.value)
