"""cond, case, switch_case, while_loop, TensorArray, map_fn, scan, foldl and foldr against
values written here with NumPy loops, on every Session backend (the CPU's compiles loops
and branches whose bodies are native ops, the others keep them on the host between native
stages); gradients against central differences in float64 (tests/gradcheck.py)."""
import re
import warnings

import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order

pytestmark = pytest.mark.filterwarnings("ignore:graphc could not compile this run")
FLOATS = [np.float32, np.float64]


def run(fetches, feed=None):
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        return sess.run(fetches, feed)


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- cond
@pytest.mark.parametrize("dtype", FLOATS)
def test_cond_runs_the_taken_branch(dtype):
    x = gc.placeholder(dtype, [None])
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: x * 2 + 1, lambda: gc.sin(x))
    xv = np.array([0.5, -1.0, 2.0], dtype)
    np.testing.assert_allclose(run(y, {x: xv, p: True}), xv * 2 + 1, **tol(dtype))
    np.testing.assert_allclose(run(y, {x: xv, p: False}), np.sin(xv), **tol(dtype))
    assert y.dtype == gc.as_dtype(dtype) and y.shape.as_list() == [None]


def test_cond_nested_structures_and_strict():
    x = gc.constant(3.0)
    out = gc.cond(gc.constant(False), lambda: {"a": (x, x + 1), "b": [x * 2]},
                  lambda: {"a": (x - 1, x - 2), "b": [x * 3]})
    assert run(out) == {"a": (2.0, 1.0), "b": [9.0]}
    assert isinstance(gc.cond(x > 0, lambda: [x], lambda: [x + 1]), gc.Tensor)
    assert isinstance(gc.cond(x > 0, lambda: [x], lambda: [x + 1], strict=True), list)
    with pytest.raises(ValueError, match="same structure"):
        gc.cond(x > 0, lambda: (x, x), lambda: x)
    with pytest.raises(ValueError, match="same type"):
        gc.cond(x > 0, lambda: x, lambda: gc.constant(1))
    with pytest.raises(TypeError, match="true_fn must be callable"):
        gc.cond(x > 0, x, lambda: x)


def test_cond_is_lazy_assigns_included():
    v = gc.Variable(0.0)
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: gc.assign_add(v, 1.0), lambda: gc.assign_add(v, 10.0))
    with gc.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(y, {p: True}) == 1.0
        assert sess.run(y, {p: False}) == 11.0
        assert sess.run(v) == 11.0
    # a failing op in the branch not taken never runs
    i = gc.placeholder(gc.int32, [])
    z = gc.cond(i < 3, lambda: gc.gather(gc.constant([1.0, 2.0, 3.0]), i),
                lambda: gc.constant(-1.0))
    assert run(z, {i: 7}) == -1.0 and run(z, {i: 1}) == 2.0


def test_cond_reads_variable_by_reference_after_assign():
    v = gc.Variable(1.0)

    def branch():
        with gc.control_dependencies([gc.assign(v, 5.0)]):
            return v.read_value() * 2
    assert run(gc.cond(gc.constant(True), branch, lambda: gc.constant(0.0))) == 10.0


@pytest.mark.parametrize("take", [True, False])
def test_cond_gradients(take):
    def fn(x, y):
        return gc.cond(gc.constant(take), lambda: x * y * x, lambda: gc.exp(y) * x)
    check_gradients(fn, [np.array([0.3, -1.2]), np.array([0.7, 0.4])])


def test_cond_gradient_only_taken_branch_runs():
    x = gc.placeholder(gc.float64, [])
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: x * x, lambda: gc.log(x))   # log(-1) would be nan
    g = gc.gradients(y, x)[0]
    assert run(g, {x: -1.0, p: True}) == -2.0
    assert run(g, {x: 4.0, p: False}) == 0.25


def test_cond_second_derivative():
    check_second_order(lambda x: gc.cond(gc.reduce_sum(x) > 0, lambda: gc.sin(x) * x,
                                         lambda: x * x * x),
                       [np.array([0.5, 1.5])])
    check_second_order(lambda x: gc.cond(gc.reduce_sum(x) > 0, lambda: gc.sin(x) * x,
                                         lambda: x * x * x),
                       [np.array([-0.5, -1.5])])


