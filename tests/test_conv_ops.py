"""gc.nn.conv2d, conv2d_transpose, max_pool(2d), avg_pool(2d) and their gradient ops."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph


# ------------------------------------------------- loop references (tiny sizes only)
def ref_geometry(size, k, stride, dilation, padding):
    """(output size, pad before) written from TF's documented formulas."""
    eff = (k - 1) * dilation + 1
    if padding == "VALID":
        return -(-(size - eff + 1) // stride), 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + eff - size, 0) // 2


def ref_conv2d(x, w, stride, padding, dilation=1):
    n, h, wd, _ = x.shape
    kh, kw, _, co = w.shape
    oh, pt = ref_geometry(h, kh, stride, dilation, padding)
    ow, pl = ref_geometry(wd, kw, stride, dilation, padding)
    y = np.zeros((n, oh, ow, co))
    for r in range(oh):
        for c in range(ow):
            for i in range(kh):
                for j in range(kw):
                    ih, iw = r * stride - pt + i * dilation, c * stride - pl + j * dilation
                    if 0 <= ih < h and 0 <= iw < wd:
                        y[:, r, c, :] += x[:, ih, iw, :] @ w[i, j]
    return y


def ref_conv2d_transpose(dy, w, out_hw, stride, padding):
    """Each input pixel spreads value @ filter^T over the output window it maps to."""
    n, oh, ow, _ = dy.shape
    kh, kw, c_out, _ = w.shape
    h, wd = out_hw
    _, pt = ref_geometry(h, kh, stride, 1, padding)
    _, pl = ref_geometry(wd, kw, stride, 1, padding)
    out = np.zeros((n, h, wd, c_out))
    for r in range(oh):
        for c in range(ow):
            for i in range(kh):
                for j in range(kw):
                    ih, iw = r * stride - pt + i, c * stride - pl + j
                    if 0 <= ih < h and 0 <= iw < wd:
                        out[:, ih, iw, :] += dy[:, r, c, :] @ w[i, j].T
    return out


def ref_pool(x, k, stride, padding, reduce):
    """k, stride: ints or (height, width) pairs."""
    (kh, kw), (sh, sw) = np.broadcast_to(k, [2]), np.broadcast_to(stride, [2])
    n, h, wd, ch = x.shape
    oh, pt = ref_geometry(h, kh, sh, 1, padding)
    ow, pl = ref_geometry(wd, kw, sw, 1, padding)
    y = np.zeros((n, oh, ow, ch))
    for r in range(oh):
        for c in range(ow):
            r0, c0 = r * sh - pt, c * sw - pl
            window = x[:, max(r0, 0):r0 + kh, max(c0, 0):c0 + kw, :]
            y[:, r, c, :] = reduce(window, axis=(1, 2))
    return y


def run(fn, *arrays):
    return run_graph(fn, *arrays)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


SIZES = [(1, 1), (7, 7), (5, 9)]


# ------------------------------------------------------------------------ conv2d
@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dilation", [1, 2])
def test_conv2d_matches_loop_reference(hw, padding, stride, dilation):
    kh, kw = (1, 1) if hw == (1, 1) else (3, 2)
    x, w = rand(2, *hw, 3), rand(kh, kw, 3, 4, seed=1)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float64, [None, *hw, 3])
        y = gc.nn.conv2d(xp, w, strides=[1, stride, stride, 1], padding=padding,
                         dilations=[1, dilation, dilation, 1])
        expected = ref_conv2d(x, w, stride, padding, dilation)
        assert y.shape.as_list() == [None, *expected.shape[1:]]
        assert y.dtype == gc.float64
        with gc.Session(graph=g) as sess:
            np.testing.assert_allclose(sess.run(y, {xp: x}), expected, rtol=1e-10, atol=1e-12)


def test_conv2d_float32_and_filters_alias():
    x, w = rand(1, 5, 5, 2).astype(np.float32), rand(3, 3, 2, 3, seed=1).astype(np.float32)
    y = run(lambda a, b: gc.nn.conv2d(a, filters=b, strides=1, padding="SAME"), x, w)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref_conv2d(x, w, 1, "SAME"), rtol=1e-5, atol=1e-5)


