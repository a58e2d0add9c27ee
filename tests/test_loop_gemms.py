"""The loop passes that move a body's GEMMs out of its loop: sink_loop_gemms (a product
accumulated into a loop variable becomes one product over all iterations after the loop)
and hoist_loop_gemms (a product of a row of a loop-invariant array by a loop-invariant
weight becomes one product over all rows before it), graphc/compiler/passes/.

Structure (what the bodies keep, the GEMMs before and after the loop) on the lowered
module; the values against NumPy loops written here on every backend, with trip counts
0, 1 and fewer than the rows (the rows past the trip count hold an earlier run's values:
they must not count), float32 and float64, one and two threads; the gradients of loops
and of dynamic_rnn (whose forward and backward loops the passes rewrite) against central
differences; an index past the rows is still an error."""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.driver import schedule_module
from graphc.compiler.regions import zeroed_past_trips
from graphc.ops import rnn
from tests.gradcheck import check_gradients
from tests.test_dynamic_rnn import np_dynamic_lstm

FLOATS = [np.float32, np.float64]
T, B, M, N = 7, 3, 5, 4


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def accumulating_loop(xs, w, n, read_acc_in_cond=False, transpose_a=True):
    """acc + x_i^T . tanh(x_i . w + h) over i < n, x_i = xs[i]; returns (acc, h)."""
    dtype = xs.dtype

    def cond(i, acc, h):
        if read_acc_in_cond:
            return gc.logical_and(i < n, gc.reduce_sum(acc) < 1e30)
        return i < n

    def body(i, acc, h):
        x = gc.gather(xs, i)
        b = gc.tanh(gc.matmul(x, w) + h)
        a = x if transpose_a else gc.transpose(x)
        return i + 1, acc + gc.matmul(a, b, transpose_a=transpose_a), b
    _, acc, h = gc.while_loop(cond, body, [gc.constant(0), gc.zeros([M, N], dtype),
                                           gc.zeros([B, N], dtype)])
    return acc, h


def np_accumulating_loop(xv, wv, n):
    acc, h = np.zeros((M, N), xv.dtype), np.zeros((B, N), xv.dtype)
    for i in range(n):
        b = np.tanh(xv[i] @ wv + h)
        acc, h = acc + xv[i].T @ b, b
    return acc, h


class AccumulatingCase:
    """The accumulating loop over fed rows xs [T, B, M] and weights w [M, N] up to a fed
    trip count n, with values for them drawn from `seed`."""

    def __init__(self, dtype, seed):
        rng = np.random.default_rng(seed)
        self.xv = rng.standard_normal((T, B, M)).astype(dtype)
        self.wv = rng.standard_normal((M, N)).astype(dtype)
        self.xs = gc.placeholder(dtype, [T, B, M])
        self.w = gc.placeholder(dtype, [M, N])
        self.n = gc.placeholder(gc.int32, [])
        self.acc, self.h = accumulating_loop(self.xs, self.w, self.n)

    def feed(self, trips):
        return {self.xs: self.xv, self.w: self.wv, self.n: trips}

    def check(self, got_acc, got_h, trips, tolerance):
        want_acc, want_h = np_accumulating_loop(self.xv, self.wv, trips)
        np.testing.assert_allclose(got_acc, want_acc, **tolerance)
        np.testing.assert_allclose(got_h, want_h, **tolerance)


def sunk(fetches, feeds, shapes):
    """(the pass's count, MatMuls in the loop bodies, MatMuls outside) of the lowered
    module once optimized and scheduled."""
    module = lower(list(feeds), list(fetches), [], shapes)
    stats = schedule_module(module)
    inside = sum(n.type == "MatMul" for node in module.nodes
                 for region in node.regions.values() for n in region.all_nodes())
    outside = sum(n.type == "MatMul" for n in module.nodes)
    return stats["sink_loop_gemms"]["loop_gemms_sunk"], inside, outside


def test_the_body_keeps_no_product_and_one_gemm_follows_the_loop():
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M, N])
    n = gc.placeholder(gc.int32, [])
    acc, h = accumulating_loop(xs, w, n)
    count, inside, outside = sunk([acc, h], [xs, w, n], [(T, B, M), (M, N), ()])
    # x_i . w before the loop (hoist_loop_gemms), x_i^T . b_i after it
    assert (count, inside, outside) == (1, 0, 2)


