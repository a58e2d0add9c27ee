"""while_loop with loop variables whose shape changes between iterations (a looser
shape_invariants, TF1's accumulation and decoding loops: `out = concat([out, x_t], 0)` with
the invariant [None, d]), their values and their gradients. The expected values are
written here in NumPy; gradients also against central differences in float64."""
import inspect

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients

ALL_BACKENDS = pytest.mark.backends("compiled", "reference", "gpu_emulated")
D = 3


def growing(x, out0, w):
    """out <- concat([tanh(out @ w), x[i:i+1]], 0) for each row i of x: out gains a row
    per iteration (its rows: those of out0 plus the trip count)."""
    n = gc.shape(x)[0]

    def body(i, out):
        return i + 1, gc.concat([gc.tanh(gc.matmul(out, w)), gc.expand_dims(gc.gather(x, i), 0)],
                                0)
    _, out = gc.while_loop(lambda i, out: i < n, body, [0, out0],
                           shape_invariants=[gc.TensorShape([]), gc.TensorShape([None, D])])
    return out


def np_growing(x, out0, w):
    """The values of out before each iteration (NumPy), then its final value."""
    outs = [out0]
    for row in x:
        outs.append(np.concatenate([np.tanh(outs[-1] @ w), row[None]], 0))
    return outs


def np_growing_gradients(x, out0, w, g):
    """d sum(out * g) / d (x, out0, w): the loop run backward."""
    outs = np_growing(x, out0, w)
    gx, gw = np.zeros_like(x), np.zeros_like(w)
    for k in range(len(x) - 1, -1, -1):
        gx[k] = g[-1]
        y = np.tanh(outs[k] @ w)
        gz = g[:-1] * (1 - y * y)
        gw += outs[k].T @ gz
        g = gz @ w.T
    return gx, g, gw


def _inputs(trips, rows0, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((trips, D)).astype(dtype),
            rng.standard_normal((rows0, D)).astype(dtype),
            (rng.standard_normal((D, D)) * 0.5).astype(dtype))


@ALL_BACKENDS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trips", [0, 1, 7, 1023])
def test_concat_growing_loop_and_its_gradient_match_numpy(trips, dtype):
    x, out0, w = _inputs(trips, 2, dtype)
    g = np.random.default_rng(1).standard_normal((2 + trips, D)).astype(dtype)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(dtype, [None, D])
        o0 = gc.placeholder(dtype, [2, D])
        ws = gc.placeholder(dtype, [D, D])
        out = growing(xs, o0, ws)
        grads = gc.gradients(gc.reduce_sum(out * g), [xs, o0, ws])
        with gc.Session(graph=graph) as sess:
            got, *got_grads = sess.run([out] + grads, {xs: x, o0: out0, ws: w})
    x64, o64, w64 = (a.astype(np.float64) for a in (x, out0, w))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    assert got.shape == (2 + trips, D) and got.dtype == dtype
    np.testing.assert_allclose(got, np_growing(x64, o64, w64)[-1], **tol)
    for a, b in zip(got_grads, np_growing_gradients(x64, o64, w64, g.astype(np.float64))):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tol)


@ALL_BACKENDS
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_concat_growing_loop_gradient_against_central_differences(trips):
    x, out0, w = _inputs(trips, 1, np.float64, seed=trips)
    check_gradients(lambda xs, o0, ws: growing(xs, o0, ws), [x, out0, w], rtol=1e-6,
                    atol=1e-8)


