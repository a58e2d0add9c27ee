"""Shared by the tests of loops compiled natively: a small RNN loop with its NumPy
reference, and runs of a graph as one native stage."""
import warnings

import numpy as np

import graphc as gc


def tanh_loop(dtype, w, rows=None):
    """h <- tanh(h @ w + x) for n steps, from h = x / 2: an RNN cell over a small state."""
    x = gc.placeholder(dtype, [rows, w.shape[0]])
    n = gc.placeholder(gc.int32, [])
    w = gc.constant(w.astype(dtype))
    i, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [gc.constant(0), x * 0.5])
    return x, n, i, h


def np_tanh_loop(xv, w, trips):
    h = xv * 0.5
    for _ in range(trips):
        h = np.tanh(h @ w.astype(xv.dtype) + xv)
    return h


def run_in_one_stage(fetches, feed_list, backend="compiled", monkeypatch=None,
                     initialize=False, compiles=1):
    """`fetches` for each feed dict of `feed_list` in one new Session, compiled as one
    native stage (a fallback warning is an error; on the compiled backend `compiles`
    compiles, None: any, past the initializer's when `initialize`). The reference
    executor runs the host kernels of While and If (conftest's `native` lets it)."""
    if monkeypatch is not None:
        monkeypatch.setenv("GRAPHC_BACKEND", backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            if initialize:
                sess.run(gc.global_variables_initializer())
            before = sess.compile_count
            out = [sess.run(fetches, feed) for feed in feed_list]
            if backend == "compiled" and compiles is not None:
                assert sess.compile_count - before == compiles
    return out