def test_the_loop_zeros_the_unwritten_rows_no_mask_copies_the_stacks():
    """The rows past the trip count are zeroed by the While as it leaves (none at the
    full trip count), not by a Select over each whole stack before the product."""
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M, N])
    n = gc.placeholder(gc.int32, [])
    acc, h = accumulating_loop(xs, w, n)
    module = lower([xs, w, n], [acc, h], [], [(T, B, M), (M, N), ()])
    schedule_module(module)
    (loop,) = [node for node in module.nodes if node.type == "While"]
    assert not [node.type for node in module.nodes if node.type in ("Select", "ZerosLike")]
    zeroed = zeroed_past_trips(loop)
    assert [v.dims for v in zeroed] == [(T, B, M), (T, B, N)]
    gemm = [node for node in module.nodes if node.type == "MatMul"][-1]
    assert [x.node.inputs[0] for x in gemm.inputs] == zeroed  # their rows, flattened


@pytest.mark.parametrize("case", ["cond reads acc", "other flags"])
def test_loops_of_another_shape_are_left_alone(case):
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M, N])
    n = gc.placeholder(gc.int32, [])
    acc, h = accumulating_loop(xs, w, n, read_acc_in_cond=case == "cond reads acc",
                               transpose_a=case != "other flags")
    count, inside, outside = sunk([acc, h], [xs, w, n], [(T, B, M), (M, N), ()])
    assert (count, inside, outside) == (0, 1, 1)  # x_i . w hoisted only


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_accumulated_products_match_numpy(backend, monkeypatch, dtype, threads):
    monkeypatch.setenv("GRAPHC_NUM_THREADS", threads)
    case = AccumulatingCase(dtype, seed=1)
    with gc.Session() as sess:
        # the full run first: the rows the later, shorter runs leave unwritten hold its
        # values (the arena is reused), which must not reach the sum
        for trips in (T, 0, 1, 4, T):
            case.check(*sess.run([case.acc, case.h], case.feed(trips)), trips, tol(dtype))


def test_a_trip_count_past_the_gathered_rows_is_the_gathers_error(backend):
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M, N])
    n = gc.placeholder(gc.int32, [])
    acc, _ = accumulating_loop(xs, w, n)
    with gc.Session() as sess, pytest.raises(gc.errors.InvalidArgumentError):
        sess.run(acc, {xs: np.ones((T, B, M), np.float32), w: np.ones((M, N), np.float32),
                       n: T + 1})


def test_loop_gradients_match_finite_differences(backend):
    rng = np.random.default_rng(2)

    def f(xs, w):
        return accumulating_loop(xs, w, 5)[0]
    check_gradients(f, [rng.standard_normal((T, B, M)), rng.standard_normal((M, N)) * 0.5])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", [0, 1, 6])
