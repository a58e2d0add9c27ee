"""Kernels equal up to their buffers are emitted once (backends/cpu/kernel_reuse.py), and
kernels that differ in anything the code depends on (a constant, a dim, a dtype, the
variable they update) are not: each is checked against NumPy written here."""
import re

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


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_kernels_reading_stored_values_of_different_producers_share_one_function(reuses,
                                                                                 dtype):
    """A value computed by another kernel is read through its buffer alone: kernels
    differing only in its producer (a product, a column sum) are lowered once, each
    reading its own buffer (a constant producer is in the key: see the tests above)."""
    rng = np.random.default_rng(5)
    np_dtype = dtype.as_numpy_dtype
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    x = gc.placeholder(dtype, [4, 3])
    w = gc.Variable(wv.astype(np_dtype))
    product = gc.matmul(x, w)
    column_sums = gc.reduce_sum(gc.reshape(x, [4, 3, 1]) * gc.reshape(w, [1, 3, 2]), axis=1)
    outs = [gc.sin(v) * 3.0 for v in (product, column_sums)]
    keys = [kernel_reuse.structural_key(k) for k in _kernels([x], [(4, 3)], outs)
            if [n.type for n in k.nodes] == ["Sin", "Mul"]]
    assert len(keys) == 2 and keys[0] == keys[1]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(outs, {x: xv.astype(np_dtype)})
    want = xv.astype(np_dtype) @ wv.astype(np_dtype)
    rtol = 1e-5 if dtype == gc.float32 else 1e-12
    for g in got:
        assert g.dtype == np_dtype
        np.testing.assert_allclose(g, np.sin(want) * 3.0, rtol=rtol, atol=rtol)
    assert max(r.reused for r in reuses) >= 1


def test_canonical_attrs_tell_apart_what_lowers_differently():
    c = kernel_reuse.canonical
    assert c(0.0) != c(-0.0)
    assert c(np.float32(1)) != c(np.float64(1))
    assert c(np.zeros(3, np.float32)) != c(np.zeros(3, np.float64))
    assert c(np.zeros((2, 3))) != c(np.zeros((3, 2)))
    assert c({"a": [1, 2]}) == c({"a": [1, 2]}) != c({"a": (1, 2)})
    assert c(1) != c(1.0) and c(True) != c(1)


def _conv_nhwc(x, w):
    """A stride-1 SAME convolution, NHWC by HWIO, in plain NumPy."""
    kh, kw = w.shape[:2]
    pad = np.pad(x, [(0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)])
    out = np.zeros(x.shape[:3] + (w.shape[3],), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out += pad[:, i:i + x.shape[1], j:j + x.shape[2], :] @ w[i, j]
    return out


def _conv_stack(x, weights):
    h = x
    for w in weights:
        h = gc.nn.relu(gc.nn.conv2d(h, w, [1, 1, 1, 1], "SAME"))
    return h


def _conv_reuse(reuses, feeds, shapes, fetches):
    """(conv kernels, functions their calls name, conv kernels whose function was reused
    before any IR was built) of the module of `fetches`."""
    module = lower(feeds, fetches, [], shapes)
    schedule_module(module)
    llvm_ir = cpu_backend.generate(module)["llvm_ir"]
    calls = re.findall(r'call i32 @"(kernel_\d+_\w+)"\(', llvm_ir)
    convs = [k for k in module.kernels if k.kind == "conv"]
    seen = reuses[-1]._seen
    first = [getattr(seen.get(kernel_reuse.structural_key(k)), "kernel", k) for k in convs]
    return (len(convs), len({c for c in calls if "conv" in c}),
            sum(f is not k for f, k in zip(first, convs)))


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_repeated_conv_layers_share_one_function_and_match_numpy(reuses, dtype):
    """Same-shaped conv layers (each with its own weights and im2col scratch in the arena)
    are lowered once (kernel_reuse.py), not built and then merged by their text."""
    rng = np.random.default_rng(5)
    np_dtype = dtype.as_numpy_dtype
    ws = [rng.standard_normal((3, 3, 4, 4)).astype(np_dtype) * 0.5 for _ in range(4)]
    xv = rng.standard_normal((3, 6, 5, 4)).astype(np_dtype)
    x = gc.placeholder(dtype, [3, 6, 5, 4])
    out = _conv_stack(x, [gc.Variable(w) for w in ws])
    # lowered once: the IR of the layers after the first is not even built
    assert _conv_reuse(reuses, [x], [xv.shape], [out]) == (4, 1, 2)  # the first reads a feed
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(out, {x: xv})
    want = xv
    for w in ws:
        want = np.maximum(_conv_nhwc(want, w), 0)
    assert got.dtype == np_dtype
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == gc.float32 else 1e-12,
                               atol=1e-4 if dtype == gc.float32 else 1e-12)