def central_differences(loss, x, xv, feed=None, eps=1e-6):
    """d loss / d x at xv by central differences of the graph's own forward values."""
    out, feed = np.zeros_like(xv), dict(feed or {})
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for i in range(xv.size):
            step = np.zeros_like(xv)
            step.flat[i] = eps
            out.flat[i] = (sess.run(loss, {**feed, x: xv + step}) -
                           sess.run(loss, {**feed, x: xv - step})) / (2 * eps)
    return out


def test_two_gradients_of_different_losses_through_one_cond():
    """A second tf.gradients through the same cond builds its own gradient If reading
    the saved intermediates the first one added (TF1: two losses on one graph)."""
    x = gc.placeholder(gc.float64, [3])
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: gc.sin(x) * x, lambda: gc.exp(x))
    loss1, loss2 = gc.reduce_sum(y), gc.reduce_sum(y * y)
    g1 = gc.gradients(loss1, x)[0]
    g2 = gc.gradients(loss2, x)[0]
    xv = np.array([0.3, -1.2, 0.0])
    for take in (True, False):
        yv, dy = (np.sin(xv) * xv, np.cos(xv) * xv + np.sin(xv)) if take else \
            (np.exp(xv), np.exp(xv))
        got1, got2 = run([g1, g2], {x: xv, p: take})
        np.testing.assert_allclose(got1, dy, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got2, 2 * yv * dy, rtol=1e-12, atol=1e-12)
        for got, loss in ((got1, loss1), (got2, loss2)):
            np.testing.assert_allclose(got, central_differences(loss, x, xv, {p: take}),
                                       rtol=1e-6, atol=1e-8)


def test_case_and_switch_case():
    x = gc.placeholder(gc.int32, [])
    y = gc.case([(x < 0, lambda: gc.constant(-1)), (x < 10, lambda: gc.constant(1))],
                default=lambda: gc.constant(100))
    assert [run(y, {x: v}) for v in (-5, 5, 50)] == [-1, 1, 100]
    no_default = gc.case([(x < 0, lambda: gc.constant(-1)), (x < 10, lambda: gc.constant(1))])
    assert run(no_default, {x: 3}) == 1
    with pytest.raises(gc.errors.InvalidArgumentError, match="none of the conditions"):
        run(no_default, {x: 30})
    excl = gc.case([(x < 10, lambda: gc.constant(1)), (x < 20, lambda: gc.constant(2))],
                   default=lambda: gc.constant(0), exclusive=True)
    assert run(excl, {x: 15}) == 2
    with pytest.raises(gc.errors.InvalidArgumentError, match="more than one"):
        run(excl, {x: 5})
    s = gc.switch_case(x, [lambda: gc.constant(10.0), lambda: gc.constant(11.0)],
                       default=lambda: gc.constant(-1.0))
    assert [run(s, {x: v}) for v in (0, 1, 2, -1)] == [10.0, 11.0, -1.0, -1.0]
    last = gc.switch_case(x, {0: lambda: gc.constant(5.0), 3: lambda: gc.constant(6.0)})
    assert [run(last, {x: v}) for v in (0, 3, 9)] == [5.0, 6.0, 6.0]


def test_python_bool_preds_are_an_error_as_in_tf1():
    x = gc.constant(1.0)
    with pytest.raises(TypeError, match="^pred must not be a Python bool$"):
        gc.cond(True, lambda: x, lambda: -x)
    with pytest.raises(TypeError, match="^pred must be a Tensor, got: False$"):
        gc.case([(False, lambda: x)], default=lambda: -x)
    # NumPy bools and tensors are preds; switch_case takes a Python int index (TF1 too)
    assert run(gc.cond(np.bool_(False), lambda: x, lambda: -x)) == -1.0
    assert run(gc.switch_case(1, [lambda: x, lambda: -x])) == -1.0


# ------------------------------------------------------------------------- while_loop
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_trip_counts(dtype, n):
    limit = gc.placeholder(gc.int32, [])
    x = gc.placeholder(dtype, [2])
    i, acc = gc.while_loop(lambda i, a: i < limit, lambda i, a: (i + 1, a * x + 1.0),
                           [0, gc.zeros([2], dtype)])
    xv = np.array([0.5, -2.0], dtype)
    expected = np.zeros(2, dtype)
    for _ in range(n):
        expected = expected * xv + 1
    got_i, got = run([i, acc], {limit: n, x: xv})
    assert got_i == n
    np.testing.assert_allclose(got, expected, **tol(dtype))