def test_conv2d_nchw_matches_nhwc():
    x, w = rand(2, 6, 5, 3), rand(3, 2, 3, 4, seed=1)
    y = run(lambda a, b: gc.nn.conv2d(a, b, strides=[1, 1, 2, 2], padding="SAME",
                                      data_format="NCHW"), x.transpose(0, 3, 1, 2), w)
    np.testing.assert_allclose(y, ref_conv2d(x, w, 2, "SAME").transpose(0, 3, 1, 2), atol=1e-12)


def test_conv2d_explicit_padding():
    x, w = rand(1, 4, 5, 2), rand(3, 3, 2, 2, seed=1)
    y = run(lambda a, b: gc.nn.conv2d(a, b, strides=[1, 1, 1, 1],
                                      padding=[[0, 0], [2, 0], [1, 3], [0, 0]]), x, w)
    padded = np.pad(x, ((0, 0), (2, 0), (1, 3), (0, 0)))
    np.testing.assert_allclose(y, ref_conv2d(padded, w, 1, "VALID"), atol=1e-12)


def test_conv2d_shape_inference_with_unknown_dims():
    x = gc.placeholder(gc.float32, [None, None, 9, 3])
    w = gc.placeholder(gc.float32, [3, 3, 3, 8])
    y = gc.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="VALID")
    assert y.shape.as_list() == [None, None, 4, 8]
    y = gc.nn.conv2d(gc.placeholder(gc.float32), w, strides=[1, 1, 1, 1], padding="SAME")
    assert y.shape.as_list() == [None, None, None, 8]
    y = gc.nn.conv2d(x, gc.placeholder(gc.float32), strides=[1, 1, 1, 1], padding="SAME")
    assert y.shape.as_list() == [None, None, 9, None]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, error, match", [
    ([1, 5, 5, 3], [3, 3, 2, 4], {}, ValueError, "Depth of input"),
    ([5, 5, 3], [3, 3, 3, 4], {}, ValueError, "rank 4"),
    ([1, 5, 5, 3], [3, 3, 4], {}, ValueError, "rank 4"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": [1, 1, 1]}, ValueError, "4 dimensions"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"strides": [2, 1, 1, 1]}, ValueError, "batch and depth"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"padding": "same"}, ValueError, "padding"),
    ([1, 1, 5, 3], [3, 3, 3, 4], {"padding": "VALID"}, ValueError, "negative"),
    ([1, 5, 5, 3], [3, 3, 3, 4], {"data_format": "NWHC"}, ValueError, "data format"),
])
def test_conv2d_construction_errors(x_shape, w_shape, kwargs, error, match):
    args = {"strides": [1, 1, 1, 1], "padding": "SAME", **kwargs}
    x = gc.placeholder(gc.float32, x_shape, name="x")
    w = gc.placeholder(gc.float32, w_shape)
    with pytest.raises(error, match=match) as info:
        gc.nn.conv2d(x, w, name="conv", **args)
    assert "'conv' (op: 'Conv2D')" in str(info.value)


def test_conv2d_dtype_errors():
    x = gc.placeholder(gc.float32, [1, 4, 4, 1])
    with pytest.raises(TypeError, match="float64"):
        gc.nn.conv2d(x, gc.placeholder(gc.float64, [1, 1, 1, 1]), strides=1, padding="SAME")
    with pytest.raises(TypeError, match="int32"):
        gc.nn.conv2d(gc.placeholder(gc.int32, [1, 4, 4, 1]),
                     gc.placeholder(gc.int32, [1, 1, 1, 1]), strides=1, padding="SAME")


def test_conv2d_run_time_depth_mismatch_is_invalid_argument():
    x = gc.placeholder(gc.float32, [1, 4, 4, None])
    y = gc.nn.conv2d(x, np.ones((1, 1, 2, 1), np.float32), strides=1, padding="SAME")
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="depth"):
            sess.run(y, {x: np.ones((1, 4, 4, 3), np.float32)})


