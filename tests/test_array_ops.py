"""Array ops against NumPy: values, static shapes (unknown dims too), gradients, errors."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def run(fn, *arrays):
    return run_graph(fn, *arrays)


def static(t):
    return t.shape.as_tuple_or_none()


# ----------------------------------------------------------------------- forward values
A7 = rand(7)
A23 = rand(2, 3)
A234 = rand(2, 3, 4)
A135 = rand(1, 3, 5)
A_BIG = rand(3, 5, 13)
IDX = np.array([[2, 0], [1, 1], [0, 2]], dtype=np.int32)

FORWARD = {
    "reshape_-1": (lambda x: gc.reshape(x, [-1, 2]), lambda a: a.reshape(-1, 2), [A234]),
    "reshape_scalar": (lambda x: gc.reshape(x, []), lambda a: a.reshape(()), [rand(1, 1)]),
    "reshape_big": (lambda x: gc.reshape(x, [13, -1]), lambda a: a.reshape(13, -1), [A_BIG]),
    "transpose_default": (lambda x: gc.transpose(x), lambda a: a.T, [A234]),
    "transpose_perm": (lambda x: gc.transpose(x, [1, 2, 0]), lambda a: a.transpose(1, 2, 0),
                       [A_BIG]),
    "expand_dims_0": (lambda x: gc.expand_dims(x, 0), lambda a: a[None], [A7]),
    "expand_dims_neg": (lambda x: gc.expand_dims(x, -1), lambda a: a[..., None], [A23]),
    "expand_dims_dim": (lambda x: gc.expand_dims(x, dim=1), lambda a: a[:, None], [A23]),
    "squeeze_all": (lambda x: gc.squeeze(x), lambda a: a.squeeze(), [A135]),
    "squeeze_axis": (lambda x: gc.squeeze(x, [0]), lambda a: a[0], [A135]),
    "squeeze_dims": (lambda x: gc.squeeze(x, squeeze_dims=-3), lambda a: a[0], [A135]),
    "concat_0": (lambda x, y: gc.concat([x, y], 0), lambda a, b: np.concatenate([a, b], 0),
                 [A23, rand(5, 3)]),
    "concat_neg": (lambda x, y: gc.concat([x, y, x], -1),
                   lambda a, b: np.concatenate([a, b, a], -1), [A23, rand(2, 1)]),
    "stack_0": (lambda x, y: gc.stack([x, y]), lambda a, b: np.stack([a, b]), [A23, A23 + 1]),
    "stack_last": (lambda x, y: gc.stack([x, y], axis=-1),
                   lambda a, b: np.stack([a, b], -1), [A7, A7 * 2]),
    "unstack_1": (lambda x: gc.unstack(x, axis=1), lambda a: list(np.moveaxis(a, 1, 0)),
                  [A234]),
    "unstack_num": (lambda x: gc.unstack(x, num=7), lambda a: list(a), [A7]),
    "split_even": (lambda x: gc.split(x, 3, axis=1), lambda a: np.split(a, 3, 1), [A234]),
    "split_sizes": (lambda x: gc.split(x, [1, -1, 2], axis=-1),
                    lambda a: np.split(a, [1, 11], -1), [A_BIG]),
    "slice": (lambda x: gc.slice(x, [1, 0, 1], [1, -1, 2]), lambda a: a[1:2, :, 1:3], [A234]),
    "slice_7": (lambda x: gc.slice(x, [3], [4]), lambda a: a[3:7], [A7]),
    "tile": (lambda x: gc.tile(x, [2, 3]), lambda a: np.tile(a, [2, 3]), [A23]),
    "tile_big": (lambda x: gc.tile(x, [1, 2, 1]), lambda a: np.tile(a, [1, 2, 1]), [A_BIG]),
    "pad_constant": (lambda x: gc.pad(x, [[1, 2], [0, 3]]),
                     lambda a: np.pad(a, [[1, 2], [0, 3]]), [A23]),
    "pad_value": (lambda x: gc.pad(x, [[0, 1], [2, 0]], constant_values=1.5),
                  lambda a: np.pad(a, [[0, 1], [2, 0]], constant_values=1.5), [A23]),
    "pad_reflect": (lambda x: gc.pad(x, [[1, 1], [2, 2]], "reflect"),
                    lambda a: np.pad(a, [[1, 1], [2, 2]], "reflect"), [A23]),
    "pad_symmetric": (lambda x: gc.pad(x, [[2, 1], [0, 3]], "SYMMETRIC"),
                      lambda a: np.pad(a, [[2, 1], [0, 3]], "symmetric"), [A23]),
    "pad_reflect_7": (lambda x: gc.pad(x, [[6, 5]], "REFLECT"),
                      lambda a: np.pad(a, [[6, 5]], "reflect"), [A7]),
    "broadcast_to": (lambda x: gc.broadcast_to(x, [4, 2, 3]),
                     lambda a: np.broadcast_to(a, (4, 2, 3)), [rand(2, 1)]),
    "stop_gradient": (lambda x: gc.stop_gradient(x), lambda a: a, [A23]),
    "zeros_like": (lambda x: gc.zeros_like(x), np.zeros_like, [A23]),
    "ones_like": (lambda x: gc.ones_like(x), np.ones_like, [A234]),
    "fill": (lambda x: gc.fill([2, 3], x), lambda a: np.full((2, 3), a), [np.float64(2.5)]),
    "gather_0": (lambda x: gc.gather(x, [4, 0, 4, 6]), lambda a: a[[4, 0, 4, 6]], [A7]),
    "gather_axis1": (lambda x: gc.gather(x, IDX, axis=1), lambda a: np.take(a, IDX, 1),
                     [A234]),
    "gather_axis_neg": (lambda x: gc.gather(x, 12, axis=-1), lambda a: a[..., 12], [A_BIG]),
    "gather_batch": (lambda x: gc.gather(x, [[0, 3], [2, 2]], axis=1, batch_dims=1),
                     lambda a: np.stack([a[0][[0, 3]], a[1][[2, 2]]]), [rand(2, 4, 3)]),
}


@pytest.mark.parametrize("case", sorted(FORWARD))
def test_forward_matches_numpy(case):
    fn, expected, arrays = FORWARD[case]
    out = run(fn, *arrays)
    want = expected(*arrays)
    if isinstance(want, list):
        assert len(out) == len(want)
        for o, w in zip(out, want):
            np.testing.assert_array_equal(o, w)
    else:
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(out, want)


# --------------------------------------------------------------- Tensor.__getitem__
KEYS = [
    0, -1, 1, np.int64(1), slice(None), slice(1, None), slice(None, None, -1),
    slice(None, None, 2), slice(-2, 0, -1), slice(5, -7, -2), slice(-100, 100),
    (0, 1), (slice(None), 2), (Ellipsis, 1), (Ellipsis, slice(None, None, -2)),
    (None, 0), (slice(None), None, -1, None), (1, Ellipsis, None), (-2, slice(1, 3), -4),
    Ellipsis, (slice(3, 1), 0), (slice(None, None, -3), Ellipsis, slice(0, 1)),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_getitem_matches_numpy(key):
    a = rand(3, 4, 5)
    g = gc.Graph()
    with g.as_default():
        known = gc.placeholder(gc.float64, [3, 4, 5])
        unknown = gc.placeholder(gc.float64, [None, 4, None])
        anyrank = gc.placeholder(gc.float64)
        outs = [known[key], unknown[key], anyrank[key]]
        want = a[key]
        assert static(outs[0]) == want.shape
        assert outs[1].shape.is_compatible_with(want.shape)
        assert outs[1].shape.ndims == want.ndim
        with gc.Session() as sess:
            for v in sess.run(outs, {known: a, unknown: a, anyrank: a}):
                np.testing.assert_array_equal(v, want)


def test_getitem_tensor_index_and_tensor_bounds():
    a = rand(5, 3)
    x = gc.placeholder(gc.float64, [None, 3])
    i = gc.placeholder(gc.int32, [])
    j = gc.constant(1, gc.int64)
    with gc.Session() as sess:
        feed = {x: a, i: 3}
        np.testing.assert_array_equal(sess.run(x[i], feed), a[3])
        np.testing.assert_array_equal(sess.run(x[i, 1:], feed), a[3, 1:])
        np.testing.assert_array_equal(sess.run(x[1:i], feed), a[1:3])
        np.testing.assert_array_equal(sess.run(x[:, j], feed), a[:, 1])
        np.testing.assert_array_equal(sess.run(x[-i], feed), a[-3])
    assert static(x[i]) == (3,)
    assert static(x[1:i]) == (None, 3)


def test_getitem_by_a_known_dimension():
    """TF1 code slices by a static dim (`w[:x.shape[1]]`): a known Dimension is its int, an
    unknown one is refused."""
    a = rand(5, 4)
    w = gc.constant(a)
    x = gc.placeholder(gc.float64, [None, 3])
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(w[:x.shape[1]]), a[:3])
        np.testing.assert_array_equal(sess.run(w[x.shape[1]]), a[3])
    with pytest.raises(TypeError, match="valid indices"):
        w[:x.shape[0]]


def test_getitem_bad_keys():
    x = gc.placeholder(gc.float32, [3, 4])
    for bad in [1.5, "a", [0, 1], gc.constant([0, 1]), gc.constant(1.0), True]:
        with pytest.raises(TypeError):
            x[bad]
    with pytest.raises(ValueError, match="out of bounds"):
        x[3]
    with pytest.raises(ValueError, match="Index out of range"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match="Multiple ellipses"):
        x[..., 0, ...]
    with pytest.raises(ValueError, match="non-zero"):
        x[::0]


def test_getitem_out_of_bounds_at_run_time():
    x = gc.placeholder(gc.float32, [None, 4])
    i = gc.placeholder(gc.int32, [])
    with gc.Session() as sess:
        a = np.zeros((2, 4), np.float32)
        with pytest.raises(gc.errors.InvalidArgumentError, match="out of bounds"):
            sess.run(x[2], {x: a})
        with pytest.raises(gc.errors.InvalidArgumentError, match="out of bounds"):
            sess.run(x[:, i], {x: a, i: -5})
        np.testing.assert_array_equal(sess.run(x[:, i], {x: a + 1, i: -4}), np.ones(2))


def test_strided_slice_masks():
    a = rand(4, 5, 6)
    cases = [
        (dict(begin=[1, 0], end=[3, 0], strides=[1, 1], end_mask=2), a[1:3, :]),
        (dict(begin=[0, 2], end=[0, 0], strides=[1, -1], begin_mask=1, end_mask=3),
         a[:, 2::-1]),
        (dict(begin=[0, 1], end=[0, 2], strides=[1, 1], ellipsis_mask=1), a[..., 1:2]),
        (dict(begin=[0, 3], end=[0, 4], strides=[1, 1], ellipsis_mask=1, shrink_axis_mask=2),
         a[..., 3]),
        (dict(begin=[0, -1, 0], end=[0, 0, 0], strides=[1, 1, 1], new_axis_mask=1,
              shrink_axis_mask=2, end_mask=4, begin_mask=4), a[None, -1, :]),
        (dict(begin=[1], end=[100], strides=[2]), a[1:100:2]),
    ]
    for kwargs, want in cases:
        out = run(lambda x: gc.strided_slice(x, **kwargs), a)
        np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------- static shapes
def test_static_shapes_with_unknown_dims():
    x = gc.placeholder(gc.float32, [None, 3])
    y = gc.placeholder(gc.float32, [None, 4, 5])
    u = gc.placeholder(gc.float32)
    assert static(gc.reshape(x, [-1])) == (None,)
    assert static(gc.reshape(y, [-1, 20])) == (None, 20)
    assert static(gc.reshape(y, gc.stack([gc.shape(y)[0], -1]))) == (None, None)
    assert static(gc.reshape(y, gc.concat([gc.shape(y)[:1], [20]], 0))) == (None, 20)
    assert static(gc.reshape(u, [2, 3])) == (2, 3)
    assert static(gc.reshape(u, gc.placeholder(gc.int32, [3]))) == (None, None, None)
    assert static(gc.transpose(y)) == (5, 4, None)
    assert static(gc.transpose(u)) is None
    assert static(gc.expand_dims(x, 1)) == (None, 1, 3)
    assert static(gc.squeeze(gc.placeholder(gc.float32, [None, 1, 3]), [1])) == (None, 3)
    assert static(gc.squeeze(gc.placeholder(gc.float32, [None, 1, 3]))) is None
    assert static(gc.concat([x, x], 0)) == (None, 3)
    assert static(gc.concat([x, gc.placeholder(gc.float32, [2, None])], 1)) == (2, None)
    assert static(gc.concat([x, x], 1)) == (None, 6)
    assert static(gc.stack([x, x], 1)) == (None, 2, 3)
    assert [static(t) for t in gc.unstack(x, axis=1)] == [(None,)] * 3
    assert [static(t) for t in gc.split(y, [1, -1], 1)] == [(None, 1, 5), (None, 3, 5)]
    assert [static(t) for t in gc.split(y, 5, -1)] == [(None, 4, 1)] * 5
    assert static(gc.slice(y, [0, 1, 0], [-1, 2, 3])) == (None, 2, 3)
    assert static(gc.slice(y, [0, 1, 0], [1, -1, -1])) == (1, 3, 5)
    assert static(gc.tile(x, [2, 2])) == (None, 6)
    assert static(gc.pad(x, [[1, 1], [2, 0]])) == (None, 5)
    assert static(gc.pad(x, [[1, 1], [2, 0]], "REFLECT")) == (None, 5)
    assert static(gc.gather(y, [0, 1], axis=1)) == (None, 2, 5)
    assert static(gc.gather(y, gc.placeholder(gc.int32, [None, 2]))) == (None, 2, 4, 5)
    assert static(gc.one_hot(gc.placeholder(gc.int32, [None]), 4)) == (None, 4)
    assert static(gc.one_hot(gc.placeholder(gc.int32, [None, 2]), 4, axis=1)) == (None, 4, 2)
    assert static(gc.broadcast_to(gc.placeholder(gc.float32, [None, 1]), [2, 3])) == (2, 3)
    assert static(gc.shape(y)) == (3,)
    assert static(gc.shape(u)) == (None,)
    assert static(gc.shape_n([x, y])[1]) == (3,)
    assert static(gc.size(x)) == () and static(gc.rank(u)) == ()
    assert static(gc.fill(gc.shape(y), 1.0)) == (None, 4, 5)
    assert static(gc.zeros([2, 3])) == (2, 3)
    assert static(gc.ones_like(y)) == (None, 4, 5)
    assert static(gc.range(gc.placeholder(gc.int32, []))) == (None,)


def test_dtypes():
    x = gc.placeholder(gc.float64, [2])
    assert gc.shape(x).dtype == gc.int32
    assert gc.shape(x, out_type=gc.int64).dtype == gc.int64
    assert gc.size(x, out_type=gc.int64).dtype == gc.int64
    assert gc.rank(x).dtype == gc.int32
    assert gc.zeros([2]).dtype == gc.float32
    assert gc.ones([2], gc.int64).dtype == gc.int64
    assert gc.zeros_like(x).dtype == gc.float64
    assert gc.zeros_like(x, dtype=gc.int32).dtype == gc.int32
    assert gc.ones_like(x, dtype=gc.bool).dtype == gc.bool
    assert gc.one_hot([1], 3).dtype == gc.float32
    assert gc.one_hot([1], 3, on_value=gc.constant(5)).dtype == gc.int32
    assert gc.one_hot([1], 3, dtype=gc.float64).dtype == gc.float64
    assert gc.range(5).dtype == gc.int32
    assert gc.range(0, 5, 0.5).dtype == gc.float32
    assert gc.range(2.0).dtype == gc.float32
    assert gc.range(gc.constant(5, gc.int64)).dtype == gc.int64
    assert gc.range(gc.constant(5, gc.int64), delta=gc.constant(1.0, gc.float64)).dtype == \
        gc.float64
    assert gc.range(4, dtype=gc.float64).dtype == gc.float64
    assert gc.stack([x, [1, 2]]).dtype == gc.float64
    assert gc.concat([[1, 2], x], 0).dtype == gc.float64
    assert gc.newaxis is None


def test_shape_size_rank_values():
    a = rand(2, 7, 3)
    x = gc.placeholder(gc.float64, [None, 7, None])
    y = gc.placeholder(gc.float64)
    with gc.Session() as sess:
        s, s64, n, r, sn = sess.run([gc.shape(x), gc.shape(x, out_type=gc.int64), gc.size(y),
                                     gc.rank(y), gc.shape_n([x, y])], {x: a, y: a[0]})
    np.testing.assert_array_equal(s, [2, 7, 3])
    assert s.dtype == np.int32 and s64.dtype == np.int64
    assert n == 21 and r == 2
    np.testing.assert_array_equal(sn[1], [7, 3])


def test_zeros_ones_fill_values():
    x = gc.placeholder(gc.int32, [None])
    with gc.Session() as sess:
        z, o, f, b = sess.run([gc.zeros(x), gc.ones([2, 1], gc.int64), gc.fill(x, 7),
                               gc.zeros([2], gc.bool)], {x: [3, 1]})
    assert z.shape == (3, 1) and z.dtype == np.float32 and not z.any()
    np.testing.assert_array_equal(o, np.ones((2, 1), np.int64))
    np.testing.assert_array_equal(f, np.full((3, 1), 7, np.int32))
    assert b.dtype == np.bool_ and not b.any()


@pytest.mark.parametrize("args,want", [
    ((5,), np.arange(5, dtype=np.int32)),
    ((2, 9, 3), np.arange(2, 9, 3, dtype=np.int32)),
    ((7, 1, -2), np.arange(7, 1, -2, dtype=np.int32)),
    ((0, 1.0, 0.25), np.arange(0, 1, 0.25, dtype=np.float32)),
    ((3, 3), np.zeros([0], np.int32)),
])
def test_range_values(args, want):
    out = run(lambda: gc.range(*args))
    assert out.dtype == want.dtype
    np.testing.assert_allclose(out, want)


def test_range_errors():
    with pytest.raises(ValueError, match="delta != 0"):
        gc.range(0, 5, 0)
    with pytest.raises(ValueError, match="start <= limit"):
        gc.range(5, 1)
    d = gc.placeholder(gc.int32, [])
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="delta != 0"):
            sess.run(gc.range(0, 5, d), {d: 0})


def test_one_hot_values():
    idx = np.array([[0, 3], [-1, 2], [5, 1]], np.int32)
    eye = np.eye(4, dtype=np.float32)
    want = np.where((idx[..., None] >= 0) & (idx[..., None] < 4), eye[np.clip(idx, 0, 3)], 0)
    x = gc.placeholder(gc.int32, [None, 2])
    with gc.Session() as sess:
        out, on_off, ax0 = sess.run([
            gc.one_hot(x, 4), gc.one_hot(x, 4, on_value=5, off_value=-1, dtype=gc.int64),
            gc.one_hot(x, 4, axis=0)], {x: idx})
    np.testing.assert_array_equal(out, want)  # -1 and 5 give all-off rows
    np.testing.assert_array_equal(on_off, np.where(want == 1, 5, -1))
    assert on_off.dtype == np.int64
    np.testing.assert_array_equal(ax0, np.moveaxis(want, -1, 0))


def test_stop_gradient_has_no_gradient():
    x = gc.placeholder(gc.float32, [3])
    y = gc.reduce_sum(gc.stop_gradient(x) * x)
    g = gc.gradients(y, x)[0]
    assert gc.gradients(gc.reduce_sum(gc.stop_gradient(x)), x) == [None]
    a = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(run_on(g, {x: a}), a)


def run_on(t, feed):
    with gc.Session(graph=t.graph) as sess:
        return sess.run(t, feed)


def test_non_differentiable_ops():
    x = gc.placeholder(gc.float32, [None, 3])
    for t in [gc.shape(x), gc.size(x), gc.rank(x), gc.zeros_like(x), gc.ones_like(x)]:
        y = gc.reduce_sum(gc.cast(t, gc.float32))
        assert gc.gradients(y, x) == [None]
    on = gc.placeholder(gc.float32, [])
    assert gc.gradients(gc.reduce_sum(gc.one_hot([1, 2], 3, on_value=on, off_value=0.0)),
                        on) == [None]


# -------------------------------------------------------------------------- gradients
GRADS = {
    "reshape": (lambda x: gc.reshape(x, [3, -1]), [rand(2, 3)]),
    "transpose": (lambda x: gc.transpose(x, [2, 0, 1]), [rand(2, 3, 1)]),
    "transpose_default": (lambda x: gc.transpose(x), [rand(2, 3)]),
    "expand_dims": (lambda x: gc.expand_dims(x, 1), [rand(3, 2)]),
    "squeeze": (lambda x: gc.squeeze(x, [1]), [rand(3, 1, 2)]),
    "concat": (lambda x, y: gc.concat([x, y, x], 1), [rand(2, 1), rand(2, 3)]),
    "stack": (lambda x, y: gc.stack([x, y], axis=1), [rand(3), rand(3)]),
    "unstack": (lambda x: gc.unstack(x, axis=1)[0] * 2.0 + gc.unstack(x, axis=1)[2],
                [rand(2, 3)]),
    "split": (lambda x: gc.split(x, 3, axis=1)[2] * gc.split(x, 3, axis=1)[0],
              [rand(2, 3)]),
    "split_v": (lambda x: gc.split(x, [1, -1], axis=0)[1], [rand(3, 2)]),
    "slice": (lambda x: gc.slice(x, [1, 0], [-1, 2]), [rand(3, 3)]),
    "strided_slice": (lambda x: x[::-2, 1, None], [rand(5, 3)]),
    "getitem_ellipsis": (lambda x: x[..., 1:] * x[0, 1:], [rand(3, 3)]),
    "gather": (lambda x: gc.gather(x, [2, 0, 2]), [rand(3, 2)]),
    "gather_axis": (lambda x: gc.gather(x, [[1, 1], [0, 2]], axis=-1), [rand(2, 3)]),
    "gather_batch": (lambda x: gc.gather(x, [[1, 1], [0, 2]], axis=1, batch_dims=1),
                     [rand(2, 3)]),
    "tile": (lambda x: gc.tile(x, [2, 3]), [rand(2, 1)]),
    "pad": (lambda x: gc.pad(x, [[1, 0], [2, 1]]), [rand(2, 2)]),
    "pad_value": (lambda x, c: gc.pad(x, [[1, 0], [0, 2]], constant_values=c),
                  [rand(2, 2), rand()]),
    "pad_reflect": (lambda x: gc.pad(x, [[2, 1], [1, 1]], "REFLECT"), [rand(3, 2)]),
    "pad_symmetric": (lambda x: gc.pad(x, [[2, 3], [0, 1]], "symmetric"), [rand(3, 2)]),
    "broadcast_to": (lambda x: gc.broadcast_to(x, [2, 3, 2]), [rand(3, 1)]),
    "fill": (lambda v: gc.fill([2, 3], v), [rand()]),
}


@pytest.mark.parametrize("case", sorted(GRADS))
def test_gradients(case):
    fn, inputs = GRADS[case]
    check_gradients(fn, inputs)


@pytest.mark.parametrize("case", ["gather", "gather_axis", "gather_batch", "strided_slice",
                                  "pad_reflect", "pad", "tile", "slice", "concat", "split",
                                  "unstack", "broadcast_to", "transpose"])
def test_second_order(case):
    fn, inputs = GRADS[case]
    check_second_order(lambda *xs: fn(*xs) * fn(*xs), inputs)


@pytest.mark.parametrize("fn,shape,value", [
    (lambda x: gc.reshape(x, [-1]), [None, 3], rand(2, 3)),
    (lambda x: gc.transpose(x), [None, 3], rand(2, 3)),
    (lambda x: gc.expand_dims(x, 0), [None, 3], rand(2, 3)),
    (lambda x: gc.squeeze(x, [1]), [None, 1], rand(3, 1)),
    (lambda x: gc.concat([x, x * 2.0], 0), [None, 3], rand(2, 3)),
    (lambda x: gc.split(x, [1, -1], 0)[1], [None, 3], rand(3, 3)),
    (lambda x: gc.slice(x, [1, 0], [-1, 2]), [None, 3], rand(3, 3)),
    (lambda x: x[1:, ::-1], [None, 3], rand(3, 3)),
    (lambda x: gc.gather(x, [0, 0, 1], axis=0), [None, 3], rand(2, 3)),
    (lambda x: gc.tile(x, [2, 1]), [None, 3], rand(2, 3)),
    (lambda x: gc.pad(x, [[1, 0], [2, 1]]), [None, 3], rand(2, 3)),
    (lambda x: gc.pad(x, [[1, 0], [2, 1]], "REFLECT"), [None, 3], rand(2, 3)),
    (lambda x: gc.broadcast_to(x, [2, 4, 3]), [None, 3], rand(1, 3)),
    (lambda x: gc.transpose(x), None, rand(2, 3)),
    (lambda x: gc.tile(x, [2, 1]), None, rand(2, 3)),
    (lambda x: gc.reshape(x, [-1]), None, rand(2, 3)),
    (lambda x: x[:, 1], None, rand(2, 3)),
    (lambda x: gc.gather(x, [[1], [0]], axis=1, batch_dims=1), [None, 3], rand(2, 3)),
])
def test_gradients_with_unknown_dims(fn, shape, value):
    """The gradient graph built on a [None, 3] placeholder equals the fully known one."""
    want = None
    for s in (value.shape, shape):
        g = gc.Graph()
        with g.as_default():
            x = gc.placeholder(gc.float64, s)
            y = fn(x)
            dx = gc.gradients(gc.reduce_sum(y * y), x)[0]
            assert dx.shape.is_compatible_with(value.shape)
            dx = gc.convert_to_tensor(dx)  # a gather's IndexedSlices compared dense
            with gc.Session() as sess:
                got = sess.run(dx, {x: value})
        want = got if want is None else np.testing.assert_allclose(got, want) or want


def test_concat_gradient_with_dynamic_axis():
    a, b = rand(2, 3), rand(2, 1)
    x, y = gc.placeholder(gc.float64, [2, 3]), gc.placeholder(gc.float64, [2, 1])
    axis = gc.placeholder(gc.int32, [])
    z = gc.concat([x, y], axis)
    dx, dy = gc.gradients(gc.reduce_sum(z * z), [x, y])
    with gc.Session() as sess:
        gx, gy = sess.run([dx, dy], {x: a, y: b, axis: -1})
    np.testing.assert_allclose(gx, 2 * a)
    np.testing.assert_allclose(gy, 2 * b)


def test_gather_gradient_repeated_indices():
    x = gc.placeholder(gc.float64, [4, 2])
    g = gc.gradients(gc.reduce_sum(gc.gather(x, [3, 3, 0, 3])), x)[0]
    g = gc.convert_to_tensor(g)  # an IndexedSlices, as in TF1
    want = np.array([[1, 1], [0, 0], [0, 0], [3, 3]], np.float64)
    np.testing.assert_array_equal(run_on(g, {x: rand(4, 2)}), want)


# ------------------------------------------------------------------------------- errors
def test_gather_out_of_range_is_a_run_time_error_and_session_survives():
    params = gc.placeholder(gc.float32, [None, 3])
    idx = gc.placeholder(gc.int32, [None])
    out = gc.gather(params, idx)
    grad = gc.convert_to_tensor(gc.gradients(gc.reduce_sum(out), params)[0])
    out1 = gc.gather(params, idx, axis=1)
    p = np.arange(6, dtype=np.float32).reshape(2, 3)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError,
                           match=r"indices\[1\] = 2 is not in \[0, 2\)") as e:
            sess.run(out, {params: p, idx: [0, 2]})
        assert "GatherV2" in str(e.value)
        with pytest.raises(gc.errors.InvalidArgumentError, match=r"= -1 is not in \[0, 2\)"):
            sess.run(out, {params: p, idx: [-1]})  # never NumPy's wraparound
        with pytest.raises(gc.errors.InvalidArgumentError, match=r"not in \[0, 2\)"):
            sess.run(grad, {params: p, idx: [5]})
        with pytest.raises(gc.errors.InvalidArgumentError, match=r"= 3 is not in \[0, 3\)"):
            sess.run(out1, {params: p, idx: [3]})
        np.testing.assert_array_equal(sess.run(out, {params: p, idx: [1, 0]}), p[[1, 0]])
        # an empty axis: every index is bad, and nothing is read from the empty buffer
        wide = gc.placeholder(gc.float32, [None, 100_000])
        with pytest.raises(gc.errors.InvalidArgumentError, match=r"= 0 is not in \[0, 0\)"):
            sess.run(gc.gather(wide, idx) * 2.0,
                     {wide: np.zeros((0, 100_000), np.float32), idx: [0, 0]})
        assert sess.run(out, {params: p[:0], idx: []}).shape == (0, 3)


@pytest.mark.parametrize("build", [
    lambda: gc.reshape(gc.zeros([2, 3]), [4]),
    lambda: gc.reshape(gc.zeros([2, 3]), [-1, 4]),
    lambda: gc.reshape(gc.zeros([2, 3]), [-1, -1]),
    lambda: gc.transpose(gc.zeros([2, 3]), [0, 0]),
    lambda: gc.transpose(gc.zeros([2, 3]), [0, 1, 2]),
    lambda: gc.expand_dims(gc.zeros([2, 3]), 3),
    lambda: gc.squeeze(gc.zeros([2, 3]), [1]),
    lambda: gc.squeeze(gc.zeros([2, 3]), [2]),
    lambda: gc.concat([gc.zeros([2, 3]), gc.zeros([3, 3])], 1),
    lambda: gc.concat([gc.zeros([2, 3]), gc.zeros([3])], 0),
    lambda: gc.concat([gc.zeros([2, 3]), gc.zeros([2, 3])], 2),
    lambda: gc.stack([gc.zeros([2]), gc.zeros([3])]),
    lambda: gc.unstack(gc.placeholder(gc.float32, [None, 2])),
    lambda: gc.split(gc.zeros([2, 3]), 2, axis=1),
    lambda: gc.split(gc.zeros([2, 3]), [1, 1], axis=1),
    lambda: gc.split(gc.zeros([2, 3]), [-1, -1], axis=1),
    lambda: gc.slice(gc.zeros([2, 3]), [1, 1], [2, 1]),
    lambda: gc.slice(gc.zeros([2, 3]), [0], [1]),
    lambda: gc.tile(gc.zeros([2, 3]), [2]),
    lambda: gc.pad(gc.zeros([2, 3]), [[1, 1]]),
    lambda: gc.pad(gc.zeros([2, 3]), [[2, 0], [0, 0]], "REFLECT"),
    lambda: gc.pad(gc.zeros([2, 3]), [[3, 0], [0, 0]], "SYMMETRIC"),
    lambda: gc.pad(gc.zeros([2, 3]), [[0, 0], [0, 0]], "WRAP"),
    lambda: gc.broadcast_to(gc.zeros([2, 3]), [3, 3]),
    lambda: gc.gather(gc.zeros([2, 3]), [0], axis=2),
    lambda: gc.one_hot([0], 3, axis=2),
    lambda: gc.fill([2, -1], 1.0),
    lambda: gc.expand_dims(gc.zeros([2]), axis=0, dim=0),
])
def test_bad_static_input_raises_value_error(build):
    with pytest.raises(ValueError):
        build()


def test_bad_dtypes_raise_type_error():
    x = gc.zeros([2, 3])
    with pytest.raises(TypeError):
        gc.reshape(x, [2.5, 3.0])
    with pytest.raises(TypeError):
        gc.gather(x, [0.5])
    with pytest.raises(TypeError):
        gc.concat([x, gc.zeros([2, 3], gc.int32)], 0)
    with pytest.raises(TypeError):
        gc.stack([x, gc.zeros([2, 3], gc.float64)])


def test_error_message_names_op_and_shapes():
    with pytest.raises(ValueError, match=r"Cannot reshape a tensor with 6 elements.*'Reshape'"
                                         r".*input shapes: \[2,3\], \[1\]"):
        gc.reshape(gc.zeros([2, 3]), [4])


@pytest.mark.parametrize("build,feed,match", [
    (lambda x, s: gc.reshape(x, s), [5], "tensor with 6 values, but the requested shape has 5"),
    (lambda x, s: gc.reshape(x, s), [-1, 4], "requires a multiple of 4"),
    (lambda x, s: gc.reshape(x, s), [-1, -1], "Only one input size may be -1"),
    (lambda x, s: gc.slice(x, s, [0, 1]), [3, 0], r"Expected begin\[0\] in \[0, 2\]"),
    (lambda x, s: gc.slice(x, [0, 0], s), [1, 4], r"Expected size\[1\] in \[0, 3\]"),
    (lambda x, s: gc.tile(x, s), [2, -1], "non-negative"),
    (lambda x, s: gc.transpose(x, s), [1, 1], "not a permutation"),
    (lambda x, s: gc.broadcast_to(x, s), [3, 3], "Incompatible shapes"),
    (lambda x, s: gc.pad(x, gc.reshape(s, [2, 1]) + [[0, 0]], "REFLECT"), [2, 0],
     "no greater than"),
    (lambda x, s: gc.split(x, s, axis=1, num=2), [1, 1], "split_dim"),
    (lambda x, s: gc.fill(s, 1.0), [2, -3], "must be >= 0"),
])
def test_bad_data_raises_invalid_argument_at_run_time(build, feed, match):
    x = gc.placeholder(gc.float32, [None, 3])
    s = gc.placeholder(gc.int32, [None])
    out = build(x, s)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match=match):
            sess.run(out, {x: np.zeros((2, 3), np.float32), s: feed})


def test_squeeze_of_non_one_dim_at_run_time():
    x = gc.placeholder(gc.float32, [None, 3])
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="Can not squeeze dim"):
            sess.run(gc.squeeze(x, [0]), {x: np.zeros((2, 3), np.float32)})
        assert sess.run(gc.squeeze(x, [0]), {x: np.zeros((1, 3), np.float32)}).shape == (3,)


def test_names():
    x = gc.placeholder(gc.float32, [2, 3], name="x")
    assert gc.reshape(x, [6], name="r").op.name == "r"
    assert x[0].op.name == "strided_slice"
    assert x[0].op.type == "StridedSlice"
    assert gc.concat([x, x], 0).op.name == "concat"
    assert gc.stack([x, x]).op.name == "stack"
    assert gc.zeros([2], name="z").op.name == "z"
    assert gc.transpose(x).op.name == "transpose"
    assert gc.split(x, 3, 1)[0].op.type == "Split"
    assert gc.split(x, [1, 2], 1)[0].op.type == "SplitV"
    assert gc.pad(x, [[0, 0], [1, 1]], "reflect").op.type == "MirrorPad"
    assert gc.pad(x, [[0, 0], [1, 1]], constant_values=2.0).op.type == "PadV2"


def test_gradient_through_tensor_index():
    a = rand(4, 3)
    x = gc.placeholder(gc.float64, [None, 3])
    i = gc.placeholder(gc.int64, [])
    g = gc.gradients(gc.reduce_sum(x[i] * x[i]), x)[0]
    want = np.zeros_like(a)
    want[-1] = 2 * a[-1]
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(g, {x: a, i: -1}), want)


@pytest.mark.parametrize("fn,want", [
    (lambda x: gc.slice(x, [1, 0], [0, -1]), np.zeros((0, 3))),
    (lambda x: gc.gather(x, np.zeros([0], np.int32)), np.zeros((0, 3))),
    (lambda x: gc.split(x, [2, 0], 0)[1], np.zeros((0, 3))),
    (lambda x: x[2:1], np.zeros((0, 3))),
    (lambda x: gc.tile(x, [0, 1]), np.zeros((0, 3))),
    (lambda x: gc.reshape(x[:0], [-1, 3, 0]), None),
])
def test_empty_results(fn, want):
    if want is None:
        with pytest.raises(ValueError):
            fn(gc.placeholder(gc.float64, [2, 3]))
        return
    out = run(fn, rand(2, 3))
    np.testing.assert_array_equal(out, want)


def test_integer_params_and_int64_indices():
    p = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = run(lambda x: gc.gather(x, gc.constant([2, 0], gc.int64), axis=0), p)
    np.testing.assert_array_equal(out, p[[2, 0]])
    assert out.dtype == np.int32
    out = run(lambda x: gc.one_hot(x, gc.constant(3)), np.array([2, 0], np.int64))
    np.testing.assert_array_equal(out, np.eye(3, dtype=np.float32)[[2, 0]])
    out = run(lambda x: gc.pad(x, [[1, 0], [0, 1]], "symmetric"), p)
    np.testing.assert_array_equal(out, np.pad(p, [[1, 0], [0, 1]], "symmetric"))


def test_shape_tensors_fold_for_static_inference():
    x = gc.placeholder(gc.float32, [None, 3, 5])
    n = gc.shape(x)[0]
    assert static(gc.reshape(x, gc.stack([n, 15]))) == (None, 15)
    assert static(gc.zeros(gc.shape(x)[1:])) == (3, 5)
    assert static(gc.reshape(x, [-1, gc.shape(x)[2]])) == (None, 5)
    assert static(gc.tile(gc.zeros([2]), gc.shape(x)[1:2])) == (6,)


def test_shape_element_with_run_time_index():
    x = gc.placeholder(gc.float32, [None, 3])
    i = gc.placeholder(gc.int32, [])
    y = gc.reshape(x, gc.stack([gc.shape(x)[i], -1]))
    assert static(y) == (None, None)
    with gc.Session() as sess:
        assert sess.run(y, {x: np.zeros((2, 3), np.float32), i: 1}).shape == (3, 2)


def test_autopacking_lists_of_tensors_and_numbers():
    x = gc.placeholder(gc.float32, [])
    t = gc.convert_to_tensor([[x, 1], [2, 3]])
    assert t.dtype == gc.float32 and static(t) == (2, 2)
    np.testing.assert_array_equal(run_on(t, {x: 5.0}), [[5, 1], [2, 3]])


# ------------------------------------------------------------- constant(value, shape)
@pytest.mark.parametrize("value,shape,dtype,expected", [
    ([1, 2], [2, 3], None, [[1, 2, 2], [2, 2, 2]]),          # fewer: the last value repeats
    (7.5, [2, 2], gc.float64, np.full((2, 2), 7.5)),          # a scalar fills
    ([[1.0], [2.0]], [2], gc.float32, [1.0, 2.0]),             # as many: reshaped
    (np.arange(6), [3, 2], gc.int64, np.arange(6).reshape(3, 2)),
    ([3], [1, 1, 1], gc.int32, [[[3]]]),
    ([], [3], gc.float32, [0.0, 0.0, 0.0]),                    # none: zeros
    ([1, 2, 3], [0, 4], gc.float32, np.zeros((0, 4))),         # no elements: value ignored
    ([True, False], [3], gc.bool, [True, False, False]),
])
def test_constant_with_shape_follows_tf1(value, shape, dtype, expected):
    t = gc.constant(value, dtype=dtype, shape=shape)
    expected = np.asarray(expected, dtype=(dtype or gc.int32).as_numpy_dtype)
    assert t.shape.as_list() == list(shape)
    out = gc.Session().run(t)
    assert out.dtype == expected.dtype and out.shape == tuple(shape)
    np.testing.assert_array_equal(out, expected)


def test_constant_with_shape_errors():
    with pytest.raises(ValueError, match="Too many elements provided. Takes at most 2, but got 3"):
        gc.constant([1, 2, 3], shape=[2])
    with pytest.raises(TypeError, match=r"Expected Tensor's shape: \(2, 3\), got \(2,\)"):
        gc.constant([1, 2], shape=[2, 3], verify_shape=True)
    assert gc.constant([1, 2], shape=[2], verify_shape=True).shape.as_list() == [2]
