"""Gradients of TensorArrays that a loop grows (raw_rnn's emitted outputs, any while_loop
appending to a dynamic_size array), compiled natively on the CPU: the backward loop reads
row k of the gradient of the whole array as a captured input (while_v2._while_grad) rather
than carrying it as a loop variable, whose rows (the forward trip count) are known only
once the forward loop has run. Each native case runs with the While and If host kernels
made to fail (conftest's `native`); values against NumPy written here, gradients against
central differences of that NumPy in float64 (every element for short loops, random
directions for 1023 steps), float32 and float64, trip counts 0, 1, 7 and 1023."""

import numpy as np
import pytest

import graphc as gc
from tests import native_loops
from tests.native_loops import np_raw_lstm, np_raw_lstm_gradients, run_in_one_stage
from tests.test_dynamic_rnn import weights
from tests.test_native_dynamic_tensor_arrays import appending_loop, np_appending_loop
from tests.test_native_unbounded_stacks import _rss_bytes

FLOATS = [np.float32, np.float64]
B, D, H = 3, 4, 5
# each trip count's lengths: the loop runs until every example has finished
LENGTHS = {0: [0, 0, 0], 1: [1, 0, 1], 7: [7, 3, 0], 1023: [1023, 500, 1]}
PREFIX = "raw/rnn/basic_lstm_cell/"


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")


def raw_lstm(dtype, next_input="clamped"):
    """native_loops.raw_lstm on [time, B, D] inputs of unknown time, its loss weighing the
    stack by a broadcast [B, H] value. -> ((x, lengths), cell, loss)"""
    x, lengths, cell, loss, _ = native_loops.raw_lstm(dtype, (None, B, D), H,
                                                      next_input=next_input,
                                                      broadcast_weights=True)
    return (x, lengths), cell, loss


def feed_for(x, lengths, trips, dtype, seed=4):
    xv = np.random.default_rng(seed + trips).standard_normal((trips + 1, B, D))
    return {x: xv.astype(dtype), lengths: np.array(LENGTHS[trips], np.int32)}


def central_differences(loss_of, arrays, eps=1e-6):
    """d loss_of(*arrays) / d each array, every element."""
    out = []
    for k, array in enumerate(arrays):
        numeric = np.zeros_like(array)
        for idx in np.ndindex(array.shape):
            args = [a.copy() for a in arrays]
            args[k][idx] += eps
            up = loss_of(*args)
            args[k][idx] -= 2 * eps
            numeric[idx] = (up - loss_of(*args)) / (2 * eps)
        out.append(numeric)
    return out


def check_directions(loss_of, arrays, grads, rtol, count=3, eps=1e-6):
    """The gradients' products with random directions against central differences of
    loss_of along them (a long loop's every element would take hours of NumPy)."""
    rng = np.random.default_rng(9)
    for _ in range(count):
        dirs = [rng.standard_normal(a.shape) for a in arrays]
        up = loss_of(*[a + eps * d for a, d in zip(arrays, dirs)])
        down = loss_of(*[a - eps * d for a, d in zip(arrays, dirs)])
        want = (up - down) / (2 * eps)
        got = sum(float(np.sum(g.astype(np.float64) * d)) for g, d in zip(grads, dirs))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def tol(dtype):
    # central differences in float64 are good to about 1e-7 of a loss summed over 1023 steps
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-6, atol=1e-8)


def check_raw_lstm(dtype, next_input, trip_counts, monkeypatch=None):
    """Runs raw_lstm's loss and gradients natively (one stage) for each trip count and
    checks them against NumPy; with monkeypatch, against the reference executor too."""
    (x, lengths), cell, loss = raw_lstm(dtype, next_input)
    grads = gc.gradients(loss, [x] + cell.variables)
    feeds = [feed_for(x, lengths, t, dtype) for t in trip_counts]
    got = run_in_one_stage([loss] + grads, feeds, initialize=True, compiles=None)
    if monkeypatch is not None:
        reference = run_in_one_stage([loss] + grads, feeds, "reference", monkeypatch,
                                     initialize=True)
        for g_run, r_run in zip(got, reference):
            for g, r in zip(g_run, r_run):
                np.testing.assert_allclose(g, r, **tol(dtype))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {k: v.astype(np.float64) for k, v in weights(sess, cell, PREFIX).items()}
    for trips, feed, run in zip(trip_counts, feeds, got):
        lv = feed[lengths]
        arrays = [feed[x].astype(np.float64), w["kernel"], w["bias"]]

        def loss_of(xv, kernel, bias):
            return np_raw_lstm({"kernel": kernel, "bias": bias}, xv, lv)[0]
        np.testing.assert_allclose(run[0], loss_of(*arrays), **tol(dtype))
        if trips <= 7:
            for g, numeric in zip(run[1:], np_raw_lstm_gradients(arrays[0], w, lv)):
                np.testing.assert_allclose(g, numeric, **tol(dtype))
        else:
            check_directions(loss_of, arrays, run[1:], tol(dtype)["rtol"])