def test_while_loop_data_dependent_and_single_var():
    # Collatz steps of 27: the trip count depends on the values
    n = gc.placeholder(gc.int64, [])
    def collatz(v):
        nxt = gc.where(gc.equal(v[0] % 2, 0), v[0] // 2, 3 * v[0] + 1)
        return [gc.stack([nxt, v[1] + 1])]
    steps = gc.while_loop(lambda v: v[0] > 1, collatz, [gc.stack([n, gc.constant(0, gc.int64)])])
    expected, v = 0, 27
    while v > 1:
        v, expected = (v // 2 if v % 2 == 0 else 3 * v + 1), expected + 1
    assert run(steps, {n: 27})[1] == expected
    single = gc.while_loop(lambda v: v < 100, lambda v: v * 3, gc.constant(1))
    assert run(single) == 243


def test_while_loop_maximum_iterations_and_structures():
    r = gc.while_loop(lambda s: s["a"] < 1000, lambda s: {"a": s["a"] * 2, "b": (s["b"][0] + 1,)},
                      [{"a": gc.constant(1), "b": (gc.constant(0.0),)}], maximum_iterations=5)
    assert run(r) == {"a": 32, "b": (5.0,)}
    r = gc.while_loop(lambda i: i < 3, lambda i: i + 1, [gc.constant(0)], maximum_iterations=10,
                      return_same_structure=True)
    assert isinstance(r, list) and run(r) == [3]


def test_while_loop_shape_invariants():
    i0 = gc.constant(0)
    m0 = gc.ones([1, 2])
    n = gc.placeholder(gc.int32, [])
    _, m = gc.while_loop(lambda i, m: i < n, lambda i, m: [i + 1, gc.concat([m, m], 0)],
                         [i0, m0], shape_invariants=[i0.shape, gc.TensorShape([None, 2])])
    assert m.shape.as_list() == [None, 2]
    assert run(m, {n: 3}).shape == (8, 2)
    with pytest.raises(ValueError, match="shape_invariants"):
        gc.while_loop(lambda i, m: i < 3, lambda i, m: [i + 1, gc.concat([m, m], 0)], [i0, m0])
    with pytest.raises(TypeError, match="dtype"):
        gc.while_loop(lambda i: i < 3, lambda i: gc.cast(i, gc.float32), [i0])


def test_nested_loops_and_loops_with_cond():
    def outer_body(i, total):
        _, inner = gc.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s + j), [0, 0])
        total = gc.cond(gc.equal(i % 2, 0), lambda: total + inner, lambda: total - 1)
        return i + 1, total
    _, total = gc.while_loop(lambda i, t: i < 6, outer_body, [0, 0])
    expected = 0
    for i in range(6):
        expected = expected + sum(range(i)) if i % 2 == 0 else expected - 1
    assert run(total) == expected
    x = gc.placeholder(gc.float64, [])
    in_cond = gc.cond(x > 0, lambda: gc.while_loop(lambda v: v < 50.0, lambda v: v * x, [x]),
                      lambda: -x)
    assert run(in_cond, {x: 3.0}) == 81.0 and run(in_cond, {x: -2.0}) == 2.0


@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_gradients(n):
    def fn(x, w):
        _, h = gc.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, gc.tanh(h * w + x)),
                             [0, x])
        return h
    check_gradients(fn, [np.array([0.3, -0.8, 0.5]), np.array([0.9, 1.1, -0.7])])


def test_while_loop_gradient_data_dependent_count_and_nesting():
    def fn(x):
        def body(i, h):
            _, inner = gc.while_loop(lambda j, s: j < 2, lambda j, s: (j + 1, gc.sin(s) * h),
                                     [0, h])
            return i + 1, inner + 0.5 * h
        # the trip count depends on x's value (3 here) and is not differentiated
        steps = gc.cast(gc.floor(gc.reduce_sum(x) * 0 + 3.0), gc.int32)
        return gc.while_loop(lambda i, h: i < steps, body, [0, x])[1]
    check_gradients(fn, [np.array([0.2, -0.4])])


def test_while_loop_gradient_with_cond_in_body():
    def fn(x):
        return gc.while_loop(
            lambda i, h: i < 4,
            lambda i, h: (i + 1, gc.cond(gc.equal(i % 2, 0), lambda: h * h, lambda: gc.sin(h) + x)),
            [0, x])[1]
    check_gradients(fn, [np.array([0.6, -0.3])])