@ALL_BACKENDS
def test_accumulating_loop_from_empty_with_unknown_dims():
    """The TF1 idiom: out starts empty ([0, d], d unknown until fed) and gains a row per
    step; its gradient reaches the fed rows and a scale read in the body."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4))
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, None])
        scale = gc.placeholder(gc.float64, [])
        n = gc.shape(xs)[0]

        def body(i, out):
            return i + 1, gc.concat([out * scale, gc.sin(xs[i:i + 1])], 0)
        out0 = gc.zeros(gc.stack([0, gc.shape(xs)[1]]), gc.float64)
        _, out = gc.while_loop(lambda i, out: i < n, body, [0, out0],
                               shape_invariants=[gc.TensorShape([]),
                                                 gc.TensorShape([None, None])])
        loss = gc.reduce_sum(out * out)
        gx, gs = gc.gradients(loss, [xs, scale])
        with gc.Session(graph=graph) as sess:
            got, got_gx, got_gs = sess.run([out, gx, gs], {xs: x, scale: 0.7})
    powers = 0.7 ** np.arange(len(x) - 1, -1, -1)[:, None]
    np.testing.assert_allclose(got, np.sin(x) * powers, rtol=1e-12)
    # out_T[t] = sin(x_t) s^(T-1-t): d/dx_t = 2 out_T[t] s^(T-1-t) cos(x_t)
    np.testing.assert_allclose(got_gx, 2 * got * powers * np.cos(x), rtol=1e-12)
    expo = np.arange(len(x) - 1, -1, -1)[:, None]
    np.testing.assert_allclose(got_gs, np.sum(2 * np.sin(x) ** 2 * expo * 0.7 **
                                              (2 * expo - 1)), rtol=1e-12)


@ALL_BACKENDS
@pytest.mark.parametrize("take", [True, False])
def test_growing_loop_nested_in_cond_with_its_gradient(take):
    x, out0, w = _inputs(4, 1, np.float64, seed=5)
    g = np.random.default_rng(2).standard_normal((5, D))
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        ws = gc.placeholder(gc.float64, [D, D])
        pred = gc.placeholder(gc.bool, [])
        out = gc.cond(pred, lambda: growing(xs, gc.constant(out0), ws),
                      lambda: gc.concat([gc.constant(out0), xs * 2.0], 0))
        grads = gc.gradients(gc.reduce_sum(out * g), [xs, ws])
        with gc.Session(graph=graph) as sess:
            got, gx, gw = sess.run([out] + grads, {xs: x, ws: w, pred: take})
    if take:
        np.testing.assert_allclose(got, np_growing(x, out0, w)[-1], rtol=1e-12)
        want_gx, _, want_gw = np_growing_gradients(x, out0, w, g)
        np.testing.assert_allclose(gx, want_gx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gw, want_gw, rtol=1e-10, atol=1e-12)
    else:
        np.testing.assert_allclose(got, np.concatenate([out0, 2 * x]), rtol=1e-12)
        np.testing.assert_allclose(gx, 2 * g[1:], rtol=1e-12)
        np.testing.assert_allclose(gw, np.zeros((D, D)))


@ALL_BACKENDS
def test_loop_variable_whose_rows_shrink(backend):
    """A loop variable can lose rows too: out <- out[1:] * 2 until one row is left."""
    x = np.arange(12.0).reshape(6, 2)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [6, 2])
        out = gc.while_loop(lambda out: gc.shape(out)[0] > 1, lambda out: [gc.sin(out[1:])],
                            [xs], shape_invariants=[gc.TensorShape([None, 2])])
        gx, = gc.gradients(gc.reduce_sum(out), [xs])
        with gc.Session(graph=graph) as sess:
            got, got_gx = sess.run([out, gx], {xs: x})
    want, grad = x[5:], np.ones((1, 2))
    for _ in range(5):
        grad = grad * np.cos(want)
        want = np.sin(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    expected = np.zeros_like(x)
    expected[5:] = grad
    np.testing.assert_allclose(got_gx, expected, rtol=1e-12)


def _tanh_growing_loop(xs, init, **while_kwargs):
    """The loop the error tests build: `out` grows a row of xs per iteration, its old
    rows through a Tanh (the op the errors name, on the line marked LINE)."""
    n = gc.shape(xs)[0]
    _, out = gc.while_loop(
        lambda i, out: i < n,
        lambda i, out: (i + 1, gc.concat([gc.tanh(out), xs[i:i + 1]], 0)),  # LINE
        [0, init], **while_kwargs)
    return out


def _marked_line(fn):
    """The file's number of the line of `fn` marked `# LINE`."""
    source, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(source) if "# LINE" in text)


