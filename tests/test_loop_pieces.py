"""Index-set splitting of the innermost loop at a concatenation's pieces (loops/pieces.py).

The expressions of one piece's range must come out select- and clamp-free, and compiled
concatenations (odd widths, zero-width pieces, reductions over them, broadcasts, more
pieces than are split) must give NumPy's values.
"""
import os

import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower, optimize
from graphc.compiler.loops import LOOP_RULES, pieces
from graphc.compiler.loops.expr import BRANCH, ExprBuilder, walk
from graphc.compiler.loops.views import KernelViews

RNG = np.random.default_rng(0)


def _stitched(x, i, widths):
    """What op_lowering's concatenation builds: a select chain over clamped loads."""
    result, start = None, 0
    starts = []
    for w in widths:
        starts.append(start)
        start += w
    for k, (w, s) in reversed(list(enumerate(zip(widths, starts)))):
        local = x.max(x.min(x.sub(i, x.const(s)), x.const(w - 1)), x.const(0))
        value = x.load(("piece", k), local, "float32")
        result = value if result is None else \
            x.select(x.compare("lt", i, x.const(s + w)), value, result)
    return result


def test_each_range_keeps_only_its_piece_with_a_plain_index():
    x = ExprBuilder()
    var, i = x.var(x.const(9))
    e = _stitched(x, i, [2, 3, 4])
    assert pieces.breakpoints(x, [e], var) == [2, 5]
    for k, (lo, hi) in enumerate(pieces.ranges([2, 5], 9)):
        (got,) = pieces.specialize(x, [e], var, lo, hi)
        kinds = {n.kind for n in walk([got])}
        assert "select" not in kinds and "min" not in kinds and "max" not in kinds
        assert got.kind == "load" and got.data == ("piece", k)
        want_index = i if lo == 0 else x.sub(i, x.const(lo))
        assert got.args[0] is want_index


def test_no_cut_without_a_static_extent_or_with_too_many_pieces():
    x = ExprBuilder()
    var, i = x.var(x.const(100))
    assert pieces.breakpoints(x, [_stitched(x, i, [5] * 20)], var) == []
    assert pieces.breakpoints(x, [x.load("a", i, "float32")], var) == []


