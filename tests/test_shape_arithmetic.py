"""Shape arithmetic over unknown dims, and what static evaluation may know.

Each pattern computes shapes from the dims of a feed whose batch is unknown (None); one
Session feeds several batch sizes (0 and 1 included) in turn, so compiled code built for
one size is reused for others under its guards, and every result is compared with NumPy.
Static evaluation (graphc/framework/static_value.py) must never raise an op's run-time
error while building or compiling: a value it cannot know stays unknown.
"""
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from tests.conftest import BACKENDS

pytestmark = [pytest.mark.parametrize("backend", BACKENDS),
              # a pattern that falls back to the reference executor is not compiled code
              pytest.mark.filterwarnings("error:graphc could not compile")]

SIZES = (5, 0, 1, 2, 7)


def _pattern(build, want):
    return build, want


PATTERNS = {
    "range": _pattern(lambda x: gc.range(gc.shape(x)[0]),
                      lambda a: np.arange(a.shape[0])),
    "range_start_delta": _pattern(lambda x: gc.range(-1, gc.shape(x)[0] * 2, 3),
                                  lambda a: np.arange(-1, a.shape[0] * 2, 3)),
    "range_negative_delta": _pattern(lambda x: gc.range(gc.shape(x)[0], -1, -2),
                                     lambda a: np.arange(a.shape[0], -1, -2)),
    "range_int64": _pattern(lambda x: gc.range(gc.shape(x, out_type=gc.int64)[0]),
                            lambda a: np.arange(a.shape[0], dtype=np.int64)),
    "fill": _pattern(lambda x: gc.fill([gc.shape(x)[0], 2], 7.0),
                     lambda a: np.full((a.shape[0], 2), 7.0)),
    "zeros_of_shape": _pattern(lambda x: gc.zeros(gc.shape(x)), lambda a: np.zeros(a.shape)),
    "ones_of_expression": _pattern(lambda x: gc.ones([gc.shape(x)[0] * 2 + 1]),
                                   lambda a: np.ones(a.shape[0] * 2 + 1)),
    "ones_of_abs": _pattern(lambda x: gc.ones([gc.abs(gc.shape(x)[0] - 3)]),
                            lambda a: np.ones(abs(a.shape[0] - 3))),
    "zeros_of_maximum": _pattern(lambda x: gc.zeros([gc.maximum(gc.shape(x)[0], 2)]),
                                 lambda a: np.zeros(max(a.shape[0], 2))),
    "ones_of_minimum": _pattern(lambda x: gc.ones([gc.minimum(gc.shape(x)[0], 2)]),
                                lambda a: np.ones(min(a.shape[0], 2))),
    "dims_floordiv_mod": _pattern(lambda x: gc.shape(x)[0] % 3 + gc.shape(x)[0] // 2,
                                  lambda a: np.int32(a.shape[0] % 3 + a.shape[0] // 2)),
    "reshape_minus_one": _pattern(lambda x: gc.reshape(x, [-1]), lambda a: a.reshape(-1)),
    "reshape_minus_one_lead": _pattern(lambda x: gc.reshape(x, [-1, 1, 3]),
                                       lambda a: a.reshape(-1, 1, 3)),
    "tile": _pattern(lambda x: gc.tile(x, [2, gc.shape(x)[0] + 1]),
                     lambda a: np.tile(a, [2, a.shape[0] + 1])),
    "pad": _pattern(lambda x: gc.pad(x, [[1, 2], [0, 1]]), lambda a: np.pad(a, [[1, 2], [0, 1]])),
    "one_hot_depth_from_dims": _pattern(
        lambda x: gc.one_hot(gc.cast(x[:, 0], gc.int32), gc.shape(x)[0] + 2),
        lambda a: (a[:, :1].astype(int) == np.arange(a.shape[0] + 2)).astype(np.float32)),
    "slice_size_from_dims": _pattern(lambda x: gc.slice(x, [0, 1], [gc.shape(x)[0] // 2, 2]),
                                     lambda a: a[:a.shape[0] // 2, 1:3]),
    "strided_slice": _pattern(lambda x: x[1:-1:2, ::-1], lambda a: a[1:-1:2, ::-1]),
    "strided_slice_from_end": _pattern(lambda x: x[-3:], lambda a: a[-3:]),
    "concat": _pattern(lambda x: gc.concat([x, x * 2], 0), lambda a: np.concatenate([a, a * 2])),
    "split_even": _pattern(lambda x: gc.split(gc.concat([x, -x], 0), 2)[1], lambda a: -a),
    "split_sizes": _pattern(lambda x: gc.split(x, [1, 2], axis=1)[1], lambda a: a[:, 1:]),
    "stack": _pattern(lambda x: gc.stack([x, x], axis=1), lambda a: np.stack([a, a], 1)),
    "stacked_shape": _pattern(lambda x: gc.zeros(gc.stack([gc.shape(x)[0], 2])),
                              lambda a: np.zeros((a.shape[0], 2))),
    "broadcast_to_shape": _pattern(lambda x: gc.broadcast_to(x[:, :1], gc.shape(x)),
                                   lambda a: np.broadcast_to(a[:, :1], a.shape)),
    "expand_dims": _pattern(lambda x: gc.expand_dims(x, -1), lambda a: a[..., None]),
    "gather_reversed_range": _pattern(
        lambda x: gc.gather(x, gc.range(gc.shape(x)[0] - 1, -1, -1)), lambda a: a[::-1]),
    "mean_divisor": _pattern(lambda x: gc.reduce_mean(x, 1), lambda a: a.mean(1)),
    "size_as_float": _pattern(lambda x: gc.cast(gc.size(x), gc.float32) / 2.0,
                              lambda a: np.float32(a.size / 2.0)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_shape_arithmetic_over_an_unknown_batch(backend, name, dtype):
    build, want = PATTERNS[name]
    x = gc.placeholder(dtype, [None, 3])
    y = build(x)
    with gc.Session() as sess:
        for n in SIZES:
            a = (np.arange(n * 3) % 3).reshape(n, 3).astype(dtype)
            got = sess.run(y, {x: a})
            expected = np.asarray(want(a))
            assert got.shape == expected.shape, (name, n)
            np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=f"{name} n={n}")


def test_mean_over_an_empty_batch_is_nan(backend):
    x = gc.placeholder(gc.float32, [None, 3])
    m = gc.reduce_mean(x, 0)
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(m, {x: np.ones((4, 3), np.float32)}), 1.0)
        assert np.isnan(sess.run(m, {x: np.zeros((0, 3), np.float32)})).all()


def test_dynamic_rnn_over_an_unknown_batch(backend):
    x = gc.placeholder(gc.float32, [None, 4, 2])
    cell = gc.nn.rnn_cell.BasicRNNCell(3, activation=gc.identity)
    out, state = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
    # dynamic_rnn is a while_loop: the compiled backends run it on the reference executor
    # until control flow is compiled natively (issue 12's next step)
    with warnings.catch_warnings(), gc.Session() as sess:
        warnings.filterwarnings("ignore", "graphc could not compile")
        sess.run(gc.global_variables_initializer())
        kernel, bias = sess.run(cell.weights)
        for n in (3, 1, 0, 2):
            a = np.linspace(-1, 1, n * 8, dtype=np.float32).reshape(n, 4, 2)
            h = np.zeros((n, 3), np.float32)
            outs = []
            for t in range(4):
                h = np.concatenate([a[:, t], h], 1) @ kernel + bias
                outs.append(h)
            got_out, got_state = sess.run([out, state], {x: a})
            np.testing.assert_allclose(got_out, np.stack(outs, 1).reshape(n, 4, 3), rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_allclose(got_state, h, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------- shapeless placeholders, tutorial
TRAIN_X = np.array([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779, 6.182, 7.59, 2.167, 7.042,
                    10.791, 5.313, 7.997, 5.654, 9.27, 3.1])
TRAIN_Y = np.array([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366, 2.596, 2.53, 1.221, 2.827,
                    3.465, 1.65, 2.904, 2.42, 2.94, 1.3])


def _numpy_linear_regression(epochs, lr):
    """The tutorial's per-sample gradient descent on cost = sum((xW + b - y)^2) / (2n),
    in float32 as its variables are."""
    f = np.float32
    w, b, n = f(0.3), f(0.1), len(TRAIN_X)
    for _ in range(epochs):
        for x, y in zip(TRAIN_X.astype(f), TRAIN_Y.astype(f)):
            err = x * w + b - y
            w, b = w - f(lr) * (err * x / f(n)), b - f(lr) * (err / f(n))
    cost = np.sum((TRAIN_X.astype(f) * w + b - TRAIN_Y.astype(f)) ** 2) / f(2 * n)
    return w, b, cost


def test_linear_regression_tutorial_with_shapeless_placeholders(backend):
    X, Y = gc.placeholder("float"), gc.placeholder("float")
    W, b = gc.Variable(0.3, name="weight"), gc.Variable(0.1, name="bias")
    pred = gc.add(gc.multiply(X, W), b)
    n = len(TRAIN_X)
    cost = gc.reduce_sum(gc.pow(pred - Y, 2)) / (2 * n)
    train = gc.train.GradientDescentOptimizer(0.01).minimize(cost)
    epochs = 5
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(epochs):
            for x, y in zip(TRAIN_X, TRAIN_Y):  # Python floats: 0-D feeds
                sess.run(train, feed_dict={X: x, Y: y})
        got_cost = sess.run(cost, feed_dict={X: TRAIN_X, Y: TRAIN_Y})  # now 1-D feeds
        got_w, got_b = sess.run([W, b])
    want_w, want_b, want_cost = _numpy_linear_regression(epochs, 0.01)
    np.testing.assert_allclose([got_w, got_b, got_cost], [want_w, want_b, want_cost],
                               rtol=2e-5)


@pytest.mark.parametrize("value", [2.5, [1.0, -2.0], [[1.0], [2.0], [3.0]], np.zeros((0, 2))])
def test_shapeless_placeholder_fed_scalars_and_arrays(backend, value):
    x = gc.placeholder("float")
    total = gc.reduce_sum(x * x)
    grad, = gc.gradients(total, [x])
    mean = gc.reduce_mean(x)
    a = np.asarray(value, np.float32)
    with gc.Session() as sess:
        got_total, got_grad, got_mean = sess.run([total, grad, mean], {x: value})
    np.testing.assert_allclose(got_total, np.sum(a * a), rtol=1e-6)
    np.testing.assert_allclose(got_grad, 2 * a, rtol=1e-6)
    assert got_grad.shape == a.shape
    if a.size:
        np.testing.assert_allclose(got_mean, a.mean(), rtol=1e-6)
    else:
        assert np.isnan(got_mean)


def test_integer_division_by_zero_is_a_run_time_error_naming_the_op(backend):
    x = gc.placeholder(gc.float32, [None])
    d = gc.placeholder(gc.int32, [])
    q = gc.floordiv(gc.shape(x)[0], d, name="per_shard")
    with gc.Session() as sess:
        assert sess.run(q, {x: np.zeros(7, np.float32), d: 2}) == 3
        with pytest.raises(errors.InvalidArgumentError, match="per_shard") as e:
            sess.run(q, {x: np.zeros(7, np.float32), d: 0})
    assert "test_shape_arithmetic.py" in str(e.value)


def test_static_division_by_zero_is_reported_when_run_not_when_built(backend):
    q = gc.floormod(gc.constant([4, 5]), gc.constant(0), name="bad_mod")
    assert q.shape.as_list() == [2]  # building it raises nothing
    with gc.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match="bad_mod"):
            sess.run(q)


def test_integer_division_of_an_empty_tensor_by_zero_is_empty(backend):
    # TF computes nothing for an empty result: x % rank(x) over a scalar's empty axes
    x = gc.placeholder(gc.int32, [None])
    with gc.Session() as sess:
        got = sess.run(gc.floormod(x, 0), {x: np.zeros(0, np.int32)})
    assert got.shape == (0,) and got.dtype == np.int32


@pytest.mark.filterwarnings("default:graphc could not compile")
def test_inference_that_cannot_take_symbolic_dims_is_no_bare_type_error(backend, monkeypatch):
    # the safety net under every op: an inference failing on symbolic dims (a SymDim
    # where it expects an int) falls back to the reference executor, with a warning
    # naming the op and its line, and the run still gives TF's numbers
    from graphc.framework.op_def import OP_DEFS
    from graphc.framework.symbolic import SymDim
    op_def = OP_DEFS["Tile"]
    infer = op_def.infer

    def int_only(inputs, attrs):
        if any(isinstance(d, SymDim) for t in inputs if t.shape.ndims
               for d in t.shape.as_list()):
            raise TypeError("unsupported operand type(s): 'SymDim'")
        return infer(inputs, attrs)

    monkeypatch.setattr(op_def, "infer", int_only)
    x = gc.placeholder(gc.float32, [None, 2])
    y = gc.tile(x, [2, 1], name="tiled_rows")
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    with gc.Session() as sess:
        if backend == "reference":
            got = sess.run(y, {x: a})
        else:
            with pytest.warns(RuntimeWarning, match=r"(?s)could not compile.*tiled_rows.*"
                                                    r"test_shape_arithmetic.py"):
                got = sess.run(y, {x: a})
    np.testing.assert_array_equal(got, np.tile(a, [2, 1]))