def test_while_loop_gradient_wrt_variable_read_in_body():
    w = gc.Variable(np.array([0.5, -0.25]), name="w")
    x = gc.placeholder(gc.float64, [2])
    _, h = gc.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, h * w + 1.0), [0, x])
    loss = gc.reduce_sum(h)
    gw, gx = gc.gradients(loss, [w, x])
    with gc.Session() as sess:
        sess.run(w.initializer)
        xv = np.array([2.0, 3.0])
        got_w, got_x = sess.run([gw, gx], {x: xv})
        wv = np.array([0.5, -0.25])
        # h3 = x w^3 + w^2 + w + 1
        np.testing.assert_allclose(got_w, 3 * xv * wv ** 2 + 2 * wv + 1, rtol=1e-12)
        np.testing.assert_allclose(got_x, wv ** 3, rtol=1e-12)


def np_sin_loop(xv, trips):
    """y = sin^trips(x) and dy/dx."""
    y, dy = xv.copy(), np.ones_like(xv)
    for _ in range(trips):
        y, dy = np.sin(y), dy * np.cos(y)
    return y, dy


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_two_gradients_of_different_losses_through_one_loop(trips):
    """The second gradient builds its own backward loop on the forward loop's stacks
    (the first gradient's zeros for those stacks were taken as a second derivative)."""
    x = gc.placeholder(gc.float64, [3])
    _, y = gc.while_loop(lambda i, y: i < trips, lambda i, y: (i + 1, gc.sin(y)), [0, x])
    loss1, loss2 = gc.reduce_sum(y), gc.reduce_sum(y * y)
    g1 = gc.gradients(loss1, x)[0]
    g2 = gc.gradients(loss2, x)[0]
    xv = np.array([0.1, -0.5, 1.0])
    yv, dy = np_sin_loop(xv, trips)
    got1, got2 = run([g1, g2], {x: xv})
    np.testing.assert_allclose(got1, dy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got2, 2 * yv * dy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got2, central_differences(loss2, x, xv), rtol=1e-6, atol=1e-8)
    # the first gradient still runs alone, after the forward loop saved more for the second
    np.testing.assert_allclose(run(g1, {x: xv}), dy, rtol=1e-12, atol=1e-12)


def test_gradients_wrt_the_loop_input_then_a_variable_read_in_the_body():
    w = gc.Variable(np.array([0.5, -0.25, 2.0]), name="w")
    x = gc.placeholder(gc.float64, [3])
    _, h = gc.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, gc.sin(h) * w), [0, x])
    gx = gc.gradients(gc.reduce_sum(h), x)[0]
    gw = gc.gradients(gc.reduce_sum(h * h), w)[0]
    xv, wv = np.array([0.1, 0.5, 1.0]), np.array([0.5, -0.25, 2.0])
    # h_{k+1} = sin(h_k) w: forward-mode derivatives in x and in w, elementwise
    hv, dx, dw = xv.copy(), np.ones_like(xv), np.zeros_like(xv)
    for _ in range(3):
        hv, dx, dw = np.sin(hv) * wv, np.cos(hv) * wv * dx, np.cos(hv) * wv * dw + np.sin(hv)
    got_x, got_w = run([gx, gw], {x: xv})
    np.testing.assert_allclose(got_x, dx, rtol=1e-12)
    np.testing.assert_allclose(got_w, 2 * hv * dw, rtol=1e-12)


def test_second_derivative_through_a_loop_is_a_clear_error():
    x = gc.placeholder(gc.float64, [3])
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, gc.sin(y)), [0, x],
                         name="outer")
    g = gc.gradients(gc.reduce_sum(y), x)[0]
    with pytest.raises(LookupError, match="Second derivatives through while_loop 'outer'"):
        gc.gradients(gc.reduce_sum(g), x)


def test_while_loop_back_prop_false_and_variable_order():
    x = gc.placeholder(gc.float64, [])
    y = gc.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, [x], back_prop=False)
    assert gc.gradients(y, x) == [None]
    v = gc.Variable(0.0)

    def body(i, acc):
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return i + 1, acc + v.read_value()
    _, acc = gc.while_loop(lambda i, a: i < 4, body, [0, 0.0])
    assert run(acc) == 1.0 + 2.0 + 3.0 + 4.0