# -------------------------------------------------------------- conv2d_transpose
@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_transpose_matches_loop_reference(hw, padding, stride):
    k = 1 if hw == (1, 1) else 3
    oh, _ = ref_geometry(hw[0], k, stride, 1, padding)
    ow, _ = ref_geometry(hw[1], k, stride, 1, padding)
    dy, w = rand(2, oh, ow, 4), rand(k, k, 3, 4, seed=1)
    y = run(lambda a, b: gc.nn.conv2d_transpose(a, b, [2, *hw, 3], [1, stride, stride, 1],
                                                padding), dy, w)
    np.testing.assert_allclose(y, ref_conv2d_transpose(dy, w, hw, stride, padding), atol=1e-12)


def test_conv2d_transpose_output_shape_tensor_with_unknown_batch():
    dy, w = rand(3, 4, 4, 2), rand(3, 3, 5, 2, seed=1)
    g = gc.Graph()
    with g.as_default():
        value = gc.placeholder(gc.float64, [None, 4, 4, 2])
        out_shape = gc.stack([gc.shape(value)[0], 8, 8, 5])
        y = gc.nn.conv2d_transpose(value, w, out_shape, strides=[1, 2, 2, 1])
        assert y.op.type == "Conv2DBackpropInput" and y.op.name == "conv2d_transpose"
        assert y.shape.as_list() == [None, 8, 8, 5]
        with gc.Session(graph=g) as sess:
            out = sess.run(y, {value: dy})
    np.testing.assert_allclose(out, ref_conv2d_transpose(dy, w, (8, 8), 2, "SAME"), atol=1e-12)


def test_conv2d_transpose_errors():
    value = gc.placeholder(gc.float32, [1, 4, 4, 2])
    with pytest.raises(ValueError, match="out_backprop"):  # value depth != filter in-depth
        gc.nn.conv2d_transpose(value, np.ones((3, 3, 5, 3), np.float32), [1, 8, 8, 5], 2)
    with pytest.raises(ValueError, match="Depth of input"):  # output depth != filter out-depth
        gc.nn.conv2d_transpose(value, np.ones((3, 3, 5, 2), np.float32), [1, 8, 8, 4], 2)
    with pytest.raises(ValueError, match="shape"):
        gc.nn.conv2d_transpose(value, np.ones((3, 3, 5, 2), np.float32), [8, 8, 5], 2)
    sizes = gc.placeholder(gc.int32, [4])
    y = gc.nn.conv2d_transpose(value, np.ones((3, 3, 5, 2), np.float32), sizes, 2)
    assert y.shape.as_list() == [None] * 4
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="out_backprop"):
            sess.run(y, {value: np.ones((1, 4, 4, 2)), sizes: [1, 12, 12, 5]})


# ------------------------------------------------------------------------- pools
POOLS = [(gc.nn.max_pool, np.max), (gc.nn.avg_pool, np.mean)]


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pool, reduce", POOLS)
def test_pool_matches_loop_reference(hw, padding, stride, pool, reduce):
    k = 1 if hw == (1, 1) else 3
    x = rand(2, *hw, 3)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float64, [None, *hw, 3])
        y = pool(xp, [1, k, k, 1], [1, stride, stride, 1], padding)
        expected = ref_pool(x, k, stride, padding, reduce)
        assert y.shape.as_list() == [None, *expected.shape[1:]]
        with gc.Session(graph=g) as sess:
            np.testing.assert_allclose(sess.run(y, {xp: x}), expected, atol=1e-12)


@pytest.mark.parametrize("pool, reduce", [(gc.nn.max_pool2d, np.max), (gc.nn.avg_pool2d, np.mean)])
@pytest.mark.parametrize("ksize, strides", [(2, 2), ([2, 2], [1, 2]), ([3], 1)])
def test_pool2d_short_ksize_and_strides(pool, reduce, ksize, strides):
    x = rand(1, 5, 6, 2).astype(np.float32)
    y = run(lambda a: pool(a, ksize, strides, "SAME"), x)
    k = ksize[0] if ksize == [3] else ksize
    np.testing.assert_allclose(y, ref_pool(x, k, strides, "SAME", reduce), rtol=1e-6)


