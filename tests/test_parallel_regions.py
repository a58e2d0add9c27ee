"""The thread team inside native While bodies (backends/cpu/control_flow.py calls each body's
entry from the loop; its kernels are emitted as top-level ones are: gemm_team.py,
parallel.py).

A body's large GEMM runs on the team (the body's kernel function calls the team entry,
and the runtime's task counter shows one task per thread per iteration); a looped training
step (dynamic_rnn's forward and backward loops, the cell's GEMMs split across the team)
gives the same bits with 1 and 2 threads, and its loss and gradients match NumPy and
central differences in float64.
"""
import re
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc.ops import rnn
from runtime import jit
from tests.test_dynamic_rnn import np_dynamic_lstm
from tests.test_parallel import executables, left_alone, on_the_team


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    monkeypatch.delenv("GRAPHC_PARALLEL", raising=False)


def session(threads):
    return gc.Session(config=gc.ConfigProto(intra_op_parallelism_threads=threads))


# [ROWS, WIDTH] @ [WIDTH, WIDTH]: 16.8M multiply-adds (gemm_team.UNIT_MACS is 1M), and
# WIDTH columns make two of gemm_team's units, so two threads share each product
ROWS, WIDTH, TRIPS = 64, 512, 3


def tanh_loop(dtype):
    h0 = gc.placeholder(dtype, [ROWS, WIDTH])
    w = gc.placeholder(dtype, [WIDTH, WIDTH])
    n = gc.placeholder(gc.int32, [])
    _, h = gc.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w))),
                         [0, h0])
    return h, (h0, w, n)


def body_functions(llvm_ir):
    """{name: text} of the functions a While body's entry calls (control_flow.py names
    them <kernel>_body_kernel_<k>_...)."""
    out = {}
    for m in re.finditer(r'define [^@]*@"([^"]+)"\(.*?\n}\n', llvm_ir, re.S):
        if "_body_kernel_" in m.group(1):
            out[m.group(1)] = m.group(0)
    return out