# ------------------------------------------------------------------------- raw_rnn
@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_lstm_gradients_run_natively(native, dtype):
    """The forward loop, its stacks and emitted array, and the backward loop reading the
    gradient of that array, all in one native stage, for 0, 1, 7 and 1023 steps."""
    check_raw_lstm(dtype, "clamped", list(LENGTHS))


def test_raw_rnn_lstm_gradients_match_the_reference_executor(native, monkeypatch):
    check_raw_lstm(np.float64, "clamped", [0, 1, 7], monkeypatch)


@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_whose_loop_fn_reads_a_cond(native, monkeypatch, dtype):
    """loop_fn reads the next input in a tf.cond (zeros once every example has finished).
    Its gradient reads the input array's shape: made where the array is, the same in
    either branch, not saved from the branch that ran (zeros where the other one did,
    which failed the gradient's shape when every length was 0: the first step's cond
    outside the loop took the zeros)."""
    check_raw_lstm(dtype, "cond", [0, 1, 7], monkeypatch)


def test_raw_rnn_cond_gradient_with_every_length_zero_on_the_host_path():
    """Without the `native` fixture, as a user runs it: the all-zero lengths (no step)
    gave an error in the gradient of the cond's read (TensorArrayGatherGrad shapes)."""
    (x, lengths), cell, loss = raw_lstm(np.float64, "cond")
    grads = gc.gradients(loss, [x] + cell.variables)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run([loss] + grads, feed_for(x, lengths, 0, np.float64))
    assert got[0] == 0.0
    for g in got[1:]:
        np.testing.assert_array_equal(g, np.zeros_like(g))


def test_raw_rnn_training_steps_free_their_rows(native):
    """200 training steps of 1023 steps each: the forward loop's stacks, its emitted
    array and the gradient of that array (the backward loop reads it) live on the heap
    and are freed by each run (~2 MiB of rows a step); the process grows by a fraction
    of what 200 steps kept would take."""
    (x, lengths), cell, loss = raw_lstm(np.float64)
    train = gc.train.GradientDescentOptimizer(1e-4).minimize(loss)
    feed = feed_for(x, lengths, 1023, np.float64)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(10):
            sess.run(train, feed)
        compiles = sess.compile_count
        before = _rss_bytes()
        for _ in range(200):
            sess.run(train, feed)
        grown = _rss_bytes() - before
        assert sess.compile_count == compiles
        assert np.isfinite(sess.run(loss, feed))
    assert grown < 16 * 2 ** 20, f"the process grew by {grown} bytes over 200 runs"


@pytest.mark.parametrize("next_input", ["clamped", "cond"])
def test_the_emulated_gpu_gives_the_same_gradients(native, monkeypatch, next_input):
    """The GPU target runs the growing loops too (their stacks in device buffers it grows,
    tests/test_gpu_growable_stacks.py); its numbers are the CPU's."""
    (x, lengths), cell, loss = raw_lstm(np.float64, next_input)
    grads = gc.gradients(loss, [x] + cell.variables)
    feeds = [feed_for(x, lengths, t, np.float64) for t in (0, 7)]
    cpu = run_in_one_stage([loss] + grads, feeds, initialize=True, compiles=None)
    gpu = run_in_one_stage([loss] + grads, feeds, "gpu_emulated", monkeypatch,
                           initialize=True, compiles=None)
    for c_run, g_run in zip(cpu, gpu):
        for c, g in zip(c_run, g_run):
            np.testing.assert_allclose(g, c, rtol=1e-10, atol=1e-12)


# ------------------------------------------- a while_loop appending to a dynamic array
@pytest.mark.parametrize("dtype", FLOATS)
def test_the_gradient_of_an_appending_loop_runs_natively(native, dtype):
    """d sum(squares of the stacked array) / dx of a loop appending 2v each iteration
    (v <- tanh(0.9 v + 0.1) from x), its trip count a fed limit no cond bound gives."""
    (x, limit), fetches, _ = appending_loop(dtype)
    loss = gc.reduce_sum(fetches[0])
    grad = gc.gradients(loss, x)[0]
    x0 = np.array([-0.7, 0.2, 1.3], dtype)
    got = run_in_one_stage([loss, grad], [{x: x0, limit: dtype(k)} for k in LENGTHS],
                           compiles=None)

    def loss_of(xv, k):
        return np_appending_loop(xv, k)[0].sum()
    for k, (value, g) in zip(LENGTHS, got):
        x64 = x0.astype(np.float64)
        np.testing.assert_allclose(value, loss_of(x64, k), **tol(dtype))
        numeric = central_differences(lambda xv: loss_of(xv, k), [x64])[0]
        np.testing.assert_allclose(g, numeric, **tol(dtype))