def test_unknown_rank_gradient_error_names_the_op_and_line():
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        out = _tanh_growing_loop(xs, gc.zeros([0, D], gc.float64),
                                 shape_invariants=[gc.TensorShape([]), gc.TensorShape(None)])
        with pytest.raises(ValueError) as info:
            gc.gradients(gc.reduce_sum(out), [xs])
    line = _marked_line(_tanh_growing_loop)
    assert "'Tanh'" in str(info.value) and str(line) in str(info.value)


@pytest.mark.backends("compiled", "reference")
def test_shape_change_the_invariants_hide_is_an_error_naming_the_op_and_line():
    """A loop variable entering with an unknown dim (its invariant, [None, d], its
    entering shape) that the body grows: the shape change shows only when the loop runs,
    and the message says how to allow for it."""
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        out = _tanh_growing_loop(xs, xs[:1])
        gx, = gc.gradients(gc.reduce_sum(out), [xs])
        with gc.Session(graph=graph) as sess:
            with pytest.raises(gc.errors.UnimplementedError) as info:
                sess.run(gx, {xs: np.ones((3, D))})
    line = _marked_line(_tanh_growing_loop)
    assert "'Tanh'" in str(info.value) and f", {line}," in str(info.value)
    assert "shape_invariants" in str(info.value)


# ------------------------------------------------------------------- native CPU code
def _run_growing(trips, dtype, rows0=2, seed=0):
    """(sum(out * out), sum(out, 0), shape(out)) of `growing`, fetched: values of fixed
    shape (out itself, sized only during the run, is no fetch of native code)."""
    x, out0, w = _inputs(trips, rows0, dtype, seed)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(dtype, [None, D])
        ws = gc.placeholder(dtype, [D, D])
        out = growing(xs, gc.constant(out0), ws)
        fetches = [gc.reduce_sum(out * out), gc.reduce_sum(out, 0), gc.shape(out)]
        with gc.Session(graph=graph) as sess:
            got = sess.run(fetches, {xs: x, ws: w})
    want = np_growing(*(a.astype(np.float64) for a in (x, out0, w)))[-1]
    return got, want


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trips", [0, 1, 7, 1023])
def test_concat_growing_loop_compiles_natively(native, trips, dtype):
    (sq, col, shape), want = _run_growing(trips, dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11)
    assert sq.dtype == dtype and col.dtype == dtype
    np.testing.assert_allclose(sq, (want * want).sum(), **tol)
    np.testing.assert_allclose(col, want.sum(0), **tol)
    np.testing.assert_array_equal(shape, [2 + trips, D])


@pytest.mark.backends("compiled")
def test_loop_growing_along_its_second_axis_with_unknown_dims_compiles_natively(native):
    """TF1's decoding loop: ids [batch, 0] gains a column per step (invariant [batch,
    None]), its batch and step count fed."""
    rng = np.random.default_rng(4)
    for batch, steps in ((3, 5), (2, 0), (4, 1)):
        table = rng.integers(0, 9, size=(steps, batch)).astype(np.int32)
        graph = gc.Graph()
        with graph.as_default():
            tokens = gc.placeholder(gc.int32, [None, None])
            b = gc.shape(tokens)[1]

            def body(t, ids):
                step = gc.expand_dims(gc.gather(tokens, t), 1) + gc.reduce_max(ids, 1,
                                                                               keepdims=True)
                return t + 1, gc.concat([ids, step], 1)
            ids0 = gc.zeros(gc.stack([b, 1]), gc.int32)
            _, ids = gc.while_loop(lambda t, ids: t < gc.shape(tokens)[0], body, [0, ids0],
                                   shape_invariants=[gc.TensorShape([]),
                                                     gc.TensorShape([None, None])])
            fetches = [gc.reduce_sum(ids, 1), gc.reduce_max(ids, 1), gc.shape(ids)]
            with gc.Session(graph=graph) as sess:
                total, top, shape = sess.run(fetches, {tokens: table})
        want = np.zeros((batch, 1), np.int64)
        for row in table:
            want = np.concatenate([want, (row + want.max(1))[:, None]], 1)
        np.testing.assert_array_equal(total, want.sum(1))
        np.testing.assert_array_equal(top, want.max(1))
        np.testing.assert_array_equal(shape, [batch, steps + 1])


