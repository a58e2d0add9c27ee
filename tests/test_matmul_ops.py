"""matmul: MatMul and BatchMatMulV2 values, op choice, shapes, errors and gradients."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients, check_second_order, run_graph

RNG = np.random.default_rng(0)


def _np_matmul(a, b):
    """The test's own product over the last two dims, batch dims broadcast."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    return np.einsum("...ik,...kj->...ij", a, b)


def _t(x, transposed):
    return np.swapaxes(x, -1, -2) if transposed else x


def _operands(shape_a, shape_b, ta, tb, dtype):
    """Random operands laid out so that op(a) has shape_a and op(b) shape_b."""
    def make(shape, transposed):
        shape = tuple(shape[:-2]) + ((shape[-1], shape[-2]) if transposed else tuple(shape[-2:]))
        if np.issubdtype(dtype, np.integer):
            return RNG.integers(-5, 6, size=shape).astype(dtype)
        return RNG.standard_normal(shape).astype(dtype)
    return make(shape_a, ta), make(shape_b, tb)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 33, 5), (3, 1, 7), (33, 7, 1)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_matmul_2d(m, k, n, ta, tb, dtype):
    a, b = _operands((m, k), (k, n), ta, tb, dtype)
    out = run_graph(lambda x, y: gc.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)
    expected = _np_matmul(_t(a, ta).astype(np.float64), _t(b, tb).astype(np.float64))
    assert out.dtype == dtype and out.shape == (m, n)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_adjoint_is_transpose_and_exclusive():
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 4))
    out = run_graph(lambda x, y: gc.matmul(x, y, adjoint_a=True, adjoint_b=True), a, b)
    np.testing.assert_allclose(out, a.T @ b.T)
    x = gc.constant(a)
    with pytest.raises(ValueError, match="Only one of transpose_a and adjoint_a"):
        gc.matmul(x, x, transpose_a=True, adjoint_a=True)
    with pytest.raises(ValueError, match="Only one of transpose_b and adjoint_b"):
        gc.matmul(x, x, transpose_b=True, adjoint_b=True)


def test_float16_matmul():
    a, b = RNG.standard_normal((7, 33)), RNG.standard_normal((33, 5))
    out = run_graph(lambda x, y: gc.matmul(x, y), a.astype(np.float16), b.astype(np.float16))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, a @ b, rtol=2e-2, atol=5e-2)


def test_op_choice_attrs_and_names():
    a2 = gc.placeholder(gc.float32, [2, 3])
    b2 = gc.placeholder(gc.float32, [3, 4])
    y = gc.matmul(a2, b2, transpose_b=False)
    assert y.op.type == "MatMul" and y.op.name == "MatMul"
    assert y.op.attrs == {"transpose_a": False, "transpose_b": False}
    a3 = gc.placeholder(gc.float32, [5, 2, 3])
    z = gc.matmul(a3, b2, adjoint_a=False, name="bmm")
    assert z.op.type == "BatchMatMulV2" and z.op.name == "bmm"
    assert z.op.attrs == {"adj_x": False, "adj_y": False}
    unknown = gc.matmul(gc.placeholder(gc.float32), b2)
    assert unknown.op.type == "BatchMatMulV2" and unknown.shape.ndims is None
    assert (a2 @ b2).op.type == "MatMul"


def test_python_operand_takes_tensor_dtype():
    a = gc.placeholder(gc.float64, [2, 2])
    assert gc.matmul(a, [[1, 0], [0, 1]]).dtype == gc.float64
    assert gc.matmul([[1.0, 2.0]], a).dtype == gc.float64


@pytest.mark.parametrize("shape_a,shape_b", [
    ((2, 1, 3, 4), (5, 4, 6)),
    ((3, 4), (2, 4, 5)),
    ((7, 1, 33), (33, 1)),
    ((1, 3, 7), (2, 7, 1)),
    ((2, 3, 4), (2, 4, 5)),
])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (True, False)])
def test_batched_broadcasting(shape_a, shape_b, ta, tb):
    a, b = _operands(shape_a, shape_b, ta, tb, np.float64)
    out = run_graph(lambda x, y: gc.matmul(x, y, transpose_a=ta, adjoint_b=tb), a, b)
    np.testing.assert_allclose(out, _np_matmul(_t(a, ta), _t(b, tb)), rtol=1e-12)


@pytest.mark.parametrize("shape_a,shape_b,kw,expected", [
    ([None, 4], [4, None], {}, [None, None]),
    ([None, 3, 4], [None, 4, 5], {}, [None, 3, 5]),
    ([None, 3, 4], [4, 5], {}, [None, 3, 5]),
    ([2, 1, 3, 4], [5, 4, 6], {}, [2, 5, 3, 6]),
    ([None, 1, 3, 4], [5, 6, 4], {"transpose_b": True}, [None, 5, 3, 6]),
    ([None, None, None], [2, None, 7], {"adjoint_a": True}, [2, None, 7]),
    ([3, None], None, {}, None),
])
def test_static_shapes(shape_a, shape_b, kw, expected):
    y = gc.matmul(gc.placeholder(gc.float32, shape_a), gc.placeholder(gc.float32, shape_b), **kw)
    assert y.shape.as_tuple_or_none() == (None if expected is None else tuple(expected))


def test_inner_dimension_mismatch_message():
    a = gc.placeholder(gc.float32, [3, 4])
    b = gc.placeholder(gc.float32, [5, 6])
    with pytest.raises(ValueError) as e:
        gc.matmul(a, b)
    assert str(e.value) == ("Dimensions must be equal, but are 4 and 5 for 'MatMul' (op: "
                            "'MatMul') with input shapes: [3,4], [5,6].")
    with pytest.raises(ValueError, match="Dimensions must be equal, but are 3 and 5"):
        gc.matmul(a, b, transpose_a=True)
    with pytest.raises(ValueError, match="Dimensions must be equal, but are 4 and 6"):
        gc.matmul(gc.placeholder(gc.float32, [2, 3, 4]), b, transpose_b=True)