def test_error_inside_loop_body_names_op_and_line():
    table = gc.constant([1.0, 2.0, 3.0])
    n = gc.placeholder(gc.int32, [])

    def body(i, s):
        return i + 1, s + gc.gather(table, i, name="lookup")  # fails at i == 3
    _, s = gc.while_loop(lambda i, s: i < n, body, [0, 0.0])
    assert run(s, {n: 3}) == 6.0
    with pytest.raises(gc.errors.InvalidArgumentError) as e:
        run(s, {n: 5})
    assert "lookup" in str(e.value) and "test_control_flow.py" in str(e.value)
    assert "s + gc.gather(table, i, name=\"lookup\")" in str(e.value)


def test_variables_cannot_be_created_in_a_body():
    with pytest.raises(ValueError, match="cannot be created inside the body"):
        gc.while_loop(lambda i: i < 2, lambda i: i + gc.cast(gc.Variable(1.0), gc.int32), [0])


def test_compiled_backend_runs_the_loop_and_the_rest_natively(monkeypatch):
    """A While whose body is native ops compiles with the ops around it into one native
    stage (tests/test_native_control_flow.py checks the loops themselves), with no
    fallback warning."""
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    x = gc.placeholder(gc.float64, [3])
    start = gc.tanh(x) * 2.0
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 10.0, lambda v: v + 1.0, [start])
    out = gc.sqrt(y * y + 1.0)
    xv = np.array([0.5, -1.0, 2.0])
    want = np.tanh(xv) * 2.0
    while want.sum() < 10.0:
        want = want + 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not compile" fallback
        with gc.Session() as sess:
            np.testing.assert_allclose(sess.run(out, {x: xv}), np.sqrt(want * want + 1.0),
                                       rtol=1e-14)
            assert sess.compile_count == 1