@ALL_BACKENDS
def test_fetching_the_grown_loop_variable_itself():
    """The runtime sizes fetches before the run, so a fetched loop variable whose dims
    changed comes from the loop run on the host (the rest stays native): the same
    values."""
    x, out0, w = _inputs(9, 1, np.float64, seed=8)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        out = growing(xs, gc.constant(out0), gc.constant(w))
        with gc.Session(graph=graph) as sess:
            got, total = sess.run([out, gc.reduce_sum(out)], {xs: x})
    want = np_growing(x, out0, w)[-1]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(total, want.sum(), rtol=1e-12)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _gathered_rows_loop(xs, old_rows, offset=0):
    """A native growing loop: `out` (from no rows) grows by row i + offset of xs each
    iteration (gather, not a slice: its dims do not depend on data), after its old rows
    go through `old_rows`. Row i + 1 is past xs's last in the last iteration."""
    n = gc.shape(xs)[0]

    def body(i, out):
        row = gc.gather(xs, i + offset)  # LINE: the row read
        return i + 1, gc.concat([old_rows(out), gc.expand_dims(row, 0)], 0)
    units = xs.shape[1]
    _, out = gc.while_loop(lambda i, out: i < n, body, [0, gc.zeros([0, units], gc.float64)],
                           shape_invariants=[gc.TensorShape([]), gc.TensorShape([None, units])])
    return out


def _growth_over_runs(sess, fetch, feed, runs=200, warm=10):
    """(the last run's value, the process's RSS growth in bytes over `runs` runs after
    `warm` runs)."""
    for _ in range(warm):
        sess.run(fetch, feed)
    before = _rss_bytes()
    for _ in range(runs):
        got = sess.run(fetch, feed)
    return got, _rss_bytes() - before


@pytest.mark.backends("compiled")
def test_native_growing_loop_frees_its_buffers(native):
    """Each run grows out to 300 x 256 float64 (600 kB, and the body's values of its
    size): 200 runs leaking them would hold more than 100 MB."""
    units, trips = 256, 300
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, units])
        total = gc.reduce_sum(_gathered_rows_loop(xs, lambda out: out * 0.5))
        with gc.Session(graph=graph) as sess:
            got, growth = _growth_over_runs(sess, total, {xs: np.ones((trips, units))})
    np.testing.assert_allclose(got, units * (2 - 0.5 ** (trips - 1)), rtol=1e-12)
    assert growth < 30 * 2 ** 20, f"RSS grew by {growth / 2 ** 20:.1f} MiB"


@pytest.mark.backends("compiled")
def test_error_in_a_native_growing_loop_names_the_op_and_line(native):
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        out = _gathered_rows_loop(xs, lambda out: out, offset=1)
        with gc.Session(graph=graph) as sess:
            with pytest.raises(gc.errors.InvalidArgumentError) as info:
                sess.run(gc.reduce_sum(out), {xs: np.ones((4, D))})
    line = _marked_line(_gathered_rows_loop)
    assert "GatherV2" in str(info.value) and f"line {line}" in str(info.value)