def _numpy_stack_loss(x, ws, r):
    h = x
    for w in ws:
        h = np.maximum(_conv_nhwc(h, w), 0)
    return float((h * r).sum())


def test_reused_conv_gradients_match_finite_differences(reuses):
    """The backward convs (input and filter gradients) of same-shaped layers reuse their
    functions too, each with its own buffers: every gradient against central differences
    of a NumPy forward pass, in float64."""
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((2, 5, 4, 3))
    wvs = [rng.standard_normal((3, 3, 3, 3)) * 0.5 for _ in range(3)]
    r = rng.standard_normal((2, 5, 4, 3))
    x = gc.placeholder(gc.float64, xv.shape)
    ws = [gc.Variable(w) for w in wvs]
    loss = gc.reduce_sum(_conv_stack(x, ws) * r)
    grads = gc.gradients(loss, [x] + ws)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run(grads, {x: xv})
    assert _conv_reuse(reuses, [x], [xv.shape], grads) == (9, 3, 4)
    arrays, eps = [xv] + wvs, 1e-6
    for array, grad in zip(arrays, got):
        want = np.zeros_like(array)
        for i in np.ndindex(array.shape):
            keep = array[i]
            array[i] = keep + eps
            up = _numpy_stack_loss(arrays[0], arrays[1:], r)
            array[i] = keep - eps
            down = _numpy_stack_loss(arrays[0], arrays[1:], r)
            array[i] = keep
            want[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)


def _step_graph(x, w, split):
    """An unrolled recurrence over the steps of x [batch, steps, n], each step's row read
    through an Unpack along axis 1 (split=False) or an equal Split along axis 0 of the
    steps-major x (split=True, x [steps, batch, n])."""
    if split:
        steps, _, n = x.shape.as_list()
        rows = [gc.reshape(p, [-1, n]) for p in gc.split(x, steps, axis=0)]
    else:
        rows = gc.unstack(x, axis=1)
    h = 0.0
    for row in rows:
        h = gc.tanh(gc.matmul(row * 2.0 + 1.0, w) + 0.5 * h)
    return h


def _numpy_steps(xs, wv, split):
    rows = list(xs) if split else [xs[:, t] for t in range(xs.shape[1])]
    h = 0.0
    for row in rows:
        h = np.tanh((row * 2.0 + 1.0) @ wv + 0.5 * h)
    return h


def _lowered_kernels(reuses, feeds, shapes, fetches):
    """Kernels of the step lowered by codegen (not replayed from an equal one)."""
    kernels = _kernels(feeds, shapes, fetches)
    return len(kernels) - reuses[-1].reused


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_unrolled_steps_reading_their_row_are_lowered_once(reuses, split, dtype):
    """An unrolled RNN's step kernels differ only in which row of the stacked input they
    read: codegen lowers one and replays it with the row's pointer for the others, so
    the kernels it lowers do not grow with the steps; each step still reads its own
    row (its output against NumPy)."""
    rng = np.random.default_rng(7)
    np_dtype = dtype.as_numpy_dtype
    lowered = []
    for steps in (6, 11):
        shape = (steps, 3, 4) if split else (3, steps, 4)
        xs = rng.standard_normal(shape).astype(np_dtype)
        wv = (rng.standard_normal((4, 5)) * 0.5).astype(np_dtype)
        with gc.Graph().as_default():
            x, w = gc.placeholder(dtype, shape), gc.placeholder(dtype, (4, 5))
            h = _step_graph(x, w, split)
            lowered.append(_lowered_kernels(reuses, [x, w], [shape, (4, 5)], [h]))
            with gc.Session() as sess:
                got = sess.run(h, {x: xs, w: wv})
        tol = 1e-5 if dtype == gc.float32 else 1e-12
        np.testing.assert_allclose(got, _numpy_steps(xs.astype(np.float64),
                                                     wv.astype(np.float64), split),
                                   rtol=tol, atol=tol)
    assert lowered[0] == lowered[1], lowered