@pytest.mark.parametrize("widths", [[1], [3, 5], [1, 0, 7, 2], [4] * 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_concatenations_along_the_last_axis_match_numpy(widths, dtype):
    rows = 3
    vals = [RNG.standard_normal((rows, w)).astype(dtype) for w in widths]
    phs = [gc.placeholder(dtype, [None, w]) for w in widths]
    parts = [gc.sigmoid(p) if k % 2 else p * 2.0 + 1.0 for k, p in enumerate(phs)]
    joined = gc.concat(parts, axis=1) if len(parts) > 1 else parts[0]
    softmax = gc.nn.softmax(joined)                       # a row reduction over the pieces
    shifted = joined - gc.reduce_max(joined, axis=0)      # a column reduction broadcast back
    flat = gc.concat([gc.reshape(p, [-1]) for p in parts] + [gc.constant([7.0], dtype)], 0)
    got = gc.Session().run([joined, softmax, shifted, flat], dict(zip(phs, vals)))
    np_parts = [1 / (1 + np.exp(-v)) if k % 2 else v * 2 + 1 for k, v in enumerate(vals)]
    want = np.concatenate(np_parts, axis=1)
    e = np.exp(want - want.max(axis=1, keepdims=True))
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[0], want, **tol)
    np.testing.assert_allclose(got[1], e / e.sum(axis=1, keepdims=True), **tol)
    np.testing.assert_allclose(got[2], want - want.max(axis=0), **tol)
    np.testing.assert_allclose(got[3], np.concatenate([p.reshape(-1) for p in np_parts]
                                                      + [np.array([7.0], dtype)]), **tol)
    assert all(g.dtype == dtype for g in got)


def test_lstm_gate_gradient_concat_matches_numpy():
    """The case that pays: four gate gradients joined along the columns, each an
    elementwise expression of the step's saved values."""
    b, h = 5, 7
    i, j, f, o, g = (RNG.standard_normal((b, h)) for _ in range(5))
    phs = [gc.placeholder(gc.float64, [None, h]) for _ in range(5)]
    pi, pj, pf, po, pg = phs
    si, sf, so, tj = gc.sigmoid(pi), gc.sigmoid(pf), gc.sigmoid(po), gc.tanh(pj)
    joined = gc.concat([pg * tj * si * (1 - si), pg * si * (1 - tj * tj),
                        pg * sf * (1 - sf), pg * so * (1 - so)], axis=1)
    got = gc.Session().run(joined, dict(zip(phs, [i, j, f, o, g])))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    want = np.concatenate([g * np.tanh(j) * sig(i) * (1 - sig(i)),
                           g * sig(i) * (1 - np.tanh(j) ** 2),
                           g * sig(f) * (1 - sig(f)), g * sig(o) * (1 - sig(o))], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


# ------------------------------------------------- choosing among many pieces per element
# An unrolled recurrence joins its T steps (static_rnn's stacked outputs, batch_gemms'
# concatenated per-step operands): each element must compute its own piece only. Computed
# as a chain of selects, every element loaded every piece: O(T) per element, O(T^2) a step.

STEPS = 200
BACKENDS = [b.strip() for b in os.environ.get(
    "GRAPHC_TEST_BACKENDS", "compiled,reference,gpu_emulated").split(",") if b.strip()]


def _loads_per_element(e, memo=None):
    """The most loads one element computes: both arms of a select, the taken arm of a
    branching one (expr.BRANCH)."""
    memo = {} if memo is None else memo
    if id(e) not in memo:
        if e.kind in ("load", "load_one_of"):
            n = 1
        elif e.kind == "select" and e.data == BRANCH:
            n = _loads_per_element(e.args[0], memo) + max(
                _loads_per_element(a, memo) for a in e.args[1:])
        else:
            n = sum(_loads_per_element(a, memo) for a in e.args)
        memo[id(e)] = n
    return memo[id(e)]


def _lowered_element(out, feeds):
    """(the Expr of one element of `out`'s node lowered as a loop kernel computing it, its
    ExprBuilder, its loop variables)."""
    module = lower(feeds, [out], [], [f.shape.as_list() for f in feeds])
    (node,) = [n for n in module.nodes if n.type == out.op.type]
    views = KernelViews({node.outputs[0]}, lambda v: ("buffer", v.name),
                        lambda *a, **k: 0, LOOP_RULES)
    loop_vars, index = zip(*(views.x.var(views.x.dim(d)) for d in node.outputs[0].dims))
    return views.view(node.outputs[0], index), views.x, loop_vars


def _join(kind, parts):
    return {"concat_rows": lambda: gc.concat(parts, 0),
            "concat_columns": lambda: gc.concat(parts, 1),
            "stack": lambda: gc.stack(parts, 1)}[kind]()


@pytest.mark.parametrize("kind", ["concat_rows", "concat_columns", "stack"])
def test_each_element_of_a_200_piece_join_loads_one_piece(kind):
    parts = [gc.placeholder(gc.float32, [3, 5]) for _ in range(STEPS)]
    element, _, _ = _lowered_element(_join(kind, parts), parts)
    loads = _loads_per_element(element)
    assert loads <= 2, f"{loads} pieces loaded per element of a {STEPS}-piece {kind}"


def test_a_join_along_the_last_axis_is_cut_into_one_plain_loop_per_piece():
    """Left to LLVM, the bisection's branches are if-converted back into a select over
    every piece's address for each row: the join's loop must be cut at its pieces (along
    the last axis, where choosing a buffer per element would be in the innermost loop)."""
    steps = pieces.MAX_LOOPS
    parts = [gc.placeholder(gc.float32, [3, 5]) for _ in range(steps)]
    element, x, loop_vars = _lowered_element(_join("concat_columns", parts), parts)
    cut = pieces.cuts(x, [element], loop_vars[1], innermost=True)
    assert cut is not None and len(cut) == steps
    for k, (lo, hi, (got,)) in enumerate(cut):
        assert (lo, hi) == (k * 5, (k + 1) * 5)
        kinds = {n.kind for n in walk([got])}
        assert got.kind == "load" and not kinds & {"select", "min", "max"}


def test_a_200_piece_join_along_the_last_axis_is_cut_into_at_most_max_loops():
    """One loop per piece made LLVM's time grow faster than the pieces (600 two-element
    pieces: 17 s): past MAX_LOOPS, neighbouring pieces share a loop, whose bisection is
    among its own pieces only."""
    parts = [gc.placeholder(gc.float32, [3, 5]) for _ in range(STEPS)]
    element, x, loop_vars = _lowered_element(_join("concat_columns", parts), parts)
    cut = pieces.cuts(x, [element], loop_vars[1], innermost=True)
    assert cut is not None and len(cut) <= pieces.MAX_LOOPS
    assert [lo for lo, _, _ in cut] == [0] + [hi for _, hi, _ in cut[:-1]]
    assert cut[-1][1] == STEPS * 5 and all(lo % 5 == 0 for lo, _, _ in cut)
    for lo, hi, (got,) in cut:
        own = (hi - lo) // 5
        assert sum(n.kind == "load" for n in walk([got])) == own
        assert _loads_per_element(got) <= 1 + own.bit_length()


@pytest.mark.parametrize("kind", ["concat_rows", "stack"])
def test_a_200_buffer_join_along_an_outer_axis_is_one_load_from_a_chosen_buffer(kind):
    """Pieces alike but for their buffers (an unrolled recurrence's steps) are one load
    whose address is chosen per row: one loop nest, not one loop per piece (200 copies
    of the code for LLVM to compile)."""
    parts = [gc.placeholder(gc.float32, [3, 5]) for _ in range(STEPS)]
    element, x, loop_vars = _lowered_element(_join(kind, parts), parts)
    assert element.kind == "load_one_of" and len(element.data) == STEPS
    assert not {n.kind for n in walk([element])} & {"select", "load", "min", "max"}
    assert all(pieces.cuts(x, [element], v, innermost=k == len(loop_vars) - 1) is None
               for k, v in enumerate(loop_vars) if v is not None)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_joins_of_200_steps_match_numpy(backend, dtype):
    """Pieces of unequal and zero sizes, each an expression fused into the join, the join
    read by a reduction and a product (as static_rnn's loss and weight gradient do)."""
    rows = [k % 3 for k in range(STEPS)]  # 0, 1 and 2 rows
    vals = [RNG.standard_normal((r, 4)).astype(dtype) for r in rows]
    same = [RNG.standard_normal((2, 3)).astype(dtype) for _ in range(STEPS)]
    phs = [gc.placeholder(dtype, [r, 4]) for r in rows]
    sphs = [gc.placeholder(dtype, [2, 3]) for _ in range(STEPS)]
    rows_joined = gc.concat([gc.tanh(p) * float(k) for k, p in enumerate(phs)], 0)
    cols_joined = gc.concat([gc.sigmoid(p) for p in sphs], 1)
    stacked = gc.stack([p + float(k) for k, p in enumerate(sphs)], 1)
    product = gc.matmul(rows_joined, rows_joined, transpose_a=True)
    feed = dict(zip(phs + sphs, vals + same))
    got = gc.Session().run([rows_joined, cols_joined, stacked,
                            gc.reduce_sum(stacked, 1), product], feed)
    want_rows = np.concatenate([np.tanh(v) * k for k, v in enumerate(vals)], 0)
    want_stacked = np.stack([v + k for k, v in enumerate(same)], 1)
    want = [want_rows, np.concatenate([1 / (1 + np.exp(-v)) for v in same], 1),
            want_stacked, want_stacked.sum(1), want_rows.T @ want_rows]
    tol = dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for g, w in zip(got[:4], want[:4]):
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)
    # the product's error is relative to the sum of its terms' sizes (|A|^T |A|), not to
    # its value: its elements cancel to ~1e-4 of their terms (the rows differ from
    # NumPy's by tanh's last bits, 200 terms of up to 4e4 sum to -170)
    scale = np.abs(want_rows).T @ np.abs(want_rows)
    assert got[4].dtype == dtype and got[4].shape == want[4].shape
    assert np.all(np.abs(got[4] - want[4]) <= tol["rtol"] * scale + tol["atol"])


# ------------------------------------------- a join of slices of one tensor: a transpose
# static_rnn unstacks its input into T steps and batch_gemms joins them again (the rows of
# one input projection): Concat(Unpack(x)) is x transposed. As T pieces, it was T loops
# (T copies of the code for LLVM); as a run of slices, it is one loop nest reading x.
T = 32


def _slices_join(kind, x):
    """A join of `x`'s T slices, each piece a slice of x (kind names how)."""
    steps = gc.unstack(x, axis=1)
    return {"concat_unstacked": lambda: gc.concat(steps, 0),
            "concat_unstacked_reversed": lambda: gc.concat(steps[::-1], 0),
            "stack_unstacked": lambda: gc.stack(steps, 0),
            "concat_split": lambda: gc.concat(gc.split(x, T, axis=1), 0)}[kind]()


def _fused_element(out, feeds):
    """_lowered_element of `out` with every node but the feeds computed in its kernel."""
    module = lower(feeds, [out], [], [f.shape.as_list() for f in feeds])
    computed = {v for n in module.nodes if n.type != "Parameter" for v in n.outputs}
    views = KernelViews(computed, lambda v: ("buffer", v.name), lambda *a, **k: 0,
                        LOOP_RULES)
    loop_vars, index = zip(*(views.x.var(views.x.dim(d)) for d in module.outputs[0].dims))
    return views.view(module.outputs[0], index), views.x, loop_vars


@pytest.mark.parametrize("kind", ["concat_unstacked", "concat_unstacked_reversed",
                                  "stack_unstacked", "concat_split"])
def test_a_join_of_one_tensors_slices_is_one_loop_reading_it_once(kind):
    x = gc.placeholder(gc.float32, [4, T, 6])
    element, xb, loop_vars = _fused_element(_slices_join(kind, x), [x])
    kinds = [n.kind for n in walk([element])]
    assert kinds.count("load") == 1 and "select" not in kinds
    assert all(pieces.breakpoints(xb, [element], v, limit=None) == [] for v in loop_vars
               if v is not None)


def test_a_run_of_slices_inside_a_longer_join_is_one_piece():
    """Two runs (the first half forwards, the second backwards) between pieces of their
    own: four pieces, so the loop is cut in four, not T + 2."""
    x = gc.placeholder(gc.float32, [4, T, 6])
    other = gc.placeholder(gc.float32, [4, 6])
    steps = gc.unstack(x, axis=1)
    joined = gc.concat([other] + steps[:T // 2] + [other] + steps[T // 2:][::-1], 0)
    element, xb, loop_vars = _fused_element(joined, [x, other])
    assert pieces.breakpoints(xb, [element], loop_vars[0], limit=None) == \
        [4, 4 + 4 * T // 2, 8 + 4 * T // 2]


def _run_join_cases(x, other):
    """(graph value, NumPy function of (x, other)) for joins of runs of slices."""
    steps = gc.unstack(x, axis=1)
    n = len(steps)
    split = gc.split(x, n // 2, axis=1)
    return [
        (gc.concat(steps, 0), lambda a, o: np.concatenate(list(a.transpose(1, 0, 2)), 0)),
        (gc.concat(steps[::-1], 0),
         lambda a, o: np.concatenate(list(a.transpose(1, 0, 2)[::-1]), 0)),
        (gc.stack(steps, 0), lambda a, o: a.transpose(1, 0, 2)),
        (gc.stack(steps[::-1], 1), lambda a, o: a[:, ::-1]),
        (gc.concat(split, 0), lambda a, o: np.concatenate(np.split(a, n // 2, 1), 0)),
        # runs between other pieces, one step repeated (two runs meeting at it), the join
        # fused with elementwise work and read by a reduction
        (gc.reduce_sum(gc.tanh(gc.concat([other] + steps[:n // 2] + steps[n // 2 - 1:]
                                         + [other * 2.0], 0)), 1),
         lambda a, o: np.tanh(np.concatenate([o] + list(a.transpose(1, 0, 2)[:n // 2])
                                             + list(a.transpose(1, 0, 2)[n // 2 - 1:])
                                             + [o * 2], 0)).sum(1)),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch, steps, width", [(3, 8, 5), (1, 2, 1), (0, 4, 3)])
def test_joins_of_one_tensors_slices_match_numpy(backend, dtype, batch, steps, width):
    """Odd sizes, an empty batch, and a batch fed at run time (None)."""
    x = gc.placeholder(dtype, [None, steps, width])
    other = gc.placeholder(dtype, [None, width])
    cases = _run_join_cases(x, other)
    xv = RNG.standard_normal((batch, steps, width)).astype(dtype)
    ov = RNG.standard_normal((batch, width)).astype(dtype)
    got = gc.Session().run([c[0] for c in cases], {x: xv, other: ov})
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    for g, (_, want) in zip(got, cases):
        w = want(xv, ov)
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)


def _batched_rows(x, hs):
    """batch_gemms' left operand of a static_rnn weight gradient: the steps' [x_t, h_t]
    rows, last step first."""
    steps = gc.unstack(x, axis=1)
    return gc.concat([gc.concat([s, h], 1) for s, h in zip(steps, hs)][::-1], 0)


def test_a_join_of_step_rows_is_two_loops_one_transposing_one_choosing_buffers():
    """Concat_t([x_t, h_t]) along the rows is read as [Concat_t(x_t), Concat_t(h_t)]:
    a transpose of x beside a load from the step's buffer, cut along the columns only."""
    x = gc.placeholder(gc.float32, [4, T, 6])
    hs = [gc.placeholder(gc.float32, [4, 7]) for _ in range(T)]
    element, xb, loop_vars = _fused_element(_batched_rows(x, hs), [x] + hs)
    kinds = [n.kind for n in walk([element])]
    assert kinds.count("load") == 1 and kinds.count("load_one_of") == 1
    assert pieces.breakpoints(xb, [element], loop_vars[0], limit=None) == []
    assert pieces.breakpoints(xb, [element], loop_vars[1], limit=None) == [6]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_joins_of_buffers_of_one_layout_match_numpy(backend, dtype):
    """Runs of buffers of one layout between pieces of other shapes, forwards and
    backwards, stacked along a middle axis, the step rows of a batched weight gradient
    and their product, a gradient through the joins."""
    steps, batch, width, hidden = 5, 3, 2, 4
    x = gc.placeholder(dtype, [batch, steps, width])
    hs = [gc.placeholder(dtype, [batch, hidden]) for _ in range(steps)]
    odd = gc.placeholder(dtype, [1, hidden])
    rows = _batched_rows(x, hs)
    mixed = gc.concat(hs[:3] + [odd] + hs[3:][::-1] + [hs[0] * 2.0], 0)
    stacked = gc.stack(hs[::-1], 1)
    product = gc.matmul(rows, rows, transpose_a=True)
    grads = gc.gradients(gc.reduce_sum(mixed * mixed) + gc.reduce_sum(gc.sin(stacked))
                         + gc.reduce_sum(product), [x] + hs)
    xv = RNG.standard_normal((batch, steps, width)).astype(dtype)
    hv = [RNG.standard_normal((batch, hidden)).astype(dtype) for _ in range(steps)]
    ov = RNG.standard_normal((1, hidden)).astype(dtype)
    got = gc.Session().run([rows, mixed, stacked, product] + grads,
                           dict(zip([x, odd] + hs, [xv, ov] + hv)))
    want_rows = np.concatenate([np.concatenate([xv[:, t], hv[t]], 1)
                                for t in range(steps)][::-1], 0)
    want_mixed = np.concatenate(hv[:3] + [ov] + hv[3:][::-1] + [hv[0] * 2], 0)
    want_stacked = np.stack(hv[::-1], 1)
    # d/d rows of sum(rows^T rows) is 2 rows . 1 (each row times the sum of the columns)
    d_rows = 2 * want_rows @ np.ones((width + hidden, width + hidden), dtype)
    d_steps = d_rows.reshape(steps, batch, width + hidden)[::-1]
    want_dx = d_steps[:, :, :width].transpose(1, 0, 2)
    # each h_t is once in `mixed` (h_0 twice: also as 2 h_0) and once in `stacked`
    want_dh = [d_steps[t, :, width:] + np.cos(want_stacked[:, steps - 1 - t]) + 2 * hv[t]
               for t in range(steps)]
    want_dh[0] = want_dh[0] + 8 * hv[0]
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for g, w in zip(got, [want_rows, want_mixed, want_stacked, want_rows.T @ want_rows,
                          want_dx] + want_dh):
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)


# ------------------------------------------------ a concatenation of many pieces and its
# gradient: the gradient is a split into the pieces (summed here by add_n), each piece's
# start the sum of the sizes before it.
def test_a_split_into_many_pieces_sums_each_start_once(monkeypatch):
    """Each output summing the sizes before it made a split into n pieces n^2/2 index
    additions (1200 pieces: 9 of a compile's 23 s)."""
    n = 1023
    x = gc.placeholder(gc.float32, [2 * n])
    calls = []
    add = ExprBuilder.add
    monkeypatch.setattr(ExprBuilder, "add", lambda self, a, b: calls.append(1) or add(self, a, b))
    element, _, _ = _fused_element(gc.add_n(gc.split(x, n, axis=0)), [x])
    assert sum(n.kind == "load" for n in walk([element])) == n
    assert len(calls) <= 3 * n, f"{len(calls)} index additions for a split into {n}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 1023])
def test_many_piece_concatenations_and_their_gradients_match_numpy(backend, dtype, n):
    """Pieces of 0, 1 and 2 elements, each its own expression of one input, along the
    last axis (cut into loops past MAX_LOOPS), reduced, and the gradient of the sum of
    squares back through the concatenation's split."""
    widths = [(k * 5) % 3 for k in range(n)] if n > 1 else [2]
    x = gc.placeholder(dtype, [3, 2])
    feed = RNG.standard_normal((3, 2)).astype(dtype)
    joined = gc.concat([x[:, :w] * dtype(k + 1) for k, w in enumerate(widths)], axis=1)
    loss = gc.reduce_sum(joined * joined)
    (grad,) = gc.gradients(loss, [x])
    got_joined, got_loss, got_grad = gc.Session().run(
        [joined, loss, grad], {x: feed})
    f = feed.astype(np.float64)
    want_joined = np.concatenate([f[:, :w] * (k + 1) for k, w in enumerate(widths)], 1)
    want_grad = np.zeros_like(f)
    for k, w in enumerate(widths):
        want_grad[:, :w] += 2 * f[:, :w] * (k + 1) ** 2
    tol = dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    assert got_joined.dtype == dtype and got_joined.shape == (3, sum(widths))
    np.testing.assert_allclose(got_joined, want_joined, **tol)
    np.testing.assert_allclose(got_loss, (want_joined ** 2).sum(), **tol)
    np.testing.assert_allclose(got_grad, want_grad, **tol)


def _fusion_of_concat_and_gradient(n, monkeypatch, after_merge):
    """Fusion of a concatenation of n pieces of one input, its sum of squares and the
    gradient; after_merge(fusion) runs after each merge of two groups."""
    from graphc.compiler.schedule import fusion
    x = gc.placeholder(gc.float32, [3, 2])
    joined = gc.concat([gc.tanh(x) * float(k + 1) for k in range(n)], axis=1)
    (grad,) = gc.gradients(gc.reduce_sum(joined * joined), [x])
    merge = fusion.Fusion._merge

    def checked_merge(self, a, b, *args, **kwargs):
        merge(self, a, b, *args, **kwargs)
        after_merge(self)

    monkeypatch.setattr(fusion.Fusion, "_merge", checked_merge)
    module = lower([x], [joined, grad], [], [[3, 2]])
    optimize(module)
    return fusion.run(module)


def test_merged_groups_edges_are_those_their_nodes_give(monkeypatch):
    """A merge joins its two groups' kernel-graph edges instead of recomputing them from
    the merged group's nodes: they must be the edges a rebuild finds."""
    merges = []

    def compare_with_rebuild(fusion):
        joined = ({g: set(s) for g, s in fusion.succ.items()},
                  {g: set(p) for g, p in fusion.pred.items()})
        fusion._rebuild_edges()
        assert joined == (fusion.succ, fusion.pred)
        merges.append(1)

    _fusion_of_concat_and_gradient(40, monkeypatch, compare_with_rebuild)
    assert len(merges) >= 40


def test_merges_into_a_concatenation_walk_each_piece_once(monkeypatch):
    """Recomputing the merged group's edges per merge walked the whole concatenation each
    time one more piece joined it: n^2 node visits for n pieces."""
    from graphc.compiler.schedule import fusion
    n, walked = 600, []
    add_edges = fusion.Fusion._add_group_edges

    def counted(self, gid):
        walked.append(len(self.groups[gid].nodes))
        add_edges(self, gid)

    monkeypatch.setattr(fusion.Fusion, "_add_group_edges", counted)
    _fusion_of_concat_and_gradient(n, monkeypatch, lambda fusion: None)
    assert sum(walked) <= 20 * n, f"{sum(walked)} node visits for {n} pieces"


def test_renumbering_merges_into_a_concatenation_searches_few_groups(monkeypatch):
    """The merged group took the earlier group's place, after every group between the
    two that reaches the later one: for a piece joining its concatenation, all the pieces
    not yet merged, n^2/2 groups searched for n pieces."""
    from graphc.compiler.schedule import fusion
    n, reached = 600, []
    between = fusion.Fusion._between

    def counted(self, *args):
        found = between(self, *args)
        reached.append(args[3] if found is None else len(found))  # none: its limit
        return found

    monkeypatch.setattr(fusion.Fusion, "_between", counted)
    _fusion_of_concat_and_gradient(n, monkeypatch, lambda fusion: None)
    assert sum(reached) <= 20 * n, f"{sum(reached)} groups searched for {n} pieces"


def test_cycle_checks_of_merges_into_a_concatenation_search_few_groups(monkeypatch):
    """Each side of a merge's cycle check listed its start's neighbours up front, and the
    side of a group with many (the concatenation, the input its pieces all read) stepped
    even when the other had run out: n^2 groups for n pieces."""
    n = 600
    stats = _fusion_of_concat_and_gradient(n, monkeypatch, lambda fusion: None)
    assert stats["groups_searched"] <= 20 * n, stats
