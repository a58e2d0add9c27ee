"""Kernels equal up to their buffers are emitted once (backends/cpu/kernel_reuse.py), and
kernels that differ in anything the code depends on (a constant, a dim, a dtype, the
variable they update) are not: each is checked against NumPy written here."""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.backends import cpu as cpu_backend
from graphc.compiler.driver import schedule_module
from graphc.compiler.backends.cpu import kernel_reuse


@pytest.fixture
def reuses(monkeypatch):
    """The KernelReuse of every generate() in the test (its .reused counts reuses)."""
    made = []
    init = kernel_reuse.KernelReuse.__init__

    def spy(self, program):
        init(self, program)
        made.append(self)
    monkeypatch.setattr(kernel_reuse.KernelReuse, "__init__", spy)
    return made


def _kernels(feeds, shapes, fetches):
    module = lower(feeds, fetches, [], shapes)
    schedule_module(module)
    cpu_backend.generate(module)
    return module.kernels


def _relu_keys(kernels):
    """Structural keys of the kernels computing a Relu (a gemm's epilogue or a loop)."""
    return [kernel_reuse.structural_key(k) for k in kernels
            if any(n.type == "Relu" for n in k.nodes)]


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_repeated_layers_are_emitted_once_and_match_numpy(reuses, dtype):
    rng = np.random.default_rng(0)
    np_dtype = dtype.as_numpy_dtype
    ws = [rng.standard_normal((5, 5)).astype(np_dtype) for _ in range(6)]
    bs = [rng.standard_normal(5).astype(np_dtype) for _ in range(6)]
    xv = rng.standard_normal((3, 5)).astype(np_dtype)
    x = gc.placeholder(dtype, [None, 5])
    h = x
    for w, b in zip(ws, bs):
        h = gc.nn.relu(gc.matmul(h, gc.Variable(w)) + gc.Variable(b))
    want = xv
    for w, b in zip(ws, bs):
        want = np.maximum(want @ w + b, 0)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(h, {x: xv})
    assert got.dtype == np_dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == gc.float32 else 1e-12)
    assert max(r.reused for r in reuses) >= 3  # the layers between the first and last


def test_kernels_differing_only_in_a_constant_are_not_merged(reuses):
    rng = np.random.default_rng(1)
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    x = gc.placeholder(gc.float64, [4, 3])
    consts = (2.0, 3.0, 0.5, -1.25)
    ws = [gc.Variable(wv) for _ in consts]  # one product each: no CSE between them
    outs = [gc.nn.relu(gc.matmul(x, w) + c) for w, c in zip(ws, consts)]
    keys = _relu_keys(_kernels([x], [(4, 3)], outs))
    assert len(keys) == 4 and len(set(keys)) == 4
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(outs, {x: xv})
    for g, c in zip(got, consts):
        np.testing.assert_allclose(g, np.maximum(xv @ wv + c, 0), rtol=1e-12)


def test_kernels_differing_only_in_a_dim_are_not_merged(reuses):
    rng = np.random.default_rng(2)
    wv = rng.standard_normal((3, 2))
    xs = [rng.standard_normal((n, 3)) for n in (4, 7, 1)]
    phs = [gc.placeholder(gc.float64, [n, 3]) for n in (4, 7, 1)]
    w = gc.Variable(wv)
    outs = [gc.nn.relu(gc.matmul(p, w) + 1.0) for p in phs]
    keys = _relu_keys(_kernels(phs, [(4, 3), (7, 3), (1, 3)], outs))
    assert len(keys) == 3 and len(set(keys)) == 3
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(outs, dict(zip(phs, xs)))
    for g, xv in zip(got, xs):
        assert g.shape == (len(xv), 2)
        np.testing.assert_allclose(g, np.maximum(xv @ wv + 1.0, 0), rtol=1e-12)


def test_kernels_differing_only_in_a_dtype_are_not_merged(reuses):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((4, 3))
    outs, phs, feeds = [], [], {}
    for dtype in (gc.float32, gc.float64):
        p = gc.placeholder(dtype, [4, 3])
        w = gc.Variable(np.full((3, 2), 0.1, dtype.as_numpy_dtype) + 1e-8)
        outs.append(gc.nn.relu(gc.matmul(p, w) + 1.0))
        phs.append(p)
        feeds[p] = xv.astype(dtype.as_numpy_dtype)
    keys = _relu_keys(_kernels(phs, [(4, 3), (4, 3)], outs))
    assert len(keys) == 2 and len(set(keys)) == 2
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got32, got64 = sess.run(outs, feeds)
    assert got32.dtype == np.float32 and got64.dtype == np.float64
    w64 = np.full((3, 2), 0.1) + 1e-8
    np.testing.assert_allclose(got64, np.maximum(xv @ w64 + 1.0, 0), rtol=1e-12)
    w32 = np.full((3, 2), 0.1, np.float32) + np.float32(1e-8)
    np.testing.assert_allclose(got32, np.maximum(xv.astype(np.float32) @ w32 + 1, 0),
                               rtol=1e-5)


def test_reused_update_kernels_update_their_own_variables(reuses):
    """SGD on same-shaped variables: one update kernel's code, each variable its own
    buffer and its own gradient."""
    rng = np.random.default_rng(4)
    inits = [rng.standard_normal((3, 4)) for _ in range(5)]
    xv = rng.standard_normal((2, 3))
    x = gc.placeholder(gc.float64, [2, 3])
    vs = [gc.Variable(v) for v in inits]
    loss = gc.add_n([gc.reduce_sum(gc.matmul(x, v) * float(k + 1)) for k, v in enumerate(vs)])
    train = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {x: xv})
        got = sess.run(vs)
    for k, (g, v0) in enumerate(zip(got, inits)):
        grad = np.tile(xv.sum(axis=0)[:, None], (1, 4)) * (k + 1)
        np.testing.assert_allclose(g, v0 - 0.5 * grad, rtol=1e-12)
    assert max(r.reused for r in reuses) >= 3


def test_canonical_attrs_tell_apart_what_lowers_differently():
    c = kernel_reuse.canonical
    assert c(0.0) != c(-0.0)
    assert c(np.float32(1)) != c(np.float64(1))
    assert c(np.zeros(3, np.float32)) != c(np.zeros(3, np.float64))
    assert c(np.zeros((2, 3))) != c(np.zeros((3, 2)))
    assert c({"a": [1, 2]}) == c({"a": [1, 2]}) != c({"a": (1, 2)})
    assert c(1) != c(1.0) and c(True) != c(1)