def test_pool_nchw_matches_nhwc():
    x = rand(2, 5, 7, 3)
    for pool, reduce in POOLS:
        y = run(lambda a: pool(a, [1, 1, 3, 3], [1, 1, 2, 2], "SAME", data_format="NCHW"),
                x.transpose(0, 3, 1, 2))
        np.testing.assert_allclose(y, ref_pool(x, 3, 2, "SAME", reduce).transpose(0, 3, 1, 2),
                                   atol=1e-12)


def test_max_pool_integer_input():
    x = np.arange(2 * 5 * 5).reshape(1, 5, 5, 2).astype(np.int32) - 30
    y = run(lambda a: gc.nn.max_pool(a, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"), x)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref_pool(x, 2, 2, "SAME", np.max))


def test_pool_shape_inference_and_errors():
    x = gc.placeholder(gc.float32, [None, None, 7, 3])
    assert gc.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID").shape.as_list() == \
        [None, None, 3, 3]
    assert gc.nn.avg_pool(gc.placeholder(gc.float32), 2, 2, "SAME").shape.as_list() == [None] * 4
    with pytest.raises(ValueError, match="rank 4"):
        gc.nn.max_pool(gc.placeholder(gc.float32, [7, 7, 3]), 2, 2, "SAME")
    with pytest.raises(ValueError, match="batch and depth"):
        gc.nn.max_pool(x, [2, 2, 2, 1], [1, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="padding"):
        gc.nn.avg_pool(x, 2, 2, "EXPLICIT")
    with pytest.raises(ValueError, match="4 dimensions"):
        gc.nn.avg_pool(x, [1, 2, 2], 2, "SAME")
    with pytest.raises(TypeError, match="int32"):
        gc.nn.avg_pool(gc.placeholder(gc.int32, [1, 4, 4, 1]), 2, 2, "SAME")


# ------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("padding, stride, dilation", [
    ("SAME", 2, 1), ("VALID", 1, 2), ("SAME", 1, 2), ("VALID", 2, 1)])
def test_conv2d_gradients(padding, stride, dilation):
    check_gradients(lambda x, w: gc.nn.conv2d(x, w, [1, stride, stride, 1], padding,
                                              dilations=[1, dilation, dilation, 1]),
                    [rand(2, 5, 5, 2), rand(2, 2, 2, 3, seed=1)])


def test_conv2d_gradients_nchw_explicit_padding():
    check_gradients(lambda x, w: gc.nn.conv2d(x, w, [1, 1, 2, 1], [[0, 0], [0, 0], [1, 0], [0, 2]],
                                              data_format="NCHW"),
                    [rand(1, 2, 4, 3), rand(2, 2, 2, 2, seed=1)])


def test_conv2d_second_order():
    check_second_order(lambda x, w: gc.nn.conv2d(x, w, [1, 2, 2, 1], "SAME"),
                       [rand(1, 4, 3, 2), rand(2, 2, 2, 2, seed=1)])


@pytest.mark.parametrize("padding, stride", [("SAME", 2), ("VALID", 1)])
def test_conv2d_transpose_gradients(padding, stride):
    oh = ref_geometry(5, 3, stride, 1, padding)[0]
    check_gradients(lambda v, w: gc.nn.conv2d_transpose(v, w, [1, 5, 5, 2], [1, stride, stride, 1],
                                                        padding),
                    [rand(1, oh, oh, 2), rand(3, 3, 2, 2, seed=1)])


def test_backprop_ops_second_order():
    x, w = rand(1, 4, 4, 2), rand(2, 2, 2, 2, seed=1)
    dy = rand(1, 2, 2, 2, seed=2)
    check_gradients(lambda a, b: gc.nn.conv2d_backprop_filter(a, [2, 2, 2, 2], b, [1, 2, 2, 1],
                                                              "SAME"), [x, dy])
    check_gradients(lambda a, b: gc.nn.conv2d_backprop_input([1, 4, 4, 2], a, b, [1, 2, 2, 1],
                                                             "SAME"), [w, dy])


@pytest.mark.parametrize("padding, stride, k", [("SAME", 2, 3), ("VALID", 1, 2), ("SAME", 1, 2)])
def test_max_pool_gradients(padding, stride, k):
    x = np.random.default_rng(0).permutation(2 * 5 * 5 * 2).reshape(2, 5, 5, 2) / 7.0
    check_gradients(lambda a: gc.nn.max_pool(a, [1, k, k, 1], [1, stride, stride, 1], padding), [x])


def test_max_pool_grad_routes_ties_to_first_max():
    x = np.array([[1.0, 3.0], [3.0, 2.0]]).reshape(1, 2, 2, 1)
    g = gc.gradients(gc.reduce_sum(gc.nn.max_pool(xc := gc.constant(x), 2, 2, "VALID")), xc)[0]
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(g).reshape(2, 2), [[0, 1], [0, 0]])


