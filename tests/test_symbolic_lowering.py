"""Symbolic dims in lowering: each unknown feed dim is a symbol, every IR dim an expression
of the symbols, decisions taken on this run's sizes are guards.

The strong check is the interpreter's: it evaluates every value's dims at the symbol
values of a run and compares them with the real array shapes, so lowering once and
running the same module for several batch sizes tests every expression.
"""
import json

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.compiler import interpret, lower, optimize
from graphc.compiler.interpret import GuardError, symbol_values
from graphc.compiler.ir import Module, format_dim
from graphc.compiler.lower import signature_key
from graphc.framework.symbolic import (GuardSet, SymDim, check_guards, evaluate_json,
                                       slice_size)

RNG = np.random.default_rng(0)


def _feed(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _text(v):
    return tuple(format_dim(d) for d in v.dims)


def _runs_like_session(fetches, feeds, batches, make_feeds, compile_batch, same_values=True):
    """Lowers (and optimizes) for `compile_batch`, then for every batch size checks the
    module's outputs (shapes checked value by value by the interpreter) against Session.run."""
    feed_arrays = make_feeds(compile_batch)
    m = lower(feeds, fetches, [], [a.shape for a in feed_arrays])
    optimize(m)
    sess = gc.Session()
    for n in batches:
        arrays = make_feeds(n)
        got = interpret(m, arrays, {})
        want = sess.run(fetches, dict(zip(feeds, arrays)))
        for g, w in zip(got, want):
            assert g.shape == w.shape
            if same_values:
                np.testing.assert_allclose(g, w, rtol=1e-6)
    return m


# --------------------------------------------------------------------- symbolic.py
def test_from_json_inverts_to_json_and_evaluates():
    x, y = SymDim.symbol("x.0", 32), SymDim.symbol("y.1", 5)
    e = (x * 784 + 3) // (y * 2) + (x % 7).maximum(y) * x - 4
    back = SymDim.from_json(json.loads(json.dumps(e.to_json())))
    assert back.key == e.key and hash(back) == hash(e) and str(back) == str(e)
    env = {"x.0": 17, "y.1": 3}
    want = (17 * 784 + 3) // 6 + max(17 % 7, 3) * 17 - 4
    assert back.evaluate(env) == evaluate_json(e.to_json(), env) == want


def test_equality_is_structural_outside_a_compile_and_guarded_inside():
    x = SymDim.symbol("x.0", 32)
    assert not (x == 32) and x != 32 and x == x * 2 - x and (x, 3) != (32, 3)
    with GuardSet() as gs:
        assert x == 32 and x != 1 and x * 2 > 40
    assert len(gs.guards) == 3
    assert check_guards(gs.guards, {"x.0": 32}) == []
    assert len(check_guards(gs.guards, {"x.0": 1})) == 3
    assert len(check_guards(gs.guards, {"x.0": 21})) == 1  # only x == 32 fails


def test_non_dims_give_not_implemented_so_python_falls_back():
    x = SymDim.symbol("x", 3)
    with GuardSet() as gs:
        assert [None] * x == [None] * 3         # list repeat: needs an int, guarded
    assert gs.guards and list(np.array([x, 2], dtype=object) * 2) == [2 * x, 4]


def test_slice_size_matches_python_for_every_size_its_guards_allow():
    for d in range(0, 7):
        for b in (None, -9, -2, 0, 1, 4, 9):
            for e in (None, -9, -1, 0, 2, 9):
                for s in (1, 2, -1, -3):
                    with GuardSet() as gs:
                        got = slice_size(b, e, s, SymDim.symbol("d", d))
                    for d2 in range(0, 12):
                        if not check_guards(gs.guards, {"d": d2}):
                            v = got.evaluate({"d": d2}) if isinstance(got, SymDim) else got
                            assert v == len(range(*slice(b, e, s).indices(d2))), (d, b, e, s)


# ----------------------------------------------------------------------- feeds, IR
def test_feed_dims_become_symbols_and_sizes_0_and_1_are_specialized():
    x = gc.placeholder(gc.float32, [None, None, 3], name="x")
    u = gc.placeholder(gc.float32, None, name="u")   # unknown rank: takes the fed rank
    m = lower([x, u], [x * 2.0, u + 1.0], [], [(32, 1, 3), (5, 0)])
    assert _text(m.params[0].outputs[0]) == ("x.0", "1", "3")
    assert _text(m.params[1].outputs[0]) == ("u.0", "0")
    assert m.symbols == {"x.0": (0, 0), "x.1": (0, 1), "u.0": (1, 0), "u.1": (1, 1)}
    assert check_guards(m.guards, {"x.0": 7, "x.1": 1, "u.0": 2, "u.1": 0}) == []
    assert len(check_guards(m.guards, {"x.0": 7, "x.1": 2, "u.0": 2, "u.1": 3})) == 2
    interpret(m, [_feed(9, 1, 3), _feed(4, 0)], {})


def test_text_form_shows_expressions_and_the_dict_form_round_trips_them():
    x = gc.placeholder(gc.float32, [None, 784], name="x")
    flat = gc.reshape(x, [-1])
    halves = gc.reshape(x, [-1, 2, 392])[1:]
    m = lower([x], [flat, halves], [], [(32, 784)])
    text = m.to_text()
    assert "f32[x.0,784] Parameter()" in text and "f32[784*x.0] Reshape(" in text
    assert "f32[x.0-1,2,392] StridedSlice(" in text
    m2 = Module.from_dict(json.loads(json.dumps(m.to_dict())))
    m2.verify()
    assert m2.to_text() == text and m2.symbols == m.symbols
    assert [list(g) for g in m2.guards] == [list(g) for g in m.guards]
    assert m2.outputs[0].dims[0].hint == 784 * 32
    feed = _feed(5, 784)
    for a, b in zip(interpret(m, [feed], {}), interpret(m2, [feed], {})):
        np.testing.assert_array_equal(a, b)


def test_verify_checks_dims():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    m = lower([x], [gc.exp(x)], [], [(8, 3)])
    assert m.verify()
    exp = m.outputs[0]
    exp.dims = (SymDim.symbol("nowhere.0", 8), 3)
    with pytest.raises(AssertionError, match="not in the module"):
        m.verify()
    exp.dims = (-1, 3)
    with pytest.raises(AssertionError, match="bad dim"):
        m.verify()


def test_signature_key_ignores_sizes_but_not_ranks_or_dtypes():
    x = gc.placeholder(gc.float32, None, name="x")
    y = x * 2.0
    key = signature_key([x], [y], [], [np.zeros((32, 4), np.float32)])
    assert key == signature_key([x], [y], [], [np.zeros((17, 9), np.float32)])
    assert key != signature_key([x], [y], [], [np.zeros((17,), np.float32)])
    assert key != signature_key([x], [y], [], [np.zeros((32, 4), np.float64)])
    hash(key)


# ------------------------------------------------------------------ whole programs
def _mlp():
    gc.set_random_seed(0)
    x = gc.placeholder(gc.float32, [None, 784], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.dense(x, 32, activation=gc.nn.relu)
    logits = gc.layers.dense(h, 10)
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return x, labels, loss, logits, train


def test_mlp_training_step_compiled_for_32_holds_for_17_but_not_for_1():
    x, labels, loss, logits, train = _mlp()
    m = lower([x, labels], [loss, logits], [train], [(32, 784), (32,)])
    optimize(m)
    assert _text(m.params[0].outputs[0]) == ("x.0", "784")
    assert _text(m.outputs[1]) == ("x.0", "10")
    assert any("x.0" in d.symbols() for n in m.nodes for v in n.outputs
               for d in v.dims if isinstance(d, SymDim))
    assert m.is_static_shaped()
    ok = {"x.0": 17, "labels.0": 17}
    assert check_guards(m.guards, ok) == []
    assert check_guards(m.guards, {"x.0": 1, "labels.0": 1})      # 1 broadcasts: recompile
    assert check_guards(m.guards, {"x.0": 17, "labels.0": 16})    # batch sizes must agree

    sess = gc.Session()
    sess.run(gc.global_variables_initializer())
    variables = {k: v.copy() for k, v in sess._state.variables.items()}
    for n in (17, 32, 5):
        feed = {x: _feed(n, 784), labels: RNG.integers(0, 10, n).astype(np.int32)}
        assert symbol_values(m, list(feed.values())) == {"x.0": n, "labels.0": n}
        got = interpret(m, list(feed.values()), variables)
        want = sess.run([loss, logits, train], feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
        for name, value in variables.items():
            np.testing.assert_allclose(value, sess._state.variables[name], rtol=1e-5,
                                       atol=1e-7)
    with pytest.raises(GuardError, match="guards"):
        interpret(m, [_feed(1, 784), np.zeros(1, np.int32)], variables)


def test_reshape_flatten_of_conv_outputs_concat_and_reduce_over_the_batch():
    x = gc.placeholder(gc.float32, [None, 6, 6, 2], name="x")
    k = gc.constant(_feed(3, 3, 2, 4))
    conv = gc.nn.conv2d(x, k, [1, 2, 2, 1], "SAME")                  # [x.0, 3, 3, 4]
    flat = gc.layers.flatten(conv)                                   # [x.0, 36]
    everything = gc.reshape(conv, [-1])                              # [36*x.0]
    pairs = gc.reshape(flat, [-1, 2, 18])
    doubled = gc.concat([flat, flat * 2.0], axis=0)                  # [2*x.0, 36]
    total = gc.reduce_sum(flat, axis=0)                              # [36]
    mean = gc.reduce_mean(gc.concat([x, x], 0), axis=[0, 1], keepdims=True)
    fetches = [flat, everything, pairs, doubled, total, mean]
    m = _runs_like_session(fetches, [x], (7, 2, 11), lambda n: [_feed(n, 6, 6, 2)], 5)
    assert [_text(v) for v in m.outputs[:4]] == [
        ("x.0", "36"), ("36*x.0",), ("x.0", "2", "18"), ("2*x.0", "36")]
    assert m.outputs[4].dims == (36,) and m.outputs[5].dims == (1, 1, 6, 2)


def test_strided_slices_of_the_batch():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    fetches = [x[1:], x[:-1], x[::2], x[::-1], x[-2:], x[1::3], x[0], x[-1] * 2.0,
               gc.slice(x, [1, 0], [-1, 2])]
    m = _runs_like_session(fetches, [x], (9, 10, 4), lambda n: [_feed(n, 3)], 8)
    assert [_text(v)[0] for v in m.outputs[:4]] == [
        "x.0-1", "x.0-1", "floordiv(x.0+1,2)", "x.0"]
    assert m.outputs[4].dims == (2, 3) and m.outputs[6].dims == (3,)
    assert check_guards(m.guards, {"x.0": 1})   # x[1:] is empty for 1: decided otherwise
    assert not check_guards(m.guards, {"x.0": 2})


def test_shape_of_x_feeding_fill_reshape_random_uniform_and_shape_arithmetic():
    x = gc.placeholder(gc.float32, [None, 4], name="x")
    s = gc.shape(x)
    filled = gc.fill(s, 3.0)                                          # [x.0, 4]
    back = gc.reshape(gc.reshape(x, [-1]), s)                         # [x.0, 4]
    noise = gc.random_uniform(s, seed=1)                              # [x.0, 4]
    rows = gc.zeros(gc.stack([s[0] * 2, 3]))                          # [2*x.0, 3]
    tiled = gc.tile(x, gc.stack([2, s[1] // 2]))                      # [2*x.0, 8]
    col = gc.reshape(x, [s[0], -1, 2])                                # [x.0, 2, 2]
    fetches = [filled, back, rows, tiled, col, noise]
    m = _runs_like_session(fetches[:-1], [x], (3, 12), lambda n: [_feed(n, 4)], 6)
    assert [_text(v) for v in m.outputs] == [
        ("x.0", "4"), ("x.0", "4"), ("2*x.0", "3"), ("2*x.0", "8"), ("x.0", "2", "2")]
    m = _runs_like_session(fetches, [x], (3, 12), lambda n: [_feed(n, 4)], 6,
                           same_values=False)
    assert _text(m.outputs[-1]) == ("x.0", "4")
    assert m.is_static_shaped()


def test_impossible_reshape_for_the_fed_size_is_an_invalid_argument_error():
    x = gc.placeholder(gc.float32, [None], name="x")
    y = gc.reshape(x, [3, 2])
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"(?s)7 elements.*'Reshape' \(op: 'Reshape'\).*"
                             r"test_symbolic_lowering.py"):
        lower([x], [y], [], [(7,)])
    m = lower([x], [y], [], [(6,)])     # fine for 6, and only for 6
    assert m.outputs[0].dims == (3, 2)
    assert check_guards(m.guards, {"x.0": 6}) == [] and check_guards(m.guards, {"x.0": 7})


def test_data_dependent_dims_stay_dynamic_and_the_module_is_not_static_shaped():
    x = gc.placeholder(gc.float32, [None], name="x")
    idx = gc.where(x > 0.0)                                 # [?, 1]: how many are > 0
    c = gc.placeholder(gc.int32, [2], name="c")
    y = gc.reshape(gc.range(6.0), c)                        # [?, ?]: c's value is data
    m = lower([x, c], [idx, y], [], [(5,), (2,)])
    assert m.outputs[0].dims == (None, 1) and m.outputs[1].dims == (None, None)
    assert not m.is_static_shaped() and "s64[?,1] Where(" in m.to_text()
    got = interpret(m, [np.float32([1, -1, 2, 3, -4]), np.int32([3, 2])], {})
    assert got[0].shape == (3, 1) and got[1].shape == (3, 2)
    x2 = gc.placeholder(gc.float32, [None, 2], name="x2")
    assert lower([x2], [x2 + 1.0], [], [(3, 2)]).is_static_shaped()