@pytest.mark.backends("compiled", "reference")
def test_growing_loop_whose_rows_come_from_data_dependent_slices():
    """x[i:i + 1] has dims native code cannot know before the body runs: the loop runs
    on the host, its values right."""
    x = np.random.default_rng(6).standard_normal((6, D))
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        n = gc.shape(xs)[0]
        _, out = gc.while_loop(
            lambda i, out: i < n, lambda i, out: (i + 1, gc.concat([out * 2.0, xs[i:i + 1]], 0)),
            [0, gc.zeros([0, D], gc.float64)],
            shape_invariants=[gc.TensorShape([]), gc.TensorShape([None, D])])
        with gc.Session(graph=graph) as sess:
            got = sess.run(gc.reduce_sum(out, 0), {xs: x})
    np.testing.assert_allclose(got, (x * 2.0 ** np.arange(5, -1, -1)[:, None]).sum(0),
                               rtol=1e-12)


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("rows", [0, 1, 6])
def test_loop_shrinking_its_rows_compiles_natively(native, rows):
    """out <- sin(out[1:]) * 2 + out[:-1] ... until one row is left: slices of a carried
    dim have sizes that need no guard (max(rows - 1, 0) whatever rows is)."""
    x = np.arange(rows * 2.0).reshape(rows, 2) / 7
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, 2])
        out = gc.while_loop(lambda out: gc.shape(out)[0] > 1,
                            lambda out: [gc.sin(out[1:]) * 2.0 + out[:-1]], [xs],
                            shape_invariants=[gc.TensorShape([None, 2])])
        with gc.Session(graph=graph) as sess:
            total, shape = sess.run([gc.reduce_sum(out, 0), gc.shape(out)], {xs: x})
    want = x
    while len(want) > 1:
        want = np.sin(want[1:]) * 2.0 + want[:-1]
    np.testing.assert_allclose(total, want.sum(0), rtol=1e-12)
    np.testing.assert_array_equal(shape, want.shape)


def test_exported_growing_loop_runs_in_the_standalone_runtime(tmp_path, monkeypatch):
    """gc.export of the native loop: the file's syms hold the carried dims (run dims the
    runtime only allocates slots for), each trip count gives the NumPy values."""
    import runtime
    from graphc.export import export
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    _, out0, w = _inputs(1, 2, np.float64)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        out = growing(xs, gc.constant(out0), gc.constant(w))
        sess = gc.Session(graph=graph)
        path = export(sess, str(tmp_path / "growing.gcx"), {"x": xs},
                      {"col": gc.reduce_sum(out, 0), "rows": gc.shape(out)[0]})
    loaded = runtime.load(path)
    for trips in (0, 1, 7, 40):
        x = _inputs(trips, 2, np.float64, seed=trips)[0]
        got = loaded.run({"x": x})
        want = np_growing(x, out0, w)[-1]
        np.testing.assert_allclose(got["col"], want.sum(0), rtol=1e-11)
        assert got["rows"] == 2 + trips