def test_a_loop_bodys_gemm_runs_on_the_team():
    h, (h0, w, n) = tanh_loop(np.float32)
    rng = np.random.default_rng(0)
    hv = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    wv = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    with session(2) as sess:
        got = sess.run(h, {h0: hv, w: wv, n: TRIPS})
        (exe,) = executables(sess)
        # a BLAS team's task (gemm_team) or, [64, 512] being few rows, small_gemm's
        gemms = [name for name, text in body_functions(exe.spec["llvm_ir"]).items()
                 if "graphc_omp_parallel" in text and
                 re.search(r'\.gemm\.task|small_gemm\.[\w.]+\.task', text)]
        assert gemms, "no body kernel hands its product to the team"
        before, alone = exe.parallel_tasks, exe.team_regions_alone
        with on_the_team():
            sess.run(h, {h0: hv, w: wv, n: TRIPS})
        tasks = exe.parallel_tasks - before
        alone = exe.team_regions_alone - alone
    if jit.parallel_runtime():  # each iteration's product: one task on each of 2 threads
        assert (tasks, alone) == (2 * TRIPS, 0)
    want = hv.astype(np.float64)
    for _ in range(TRIPS):
        want = np.tanh(want @ wv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_loop_of_many_iterations_on_the_team_equals_one_thread():
    """Every iteration starts the team (no thread is created per iteration: the runtime
    keeps libgomp's), and 200 of them give the bits of a serial run."""
    h, (h0, w, n) = tanh_loop(np.float32)
    rng = np.random.default_rng(1)
    feed = {h0: rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
            w: (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
            n: 200}
    outs = []
    for threads in (1, 2):
        with session(threads) as sess:
            outs.append(sess.run(h, feed))
    np.testing.assert_array_equal(outs[1], outs[0])


# dynamic_rnn's cell: [BATCH, DEPTH + UNITS] @ [DEPTH + UNITS, 4 UNITS] is 3.1M
# multiply-adds on 2 units of columns, its weight gradient likewise
BATCH, DEPTH, UNITS, STEPS = 32, 64, 128, 5


def lstm_training(dtype):
    x = gc.placeholder(dtype, [BATCH, None, DEPTH])
    weighting = gc.placeholder(dtype, [BATCH, None, UNITS])
    cell = gc.nn.rnn_cell.BasicLSTMCell(UNITS)
    out, state = gc.nn.dynamic_rnn(cell, x, dtype=dtype)
    loss = gc.reduce_sum(out * weighting) + gc.reduce_sum(state.c * state.c)
    grads = gc.gradients(loss, cell.variables)
    # 0.5: exact in float32, the learning rate's dtype in TF1 whatever the variables'
    train = gc.train.GradientDescentOptimizer(0.5).apply_gradients(
        list(zip(grads, cell.variables)))
    return x, weighting, cell, loss, grads, train


def run_training(threads, dtype, feed_values):
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(3)
        x, weighting, cell, loss, grads, train = lstm_training(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "could not compile" fallback
            with session(threads) as sess:
                sess.run(gc.global_variables_initializer())
                w = {v.op.name.split("/")[-1]: sess.run(v) for v in cell.variables}
                feed = {x: feed_values[0], weighting: feed_values[1]}
                with on_the_team():
                    got = sess.run([loss] + grads, feed)
                    sess.run(train, feed)
                trained = sess.run(cell.variables)
                tasks = sum(exe.parallel_tasks for exe in executables(sess))
    return w, got, trained, tasks


def np_loss(w, xv, weighting):
    zeros = np.zeros((xv.shape[0], UNITS), xv.dtype)
    out, c, _ = np_dynamic_lstm(w, xv, np.full(xv.shape[0], xv.shape[1]), zeros, zeros)
    return (out * weighting).sum() + (c * c).sum()


@pytest.mark.parametrize("min_work", ["default", "0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_looped_training_step_equal_on_one_and_two_threads(monkeypatch, dtype, min_work):
    """min_work 0: the bodies' elementwise loops are split across the team too."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)  # the loop, never unrolled
    if min_work == "0":
        monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    rng = np.random.default_rng(7)
    feed = (rng.standard_normal((BATCH, STEPS, DEPTH)).astype(dtype),
            rng.standard_normal((BATCH, STEPS, UNITS)).astype(dtype))
    w1, got1, trained1, serial_tasks = run_training(1, dtype, feed)
    w2, got2, trained2, team_tasks = run_training(2, dtype, feed)
    for a, b in zip(list(w1.values()) + got1 + trained1, list(w2.values()) + got2 + trained2):
        np.testing.assert_array_equal(a, b)
    if jit.parallel_runtime():
        assert team_tasks > serial_tasks  # teams of 2 ran inside the loops
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(got1[0], np_loss(w1, *feed), **tol)
    names = [k for k in w1]
    for name, g, new in zip(names, got1[1:], trained1):
        np.testing.assert_allclose(new, w1[name] - 0.5 * g, **tol)


def test_looped_training_gradients_against_central_differences(monkeypatch):
    """float64, two threads: entries of the kernel and bias gradients against central
    differences of the NumPy LSTM."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    rng = np.random.default_rng(8)
    feed = (rng.standard_normal((BATCH, STEPS, DEPTH)),
            rng.standard_normal((BATCH, STEPS, UNITS)))
    w, got, _, _ = run_training(2, np.float64, feed)
    eps = 1e-6
    for name, grad in zip(w, got[1:]):
        for at in [tuple(rng.integers(0, s) for s in grad.shape) for _ in range(6)]:
            up, down = dict(w), dict(w)
            up[name], down[name] = w[name].copy(), w[name].copy()
            up[name][at] += eps
            down[name][at] -= eps
            numeric = (np_loss(up, *feed) - np_loss(down, *feed)) / (2 * eps)
            np.testing.assert_allclose(grad[at], numeric, rtol=1e-6, atol=1e-6)


def static_lstm_step(threads, dtype, feed_values, alone=False):
    """static_rnn's training step (batch_gemms: the input projections and the weight
    gradient as one GEMM each, the recurrent GEMMs per step, on the team); alone: every
    team region of the step run on the caller, as when no worker joins them."""
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(5)
        x = gc.placeholder(dtype, [BATCH, STEPS, DEPTH])
        weighting = gc.placeholder(dtype, [BATCH, STEPS, UNITS])
        cell = gc.nn.rnn_cell.BasicLSTMCell(UNITS)
        outs, state = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=dtype)
        loss = gc.reduce_sum(gc.stack(outs, axis=1) * weighting) + \
            gc.reduce_sum(state.c * state.c)
        grads = gc.gradients(loss, cell.variables)
        with session(threads) as sess:
            sess.run(gc.global_variables_initializer())
            w = {v.op.name.split("/")[-1]: sess.run(v) for v in cell.variables}
            feed = {x: feed_values[0], weighting: feed_values[1]}
            got = sess.run([loss] + grads, feed)
            if alone:
                with left_alone():
                    got = sess.run([loss] + grads, feed)
                assert sum(exe.team_regions_alone for exe in executables(sess)) > 0
    return w, got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_static_rnn_training_same_bits_on_one_two_threads_and_alone(dtype):
    """The LSTM of lstm_train, small: loss and gradients equal bit for bit with 1 thread,
    2 threads, and 2 threads whose regions all run alone (no worker joined); the loss
    against NumPy."""
    rng = np.random.default_rng(9)
    feed = (rng.standard_normal((BATCH, STEPS, DEPTH)).astype(dtype),
            rng.standard_normal((BATCH, STEPS, UNITS)).astype(dtype))
    w1, got1 = static_lstm_step(1, dtype, feed)
    w2, got2 = static_lstm_step(2, dtype, feed)
    runs = [got2]
    if jit.thread_team() is not None:
        runs.append(static_lstm_step(2, dtype, feed, alone=True)[1])
    for a, b in zip(list(w1.values()), list(w2.values())):
        np.testing.assert_array_equal(a, b)
    for got in runs:
        for a, b in zip(got1, got):
            np.testing.assert_array_equal(a, b)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(got1[0], np_loss(w1, *feed), **tol)