def test_dynamic_rnn_weight_gradient_after_its_backward_loop(backend, monkeypatch, dtype,
                                                             steps):
    """dynamic_rnn's backward loop, its weight gradient out of the loop: the gradients
    with sequence_length masking against central differences of the NumPy LSTM."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)  # the while_loop at every length
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [3, None, 2])  # the stacks' rows a run-time dim
    lengths = gc.placeholder(gc.int32, [3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(3)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    weighting = np.linspace(-1, 1, 9 * steps).reshape(3, steps, 3).astype(dtype)
    loss = gc.reduce_sum(out * weighting) + gc.reduce_sum(state.c * state.c)
    grads = gc.gradients(loss, cell.variables)
    xv = rng.standard_normal((3, steps, 2)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {v.op.name.split("/")[-1]: sess.run(v).astype(np.float64) for v in cell.variables}
        got = sess.run(grads, {x: xv, lengths: lv})

    def f(weights):
        zeros = np.zeros((3, 3))
        o, c, _ = np_dynamic_lstm(weights, xv.astype(np.float64), lv, zeros, zeros)
        return (o * weighting).sum() + (c * c).sum()
    loose = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-6, atol=1e-7)
    for name, g in zip(("kernel", "bias"), got):
        want = np.zeros_like(w[name])
        for at in np.ndindex(want.shape):
            moved = {k: v.copy() for k, v in w.items()}
            moved[name][at] += 1e-6
            up = f(moved)
            moved[name][at] -= 2e-6
            want[at] = (up - f(moved)) / 2e-6
        np.testing.assert_allclose(g, want, **loose)


def test_dynamic_rnn_backward_loop_keeps_no_weight_product(monkeypatch):
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    x = gc.placeholder(gc.float32, [4, 6, 2])
    cell = gc.nn.rnn_cell.BasicLSTMCell(3)
    out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
    grads = gc.gradients(gc.reduce_sum(out * out), cell.variables)
    count, inside, outside = sunk(grads, [x], [(4, 6, 2)])
    # after the loops: the input projection and the weight gradient; in them: h . W[2:]
    # forward and dG . W[2:]^T backward
    assert (count, inside, outside) == (1, 2, 2)


# ------------------------------------------------- hoist_loop_gemms: the input projection
def projecting_loop(xs, w, n, concat=True, w_in_body=False):
    """h <- tanh([x_i, h] . w) (or x_i . w[:M] + h when not concat) over i < n."""
    w_x = w[:M]  # outside the loop: loop-invariant

    def body(i, h):
        x = gc.gather(xs, i)
        weight = w * gc.cast(i + 1, w.dtype) if w_in_body else w
        if concat:
            return i + 1, gc.tanh(gc.matmul(gc.concat([x, h], 1), weight))
        return i + 1, gc.tanh(gc.matmul(x, w_x) + h)
    return gc.while_loop(lambda i, h: i < n, body,
                         [gc.constant(0), gc.zeros([B, N], xs.dtype)])[1]


def np_projecting_loop(xv, wv, n, concat=True):
    h = np.zeros((B, N), xv.dtype)
    for i in range(n):
        h = np.tanh(np.concatenate([xv[i], h], 1) @ wv if concat else xv[i] @ wv[:M] + h)
    return h


def hoisted(fetches, feeds, shapes):
    module = lower(list(feeds), list(fetches), [], shapes)
    stats = schedule_module(module)
    inside = sum(n.type == "MatMul" for node in module.nodes
                 for region in node.regions.values() for n in region.all_nodes())
    outside = sum(n.type == "MatMul" for n in module.nodes)
    return stats["hoist_loop_gemms"]["loop_gemms_hoisted"], inside, outside


@pytest.mark.parametrize("concat,want", [(True, (1, 1, 1)), (False, (1, 0, 1))])
def test_the_input_projection_leaves_the_loop(concat, want):
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M + N, N])
    n = gc.placeholder(gc.int32, [])
    h = projecting_loop(xs, w, n, concat=concat)
    assert hoisted([h], [xs, w, n], [(T, B, M), (M + N, N), ()]) == want


def test_a_weight_the_body_computes_stays_in_the_loop():
    xs = gc.placeholder(gc.float32, [T, B, M])
    w = gc.placeholder(gc.float32, [M + N, N])
    n = gc.placeholder(gc.int32, [])
    h = projecting_loop(xs, w, n, w_in_body=True)
    assert hoisted([h], [xs, w, n], [(T, B, M), (M + N, N), ()]) == (0, 1, 0)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_hoisted_projections_match_numpy(backend, monkeypatch, dtype, concat, threads):
    monkeypatch.setenv("GRAPHC_NUM_THREADS", threads)
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((T, B, M)).astype(dtype)
    wv = (rng.standard_normal((M + N, N)) * 0.5).astype(dtype)
    xs = gc.placeholder(dtype, [T, B, M])
    w = gc.placeholder(dtype, [M + N, N])
    n = gc.placeholder(gc.int32, [])
    h = projecting_loop(xs, w, n, concat=concat)
    with gc.Session() as sess:
        for trips in (0, 1, 4, T):
            np.testing.assert_allclose(sess.run(h, {xs: xv, w: wv, n: trips}),
                                       np_projecting_loop(xv, wv, trips, concat), **tol(dtype))
        with pytest.raises(gc.errors.InvalidArgumentError):  # row T: the gather's error
            sess.run(h, {xs: xv, w: wv, n: T + 1})


def test_hoisted_projection_gradients_match_finite_differences(backend):
    rng = np.random.default_rng(4)

    def f(xs, w):
        return projecting_loop(xs, w, 5)
    check_gradients(f, [rng.standard_normal((T, B, M)), rng.standard_normal((M + N, N)) * 0.5])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", [0, 1, 7])
def test_dynamic_rnn_input_projection_before_its_loop(backend, monkeypatch, dtype, steps):
    """dynamic_rnn reads its input from a TensorArray: one GEMM over every step's rows
    before the loop; outputs and final state with sequence_length masking against NumPy."""
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [3, None, 2])
    lengths = gc.placeholder(gc.int32, [3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    xv = rng.standard_normal((3, steps, 2)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {v.op.name.split("/")[-1]: sess.run(v) for v in cell.variables}
        got = sess.run([out, state.c, state.h], {x: xv, lengths: lv})
    zeros = np.zeros((3, 4), dtype)
    for g, want in zip(got, np_dynamic_lstm(w, xv, lv, zeros, zeros)):
        np.testing.assert_allclose(g, want, **tol(dtype))
    if steps:
        count, inside, outside = hoisted([out], [x, lengths], [(3, steps, 2), (3,)])
        assert (count, inside) == (1, 1)  # h . W[2:] stays in the loop


# ------------------------------------------- hoist_loop_invariants: copies of invariants
def copying_loop(w, n, begin_in_loop=False):
    """h <- tanh(h . slice(w)^T + 1) over i < n: the body slices and transposes w."""
    def body(i, h):
        begin = [0, 0] if not begin_in_loop else gc.stack([i * 0, i * 0])
        part = gc.transpose(gc.slice(w, begin, [N, N]))
        return i + 1, gc.tanh(gc.matmul(h, part) + 1.0)
    return gc.while_loop(lambda i, h: i < n, body,
                         [gc.constant(0), gc.zeros([B, N], w.dtype)])[1]


def body_node_types(fetches, feeds, shapes):
    module = lower(list(feeds), list(fetches), [], shapes)
    stats = schedule_module(module)
    types = [n.type for node in module.nodes for region in node.regions.values()
             for n in region.all_nodes()]
    return stats["hoist_loop_invariants"]["loop_invariants_hoisted"], types


@pytest.mark.parametrize("begin_in_loop", [False, True])
def test_copies_of_invariants_leave_the_loop(begin_in_loop):
    w = gc.placeholder(gc.float32, [N + 2, N])
    n = gc.placeholder(gc.int32, [])
    h = copying_loop(w, n, begin_in_loop)
    moved, types = body_node_types([h], [w, n], [(N + 2, N), ()])
    if begin_in_loop:  # the begin the body computes keeps the slice (and its transpose) in
        assert moved == 0 and "Slice" in types and "Transpose" in types
    else:
        assert moved == 2 and "Slice" not in types and "Transpose" not in types


@pytest.mark.parametrize("dtype", FLOATS)
def test_hoisted_copies_match_numpy(backend, dtype):
    rng = np.random.default_rng(5)
    wv = (rng.standard_normal((N + 2, N)) * 0.5).astype(dtype)
    w = gc.placeholder(dtype, [N + 2, N])
    n = gc.placeholder(gc.int32, [])
    h = copying_loop(w, n)
    with gc.Session() as sess:
        for trips in (0, 1, 6):
            want = np.zeros((B, N), dtype)
            for _ in range(trips):
                want = np.tanh(want @ wv[:N].T + 1.0)
            np.testing.assert_allclose(sess.run(h, {w: wv, n: trips}), want, **tol(dtype))


def test_dynamic_rnn_backward_loop_slices_its_weight_once(monkeypatch):
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    x = gc.placeholder(gc.float32, [4, 6, 2])
    cell = gc.nn.rnn_cell.BasicLSTMCell(3)
    out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
    # no gradient of x: the backward product is cut to h's rows of the weight, a Slice
    grads = gc.gradients(gc.reduce_sum(out * out), cell.variables)
    moved, types = body_node_types(grads, [x], [(4, 6, 2)])
    assert moved == 1 and "Slice" not in types