@pytest.mark.parametrize("shape_a,shape_b,exc", [
    ([3], [3, 4], ValueError),
    ([3, 4], [4], ValueError),
    ([2, 3, 4], [3, 4, 5], ValueError),  # batch dims 2 and 3 do not broadcast
    ([3, 4], [], ValueError),
])
def test_shape_errors(shape_a, shape_b, exc):
    with pytest.raises(exc):
        gc.matmul(gc.placeholder(gc.float32, shape_a), gc.placeholder(gc.float32, shape_b))


def test_dtype_errors():
    with pytest.raises(TypeError, match="does not match"):
        gc.matmul(gc.placeholder(gc.float32, [2, 2]), gc.placeholder(gc.float64, [2, 2]))
    with pytest.raises(TypeError):
        gc.matmul(gc.placeholder(gc.bool, [2, 2]), gc.placeholder(gc.bool, [2, 2]))


def test_run_time_size_mismatch():
    a = gc.placeholder(gc.float32, [None, None])
    b = gc.placeholder(gc.float32, [None, None, None])
    y2, y3 = gc.matmul(a, a), gc.matmul(b, b)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="Matrix size-incompatible"):
            sess.run(y2, {a: np.ones((2, 3))})
        with pytest.raises(gc.errors.InvalidArgumentError, match="Matrix size-incompatible"):
            sess.run(y3, {b: np.ones((2, 2, 3))})


def test_integer_matmul_has_no_gradient_but_runs():
    a = gc.constant([[1, 2], [3, 4]])
    y = gc.matmul(a, a)
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y), [[7, 10], [15, 22]])
    assert y.dtype == gc.int32
    assert gc.gradients(y, a, grad_ys=gc.ones_like(y)) == [None]


# ---------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 1, 2), (2, 3, 4)])
def test_matmul_gradients(ta, tb, m, k, n):
    a, b = _operands((m, k), (k, n), ta, tb, np.float64)
    check_gradients(lambda x, y: gc.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


@pytest.mark.parametrize("shape_a,shape_b", [((2, 1, 2, 3), (3, 3, 2)), ((2, 3), (2, 3, 1)),
                                             ((2, 2, 3), (3, 2))])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_batched_gradients_unbroadcast(shape_a, shape_b, ta, tb):
    a, b = _operands(shape_a, shape_b, ta, tb, np.float64)
    check_gradients(lambda x, y: gc.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
@pytest.mark.parametrize("shape_a,shape_b", [((2, 3), (3, 2)), ((2, 2, 3), (3, 2))])
def test_second_order(ta, tb, shape_a, shape_b):
    a, b = _operands(shape_a, shape_b, ta, tb, np.float64)
    # squared so that the Hessian has a non-zero a-a and b-b part
    check_second_order(lambda x, y: gc.square(gc.matmul(x, y, transpose_a=ta,
                                                        transpose_b=tb)), [a, b])


def test_gradients_with_unknown_batch_dims():
    a = gc.placeholder(gc.float64, [None, 3, 4])
    b = gc.placeholder(gc.float64, [4, 5])
    c = gc.placeholder(gc.float64, [None, None, 5])
    y = gc.matmul(gc.matmul(a, b), c, transpose_b=True)
    assert y.shape.as_tuple_or_none() == (None, 3, None)
    w = RNG.standard_normal((2, 3, 7))
    ga, gb, gc_ = gc.gradients(y, [a, b, c], grad_ys=gc.constant(w))
    av, bv, cv = (RNG.standard_normal(s) for s in [(2, 3, 4), (4, 5), (2, 7, 5)])
    with gc.Session() as sess:
        got = sess.run([ga, gb, gc_], {a: av, b: bv, c: cv})
    ab = av @ bv
    d_ab = w @ cv                                      # d loss / d (a @ b)
    np.testing.assert_allclose(got[0], d_ab @ bv.T)
    np.testing.assert_allclose(got[1], np.einsum("bik,bij->kj", av, d_ab))  # summed over batch
    np.testing.assert_allclose(got[2], np.swapaxes(w, 1, 2) @ ab)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(5, 3, 4), (0, 3, 4), (6, 0, 3), (300, 70, 700), (700, 300, 5),
                                   (3, 4, 1)])
def test_dense_bias_and_activation_match_numpy(dtype, m, k, n):
    # the bias is the start of C that the product is added into (the thread team's row and
    # column blocks at the larger sizes), in either operand order and before an activation
    x = RNG.standard_normal((m, k)).astype(dtype)
    w = RNG.standard_normal((k, n)).astype(dtype)
    b = RNG.standard_normal(n).astype(dtype)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(dtype, [None, k])
        wv, bv = gc.Variable(w), gc.Variable(b)
        fetches = [gc.matmul(xp, wv) + bv, bv + gc.matmul(xp, wv),
                   gc.nn.relu(gc.nn.bias_add(gc.matmul(xp, wv), bv)),
                   gc.matmul(xp, wv) + gc.reshape(bv, [1, n])]
        with gc.Session(graph=g) as sess:
            sess.run(gc.global_variables_initializer())
            got = sess.run(fetches, {xp: x})
    want = x.astype(np.float64) @ w + b
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for name, a, e in zip(["add", "bias first", "bias_add relu", "[1,n] bias"], got,
                          [want, want, np.maximum(want, 0), want]):
        assert a.dtype == dtype and a.shape == (m, n), name
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol, err_msg=name)
