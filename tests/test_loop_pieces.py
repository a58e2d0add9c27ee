"""Index-set splitting of the innermost loop at a concatenation's pieces (loops/pieces.py).

The expressions of one piece's range must come out select- and clamp-free, and compiled
concatenations (odd widths, zero-width pieces, reductions over them, broadcasts, more
pieces than are split) must give NumPy's values.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.loops import pieces
from graphc.compiler.loops.expr import ExprBuilder, walk

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