# ------------------------------------------------- gradients in native CPU code
def _square_loss_gradients(trips, dtype, rows0=2, seed=0):
    """(d sum(out * out) / d (x, out0, w), sum(out * out)) of `growing`, fetched, and the
    NumPy values: the backward loop reads each iteration's values of a shape that grows
    (ragged stacks)."""
    x, out0, w = _inputs(trips, rows0, dtype, seed)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(dtype, [None, D])
        o0 = gc.placeholder(dtype, [rows0, D])
        ws = gc.placeholder(dtype, [D, D])
        loss = gc.reduce_sum(gc.square(growing(xs, o0, ws)))
        with gc.Session(graph=graph) as sess:
            got = sess.run(gc.gradients(loss, [xs, o0, ws]) + [loss], {xs: x, o0: out0, ws: w})
    x64, o64, w64 = (a.astype(np.float64) for a in (x, out0, w))
    final = np_growing(x64, o64, w64)[-1]
    return got, list(np_growing_gradients(x64, o64, w64, 2 * final)) + [np.sum(final ** 2)]


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trips", [0, 1, 7, 1023])
def test_gradient_of_a_growing_loop_compiles_natively(native, trips, dtype):
    got, want = _square_loss_gradients(trips, dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for a, b in zip(got, want):
        assert a.dtype == dtype and np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_native_growing_loop_gradient_against_central_differences(native, trips):
    x, out0, w = _inputs(trips, 1, np.float64, seed=trips)

    def loss(xs, o0, ws):  # a scalar: its weighting needs no fetch of out's dims
        out = growing(xs, o0, ws)
        return gc.reduce_sum(gc.tanh(out) * out)
    check_gradients(loss, [x, out0, w], rtol=1e-6, atol=1e-8)


@pytest.mark.backends("compiled")
def test_accumulating_loop_gradient_with_unknown_dims_compiles_natively(native):
    """out starts [0, d] (d fed) and gains a row per step scaled by a fed scale: the
    gradient loop's dims are those of the fed rows and steps, none known when built."""
    rng = np.random.default_rng(3)
    for rows, cols in ((5, 4), (2, 7), (1, 3)):
        x = rng.standard_normal((rows, cols))
        graph = gc.Graph()
        with graph.as_default():
            xs = gc.placeholder(gc.float64, [None, None])
            scale = gc.placeholder(gc.float64, [])

            def body(i, out):
                row = gc.expand_dims(gc.sin(gc.gather(xs, i)), 0)
                return i + 1, gc.concat([out * scale, row], 0)
            out0 = gc.zeros(gc.stack([0, gc.shape(xs)[1]]), gc.float64)
            _, out = gc.while_loop(lambda i, out: i < gc.shape(xs)[0], body, [0, out0],
                                   shape_invariants=[gc.TensorShape([]),
                                                     gc.TensorShape([None, None])])
            loss = gc.reduce_sum(out * out)
            gx, gs = gc.gradients(loss, [xs, scale])
            with gc.Session(graph=graph) as sess:
                got_loss, got_gx, got_gs = sess.run([loss, gx, gs], {xs: x, scale: 0.7})
        expo = np.arange(rows - 1, -1, -1)[:, None]
        want = np.sin(x) * 0.7 ** expo
        np.testing.assert_allclose(got_loss, np.sum(want ** 2), rtol=1e-12)
        np.testing.assert_allclose(got_gx, 2 * want * 0.7 ** expo * np.cos(x), rtol=1e-12)
        np.testing.assert_allclose(got_gs, np.sum(2 * np.sin(x) ** 2 * expo *
                                                  0.7 ** np.maximum(2 * expo - 1, 0)),
                                   rtol=1e-12)


@pytest.mark.backends("compiled")
def test_native_growing_loop_gradient_frees_its_buffers(native):
    """Each run keeps out's 300 values (up to 300 x 64 float64: 23 MB in all) for the
    gradient: 200 runs leaking them would hold gigabytes."""
    units, trips = 64, 300
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, units])
        gx, = gc.gradients(gc.reduce_sum(_gathered_rows_loop(xs, gc.tanh)), [xs])
        with gc.Session(graph=graph) as sess:
            got, growth = _growth_over_runs(sess, gx, {xs: np.full((trips, units), 0.01)})
    # the last row enters out last: d sum(out) / d x[-1] = 1
    np.testing.assert_allclose(got[-1], np.ones(units), rtol=1e-12)
    assert growth < 30 * 2 ** 20, f"RSS grew by {growth / 2 ** 20:.1f} MiB"