def test_max_pool_second_order_through_grad_grad():
    x = np.random.default_rng(0).permutation(16).reshape(1, 4, 4, 1) / 5.0
    check_gradients(
        lambda a, d: gc.gradients(gc.nn.max_pool(a, 2, 2, "SAME"), a, grad_ys=d)[0] * a,
        [x, rand(1, 2, 2, 1, seed=3)])


@pytest.mark.parametrize("padding, stride, k", [("SAME", 2, 3), ("VALID", 1, 2), ("SAME", 1, 2)])
def test_avg_pool_gradients(padding, stride, k):
    check_gradients(lambda a: gc.nn.avg_pool(a, [1, k, k, 1], [1, stride, stride, 1], padding),
                    [rand(1, 5, 4, 2)])


def test_avg_pool_second_order():
    check_second_order(lambda a: gc.nn.avg_pool(a, 2, 2, "SAME") * gc.nn.avg_pool(a, 2, 2, "SAME"),
                       [rand(1, 3, 3, 1)])


def test_gradients_with_unknown_batch():
    x, w = rand(3, 4, 4, 1), rand(3, 3, 1, 2, seed=1)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float64, [None, 4, 4, 1])
        y = gc.nn.max_pool(gc.nn.conv2d(xp, w, 1, "SAME"), 2, 2, "SAME")
        dx, = gc.gradients(gc.reduce_sum(gc.nn.avg_pool(y, 2, 1, "SAME")), [xp])
        assert dx.shape.as_list() == [None, 4, 4, 1]
        with gc.Session(graph=g) as sess:
            assert sess.run(dx, {xp: x}).shape == (3, 4, 4, 1)


def test_empty_output_and_its_gradient():
    x, w = rand(1, 2, 5, 3), rand(3, 3, 3, 4, seed=1)
    g = gc.Graph()
    with g.as_default():
        xc, wc = gc.constant(x), gc.constant(w)
        y = gc.nn.conv2d(xc, wc, [1, 1, 1, 1], "VALID")
        p = gc.nn.max_pool(xc, [1, 3, 3, 1], [1, 1, 1, 1], "VALID")
        assert y.shape.as_list() == [1, 0, 3, 4] and p.shape.as_list() == [1, 0, 3, 3]
        grads = gc.gradients(gc.reduce_sum(y) + gc.reduce_sum(p), [xc, wc])
        with gc.Session(graph=g) as sess:
            y_val, dx, dw = sess.run([y, *grads])
    assert y_val.shape == (1, 0, 3, 4)
    np.testing.assert_array_equal(dx, np.zeros_like(x))
    np.testing.assert_array_equal(dw, np.zeros_like(w))


def test_max_pool_all_lowest_values_never_route_to_padding():
    x = np.full((1, 3, 3, 1), -np.inf)
    g = gc.Graph()
    with g.as_default():
        xc = gc.constant(x)
        y = gc.nn.max_pool(xc, 2, 2, "SAME")
        dx, = gc.gradients(y, [xc])
        with gc.Session(graph=g) as sess:
            y_val, dx_val = sess.run([y, dx])
    assert np.all(y_val == -np.inf)
    np.testing.assert_array_equal(dx_val.reshape(3, 3), [[1, 0, 1], [0, 0, 0], [1, 0, 1]])