# ------------------------------------------------------------------------- TensorArray
def test_tensor_array_operations():
    ta = gc.TensorArray(gc.float32, size=3)
    ta = ta.write(0, [1.0, 2.0]).write(2, [5.0, 6.0]).write(1, [3.0, 4.0])
    stacked, second, size = ta.stack(), ta.read(1), ta.size()
    gathered = ta.gather([2, 0])
    concat = ta.concat()
    assert ta.element_shape.as_list() == [2]
    got = run([stacked, second, size, gathered, concat])
    np.testing.assert_array_equal(got[0], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(got[1], [3, 4])
    assert got[2] == 3
    np.testing.assert_array_equal(got[3], [[5, 6], [1, 2]])
    np.testing.assert_array_equal(got[4], [1, 2, 3, 4, 5, 6])
    un = gc.TensorArray(gc.float64, size=4).unstack(np.arange(8.0).reshape(4, 2))
    sc = gc.TensorArray(gc.int32, size=3, element_shape=[]).scatter([2, 0], [7, 9])
    np.testing.assert_array_equal(run(un.read(3)), [6.0, 7.0])
    np.testing.assert_array_equal(run(sc.stack()), [9, 0, 7])   # unwritten, known shape: 0
    grow = gc.TensorArray(gc.float32, size=0, dynamic_size=True)
    grow = grow.write(0, 1.0).write(4, 5.0)
    assert run(grow.size()) == 5


def test_tensor_array_errors():
    ta = gc.TensorArray(gc.float32, size=2).write(0, 1.0)
    with pytest.raises(gc.errors.InvalidArgumentError, match="already been written"):
        run(ta.write(0, 2.0).stack())
    with pytest.raises(gc.errors.InvalidArgumentError, match="not resizeable"):
        run(ta.write(2, 2.0).stack())
    with pytest.raises(gc.errors.InvalidArgumentError, match="not yet been written"):
        run(gc.TensorArray(gc.float32, size=2).read(1))
    # an element shape known (given, or from a write): an unwritten element reads as zeros
    assert run(ta.read(1)) == 0.0
    with pytest.raises(ValueError, match="Inconsistent shapes"):
        gc.TensorArray(gc.float32, size=2).write(0, [1.0, 2.0]).write(1, [1.0])


def test_tensor_array_in_loop_and_gradients():
    def fn(x):
        n = gc.shape(x)[0]
        inp = gc.TensorArray(gc.float64, size=n).unstack(x)
        out = gc.TensorArray(gc.float64, size=n)

        def body(i, h, out):
            h = gc.tanh(h + inp.read(i))
            return i + 1, h, out.write(i, h * 2.0)
        _, _, out = gc.while_loop(lambda i, h, o: i < n, body,
                                  [0, gc.zeros([2], gc.float64), out])
        return out.stack()
    x = np.array([[0.1, -0.2], [0.3, 0.5], [-0.4, 0.2]])
    h, expected = np.zeros(2), []
    for row in x:
        h = np.tanh(h + row)
        expected.append(2 * h)
    np.testing.assert_allclose(run(fn(gc.constant(x))), expected, rtol=1e-12)
    check_gradients(fn, [x])


# -------------------------------------------------------------- map_fn, scan, folds
@pytest.mark.parametrize("dtype", FLOATS)
def test_map_fn_scan_folds(dtype):
    x = gc.placeholder(dtype, [None, 3])
    xv = (np.arange(12.0).reshape(4, 3) / 5 - 1).astype(dtype)
    m = gc.map_fn(lambda r: r * r + 1, x)
    pair = gc.map_fn(lambda t: (t[0] + t[1], gc.reduce_sum(t[0])), (x, x * 2),
                     dtype=(dtype, dtype))
    s = gc.scan(lambda a, r: a * 0.5 + r, x)
    s_init = gc.scan(lambda a, r: a + r, x, initializer=gc.ones([3], dtype), reverse=True)
    fl = gc.foldl(lambda a, r: a - r, x)
    fr = gc.foldr(lambda a, r: a * r, x, initializer=gc.ones([3], dtype))
    got = run([m, pair, s, s_init, fl, fr], {x: xv})
    np.testing.assert_allclose(got[0], xv * xv + 1, **tol(dtype))
    np.testing.assert_allclose(got[1][0], 3 * xv, **tol(dtype))
    np.testing.assert_allclose(got[1][1], xv.sum(1), **tol(dtype))
    acc, rows = xv[0], [xv[0]]
    for r in xv[1:]:
        acc = acc * 0.5 + r
        rows.append(acc)
    np.testing.assert_allclose(got[2], rows, **tol(dtype))
    np.testing.assert_allclose(got[3], 1 + np.cumsum(xv[::-1], 0)[::-1], **tol(dtype))
    np.testing.assert_allclose(got[4], xv[0] - xv[1] - xv[2] - xv[3], **tol(dtype))
    np.testing.assert_allclose(got[5], np.prod(xv, 0), **tol(dtype))
    empty = run(m, {x: np.zeros((0, 3), dtype)})
    assert empty.shape == (0, 3)


def test_map_fn_and_scan_gradients():
    check_gradients(lambda x: gc.map_fn(lambda r: gc.sin(r) * r, x), [np.random.default_rng(0)
                                                                      .standard_normal((3, 2))])
    check_gradients(lambda x, w: gc.scan(lambda a, r: gc.tanh(a * w + r), x),
                    [np.random.default_rng(1).standard_normal((4, 2)),
                     np.array([0.7, -0.4])])
    check_gradients(lambda x: gc.foldr(lambda a, r: a * r + 1.0, x),
                    [np.random.default_rng(2).standard_normal((3, 2))])


# ------------------------------------------------------------------------ graph files
def test_graph_files_and_dump_show_control_flow_ops(tmp_path, capsys):
    from graphc import graph_io
    from graphc.dump import main as dump_main
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = gc.cond(gc.reduce_sum(x) > 0, lambda: x * 2, lambda: x - 1)
    _, s = gc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2), [0, y])
    gc.gradients(gc.reduce_sum(s), x)
    graph_io.write_graph(gc.get_default_graph(), str(tmp_path), "cf.json", as_text=False)
    assert dump_main([str(tmp_path / "cf.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\bcond\s+If\b", out) and re.search(r"\bwhile\s+While\b", out)
    # the file holds the bodies too (test_graph_files_control_flow.py has the rest)
    g = gc.Graph()
    xv = np.array([[1, -2, 3], [0.5, 0, 1]], np.float32)
    with g.as_default():
        gc.import_graph_def(graph_io.read_graph_def(str(tmp_path / "cf.json")), name="")
        with gc.Session() as sess:
            got = sess.run("while:1", {"x:0": xv})
    np.testing.assert_allclose(got, xv * 2 * 8)


def test_variable_converted_inside_control_dependencies_in_a_body_reads_after_them():
    v = gc.Variable(0.0)

    def body(i, acc):
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return i + 1, acc + v   # TF2's compat.v1 variables read here, after the assign
    _, acc = gc.while_loop(lambda i, a: i < 4, body, [0, 0.0])
    assert run(acc) == 1.0 + 2.0 + 3.0 + 4.0


def test_gradients_wrt_variables_read_by_reference_in_bodies():
    w = gc.Variable(np.array([0.5, -0.25]), name="w")
    x = gc.placeholder(gc.float64, [2])
    _, h = gc.while_loop(lambda i, h: i < 3,
                         lambda i, h: (i + 1, h * w.read_value() + 1.0), [0, x])
    p = gc.placeholder(gc.bool, [])
    c = gc.cond(p, lambda: w.read_value() * x * 3.0, lambda: x)
    gw_loop = gc.gradients(gc.reduce_sum(h), w)[0]
    gw_cond = gc.gradients(gc.reduce_sum(c), w)[0]
    xv, wv = np.array([2.0, 3.0]), np.array([0.5, -0.25])
    with gc.Session() as sess:
        sess.run(w.initializer)
        np.testing.assert_allclose(sess.run(gw_loop, {x: xv}), 3 * xv * wv ** 2 + 2 * wv + 1,
                                   rtol=1e-12)
        np.testing.assert_allclose(sess.run(gw_cond, {x: xv, p: True}), 3 * xv, rtol=1e-12)
        np.testing.assert_allclose(sess.run(gw_cond, {x: xv, p: False}), 0 * xv)


def test_export_of_a_loop_holding_a_host_op_names_it(tmp_path):
    x = gc.placeholder(gc.float32, [3], name="x")

    def body(v):
        doubled = gc.py_func(lambda a: a * 2.0, [v], gc.float32)
        doubled.set_shape([3])
        return doubled
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 100.0, body, [x])
    with gc.Session() as sess, pytest.raises(ValueError, match="cannot be compiled yet.*PyFunc"):
        gc.export(sess, str(tmp_path / "m.gcx"), inputs={"x": x}, outputs={"y": y})


def test_while_loop_maximum_iterations_gradient_and_python_numbers():
    def fn(x):
        # the cond alone would run 10 times; maximum_iterations stops it after 3
        return gc.while_loop(lambda i, h: i < 10, lambda i, h: (i + 1, gc.sin(h) * 1.5),
                             [0, x], maximum_iterations=3)[1]
    check_gradients(fn, [np.array([0.4, -1.1])])
    x = np.array([0.4, -1.1])
    for _ in range(3):
        x = np.sin(x) * 1.5
    np.testing.assert_allclose(run(fn(gc.constant(np.array([0.4, -1.1])))), x, rtol=1e-12)
    # a Python number returned for a float64 loop variable is a float64
    r = gc.while_loop(lambda v: v < 3.0, lambda v: 5.0, [gc.constant(1.0, gc.float64)])
    assert r.dtype == gc.float64 and run(r) == 5.0


def test_gradients_through_cond_in_loop_reading_a_variable_and_tensor_array_ops():
    w = gc.Variable(np.array([0.5, -0.25]), name="w")
    x = gc.placeholder(gc.float64, [2])

    def body(i, h):
        return i + 1, gc.cond(gc.equal(i % 2, 0), lambda: h * w.read_value(),
                              lambda: h + w.read_value())
    _, h = gc.while_loop(lambda i, h: i < 3, body, [0, x])
    gw, gx = gc.gradients(gc.reduce_sum(h), [w, x])
    ta = gc.TensorArray(gc.float64, size=3).write(0, x * 2.0).write(2, x * x)
    picked = ta.gather([2, 0])
    g_ta = gc.gradients(gc.reduce_sum(ta.stack()) + gc.reduce_sum(picked * 3.0), x)[0]
    xv, wv = np.array([2.0, 3.0]), np.array([0.5, -0.25])
    with gc.Session() as sess:
        sess.run(w.initializer)
        got_h, got_w, got_x, got_ta = sess.run([h, gw, gx, g_ta], {x: xv})
    # h = (x w + w) w
    np.testing.assert_allclose(got_h, (xv * wv + wv) * wv, rtol=1e-12)
    np.testing.assert_allclose(got_w, 2 * xv * wv + 2 * wv, rtol=1e-12)
    np.testing.assert_allclose(got_x, wv ** 2, rtol=1e-12)
    np.testing.assert_allclose(got_ta, 2 + 2 * xv + 3 * (2 * xv + 2), rtol=1e-12)