@pytest.mark.backends("compiled")
def test_error_in_a_native_growing_loop_under_a_gradient_names_the_op_and_line(native):
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        gx, = gc.gradients(gc.reduce_sum(_gathered_rows_loop(xs, gc.tanh, offset=1)), [xs])
        with gc.Session(graph=graph) as sess:
            with pytest.raises(gc.errors.InvalidArgumentError) as info:
                sess.run(gx, {xs: np.ones((4, D))})
    line = _marked_line(_gathered_rows_loop)
    assert "GatherV2" in str(info.value) and f"line {line}" in str(info.value)


def test_exported_growing_loop_gradient_runs_in_the_standalone_runtime(tmp_path, monkeypatch):
    """gc.export of the forward and backward loops: the runtime alone gives the NumPy
    gradients for each trip count (the ragged stacks' sizes set during the run)."""
    import runtime
    from graphc.export import export
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    _, out0, w = _inputs(1, 2, np.float64)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        ws = gc.placeholder(gc.float64, [D, D])
        loss = gc.reduce_sum(gc.square(growing(xs, gc.constant(out0), ws)))
        gx, gw = gc.gradients(loss, [xs, ws])
        sess = gc.Session(graph=graph)
        path = export(sess, str(tmp_path / "growing_grad.gcx"), {"x": xs, "w": ws},
                      {"gx": gx, "gw": gw, "loss": loss})
    loaded = runtime.load(path)
    for trips in (0, 1, 7, 40):
        x = _inputs(trips, 2, np.float64, seed=trips)[0]
        got = loaded.run({"x": x, "w": w})
        final = np_growing(x, out0, w)[-1]
        want_gx, _, want_gw = np_growing_gradients(x, out0, w, 2 * final)
        np.testing.assert_allclose(got["loss"], np.sum(final ** 2), rtol=1e-11)
        np.testing.assert_allclose(got["gx"], want_gx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got["gw"], want_gw, rtol=1e-10, atol=1e-12)


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trips", [0, 1, 7, 64])
def test_native_gradient_of_rows_appended_by_concat(native, trips, dtype):
    """out <- concat([out, tanh(x[i] @ w)], 0): the backward loop's weight gradient is a
    sum of products of x's rows (a gather at the counter: a pass would stack them and
    make one product after the loop, passes/sink_loop_gemms.py) with rows of the
    gradient of out, whose dims change; it stays in the loop."""
    rng = np.random.default_rng(trips)
    x = rng.standard_normal((trips, 5)).astype(dtype)
    w = (rng.standard_normal((5, 4)) * 0.5).astype(dtype)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(dtype, [None, 5])
        ws = gc.placeholder(dtype, [5, 4])

        def body(i, out):
            row = gc.tanh(gc.matmul(gc.expand_dims(gc.gather(xs, i), 0), ws))
            return i + 1, gc.concat([out, row], 0)
        _, out = gc.while_loop(lambda i, out: i < gc.shape(xs)[0], body,
                               [0, gc.zeros([0, 4], dtype)],
                               shape_invariants=[gc.TensorShape([]), gc.TensorShape([None, 4])])
        loss = gc.reduce_sum(out * out)
        gw, gx = gc.gradients(loss, [ws, xs])
        with gc.Session(graph=graph) as sess:
            got_gw, got_gx = sess.run([gw, gx], {xs: x, ws: w})
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    rows = np.tanh(x64 @ w64)
    dz = 2 * rows * (1 - rows ** 2)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_gw, x64.T @ dz, **tol)
    np.testing.assert_allclose(got_gx, dz @ w64.T, **tol)


# ----------------------------------------------- nested in a branch or a loop, natively
@pytest.mark.backends("compiled")
@pytest.mark.parametrize("take", [True, False])
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_growing_loop_in_a_cond_compiles_natively(native, take, trips):
    """The branch reduces the grown value: its dims stay in the branch's entry, which
    frees the value on the heap when it returns."""
    x, out0, w = _inputs(trips, 2, np.float64, seed=trips)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])
        pred = gc.placeholder(gc.bool, [])
        total = gc.cond(pred,
                        lambda: gc.reduce_sum(gc.square(growing(xs, gc.constant(out0),
                                                                 gc.constant(w))), 0),
                        lambda: gc.reduce_sum(xs, 0) * 2.0)
        with gc.Session(graph=graph) as sess:
            got = sess.run(total, {xs: x, pred: take})
    want = (np_growing(x, out0, w)[-1] ** 2).sum(0) if take else 2 * x.sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.backends("compiled")