@pytest.mark.parametrize("split", [False, True])
def test_unrolled_step_gradients_reading_rows_backwards_match_finite_differences(split):
    """The backward pass reads the steps' rows in reverse (the replay moves the pointer
    back): the gradients of every row and of the weights against central differences."""
    rng = np.random.default_rng(8)
    shape = (5, 2, 3) if split else (2, 5, 3)
    arrays = [rng.standard_normal(shape), rng.standard_normal((3, 4)) * 0.5]
    r = rng.standard_normal((2, 4))

    def loss(xs, wv):
        return float((_numpy_steps(xs, wv, split) * r).sum())
    with gc.Graph().as_default():
        x, w = gc.placeholder(gc.float64, shape), gc.placeholder(gc.float64, (3, 4))
        grads = gc.gradients(gc.reduce_sum(_step_graph(x, w, split) * r), [x, w])
        with gc.Session() as sess:
            got = sess.run(grads, {x: arrays[0], w: arrays[1]})
    eps = 1e-6
    for array, grad in zip(arrays, got):
        want = np.zeros_like(array)
        for i in np.ndindex(array.shape):
            keep = array[i]
            array[i] = keep + eps
            up = loss(*arrays)
            array[i] = keep - eps
            down = loss(*arrays)
            array[i] = keep
            want[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("split", [False, True])
def test_step_kernels_keys_find_each_splits_row_stride_once(reuses, monkeypatch, split):
    """The Unpack (or Split) of an unrolled RNN's input is copied into every step's
    kernel: the keys and lowerings of a module find its row stride once, not once per
    step kernel and again per lowering (each a walk of all its outputs)."""
    strides = []
    row_stride = kernel_reuse._row_stride

    def counted(node):
        strides.append(node)
        return row_stride(node)
    monkeypatch.setattr(kernel_reuse, "_row_stride", counted)
    steps = 9
    shape = (steps, 3, 4) if split else (3, steps, 4)
    with gc.Graph().as_default():
        x, w = gc.placeholder(gc.float32, shape), gc.placeholder(gc.float32, (4, 5))
        kernels = _kernels([x, w], [shape, (4, 5)], [_step_graph(x, w, split)])
    splits = {n for k in kernels for n in k.nodes if n.type in ("Split", "Unpack")}
    assert sum(any(n in splits for n in k.nodes) for k in kernels) >= steps - 1
    assert strides and len(strides) == len(set(strides)) <= len(splits)


def test_a_row_read_whose_source_is_read_otherwise_is_not_moved(reuses):
    """Steps that read their row and another part of the stacked input (its first row, a
    strided slice in each step's kernel): moving the pointer would move that read too,
    so each step's kernel keeps its own key (and code) and reads its own row."""
    rng = np.random.default_rng(9)
    xs, wv = rng.standard_normal((3, 6, 4)), rng.standard_normal((4, 4)) * 0.5
    x, w = gc.placeholder(gc.float64, (3, 6, 4)), gc.placeholder(gc.float64, (4, 4))
    first = x[:, 0, :]
    h = gc.zeros((3, 4), gc.float64)
    for row in gc.unstack(x, axis=1):
        h = gc.tanh(gc.matmul(h, w) + row * 2.0 + first)
    steps = [k for k in _kernels([x, w], [(3, 6, 4), (4, 4)], [h])
             if any(n.type == "Unpack" for n in k.nodes)]
    assert len(steps) == 6
    assert all(not kernel_reuse.row_reads(k) for k in steps)
    assert len({kernel_reuse.structural_key(k) for k in steps}) == 6
    with gc.Session() as sess:
        got = sess.run(h, {x: xs, w: wv})
    want = np.zeros((3, 4))
    for t in range(6):
        want = np.tanh(want @ wv + xs[:, t] * 2.0 + xs[:, 0])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