@pytest.mark.parametrize("rows", [0, 1, 6])
def test_growing_loop_in_a_loop_compiles_natively(native, rows):
    """Outer iteration j runs a growing loop over x's first j rows and adds its sum of
    squares: the inner loop's dims are set again each outer iteration."""
    x, out0, w = _inputs(rows, 2, np.float64, seed=rows)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D])

        def outer(j, acc):
            def body(i, out):
                row = gc.expand_dims(gc.gather(xs, i), 0)
                return i + 1, gc.concat([gc.tanh(gc.matmul(out, gc.constant(w))), row], 0)
            _, out = gc.while_loop(lambda i, out: i < j, body, [0, gc.constant(out0)],
                                   shape_invariants=[gc.TensorShape([]),
                                                     gc.TensorShape([None, D])])
            return j + 1, acc + gc.reduce_sum(out * out)
        _, acc = gc.while_loop(lambda j, acc: j <= gc.shape(xs)[0], outer,
                               [0, gc.constant(0.0, gc.float64)])
        with gc.Session(graph=graph) as sess:
            got = sess.run(acc, {xs: x})
    want = sum((np_growing(x[:j], out0, w)[-1] ** 2).sum() for j in range(rows + 1))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.backends("compiled")
def test_growing_loop_in_a_loop_frees_its_buffers(native):
    """Each outer iteration grows the inner loop's value to 200 x 128 float64 (200 kB)
    on the heap of the outer body's entry: 30 runs of 60 outer iterations leaking them
    would hold 360 MB."""
    units = 128
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, units])

        def outer(j, acc):
            out = _gathered_rows_loop(xs, lambda out: out * 0.5)
            return j + 1, acc + gc.reduce_sum(out)
        _, acc = gc.while_loop(lambda j, acc: j < 60, outer, [0, gc.constant(0.0, gc.float64)])
        with gc.Session(graph=graph) as sess:
            got, growth = _growth_over_runs(sess, acc, {xs: np.ones((200, units))}, runs=30,
                                            warm=3)
    np.testing.assert_allclose(got, 60 * units * (2 - 0.5 ** 199), rtol=1e-12)
    assert growth < 30 * 2 ** 20, f"RSS grew by {growth / 2 ** 20:.1f} MiB"


@pytest.mark.backends("compiled")
def test_gradient_of_a_growing_loop_from_a_graph_def_compiles_natively(native):
    """A GraphDef keeps the backward loop's forward dims (its attrs in graphc's layout,
    a flat list), so the imported graph's gradient loop is native too."""
    x, out0, w = _inputs(7, 2, np.float64)
    graph = gc.Graph()
    with graph.as_default():
        xs = gc.placeholder(gc.float64, [None, D], name="x")
        ws = gc.placeholder(gc.float64, [D, D], name="w")
        loss = gc.reduce_sum(gc.square(growing(xs, gc.constant(out0), ws)))
        gx, gw = gc.gradients(loss, [xs, ws])
        graph_def = graph.as_graph_def()
    imported = gc.Graph()
    with imported.as_default():
        gc.import_graph_def(graph_def, name="")
        with gc.Session(graph=imported) as sess:
            got_gx, got_gw = sess.run([gx.name, gw.name], {"x:0": x, "w:0": w})
    want_gx, _, want_gw = np_growing_gradients(x, out0, w, 2 * np_growing(x, out0, w)[-1])
    np.testing.assert_allclose(got_gx, want_gx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_gw, want_gw, rtol=1e-10, atol=1e-12)
