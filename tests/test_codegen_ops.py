"""Native lowerings of conv, pooling, scans, scatters, random ops...: the compiled Session
against the reference Session, with no test passing through the reference fallback (every
compiled run asserts that no "could not compile" warning was raised)."""
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.framework.op_def import HOST_OP_TYPES, OP_DEFS

REFERENCE = gc.ConfigProto(backend="reference")


def run_both(graph, fetches, feed_dict=None, runs=1):
    """(reference results, compiled results) of `runs` runs each in fresh Sessions."""
    results = []
    for config in (REFERENCE, None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gc.Session(graph=graph, config=config) as sess:
                out = [sess.run(fetches, feed_dict) for _ in range(runs)]
        fallback = [str(w.message) for w in caught if "could not compile" in str(w.message)]
        assert not fallback, fallback
        results.append(out if runs > 1 else out[0])
    return results


def check(graph, fetches, feed_dict=None, rtol=1e-5, atol=1e-5):
    want, got = run_both(graph, fetches, feed_dict)
    for w, g in zip(want, got):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(dtype)


def _nchw(x, fmt):
    return x if fmt == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _free_batch(shape):
    return [None] + list(shape[1:])


# ------------------------------------------------------------------ convolutions
CONV_CASES = [  # (input NHWC, filter, strides, padding, dilations)
    ((3, 9, 7, 5), (3, 2, 5, 4), 1, "SAME", 1),
    ((2, 8, 11, 3), (3, 3, 3, 6), 2, "VALID", 1),
    ((1, 7, 7, 2), (3, 3, 2, 3), 2, "SAME", 1),
    ((3, 10, 9, 2), (3, 2, 2, 3), 1, "VALID", 2),
    ((2, 7, 9, 3), (2, 3, 3, 2), 1, [[0, 0], [1, 2], [0, 3], [0, 0]], 1),
    ((2, 5, 6, 7), (1, 1, 7, 4), 1, "VALID", 1),   # pointwise
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d_and_gradients(case, fmt):
    shape, fshape, strides, padding, dilation = CONV_CASES[case]
    if isinstance(padding, list) and fmt == "NCHW":
        padding = [padding[0], padding[3], padding[1], padding[2]]
    x = _nchw(rand(*shape), fmt)
    w = rand(*fshape, seed=1)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, _free_batch(x.shape))
        wv = gc.constant(w)
        y = gc.nn.conv2d(xp, wv, strides=strides, padding=padding, data_format=fmt,
                         dilations=dilation)
        loss = gc.reduce_sum(y * gc.sin(y))
        gx, gw = gc.gradients(loss, [xp, wv])
    check(g, [y, gx, gw], {xp: x}, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_conv2d_other_dtypes(dtype):
    x, w = rand(2, 6, 5, 3, dtype=dtype), rand(3, 3, 3, 4, dtype=dtype, seed=1)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(dtype, [None, 6, 5, 3])
        y = gc.nn.conv2d(xp, gc.constant(w), strides=2, padding="SAME")
    tol = 1e-2 if dtype == np.float16 else 1e-10
    check(g, [y], {xp: x}, rtol=tol, atol=tol)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv_bias_relu_epilogue_and_transpose(fmt):
    x = _nchw(rand(2, 8, 7, 3), fmt)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, _free_batch(x.shape))
        w = gc.constant(rand(3, 3, 3, 5, seed=1))
        b = gc.constant(rand(5, seed=2))
        h = gc.nn.relu(gc.nn.bias_add(gc.nn.conv2d(xp, w, 1, "SAME", data_format=fmt), b,
                                      data_format=fmt))
        out_shape = gc.shape(xp)
        wt = gc.constant(rand(3, 3, 3, 5, seed=3))
        t = gc.nn.conv2d_transpose(h, wt, out_shape, strides=1, padding="SAME",
                                   data_format=fmt)
        bt = gc.nn.bias_add(t, gc.constant(rand(3, seed=4)), data_format=fmt)
    check(g, [h, bt], {xp: x}, rtol=2e-4, atol=2e-4)


def test_conv_kernel_batches_of_other_sizes_reuse_code():
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, [None, 6, 6, 2])
        y = gc.nn.conv2d(xp, gc.constant(rand(3, 3, 2, 3)), 2, "SAME")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with gc.Session(graph=g) as sess:
            for n in (5, 3, 9):
                x = rand(n, 6, 6, 2, seed=n)
                want = gc.Session(graph=g, config=REFERENCE).run(y, {xp: x})
                np.testing.assert_allclose(sess.run(y, {xp: x}), want, rtol=1e-5, atol=1e-5)
            assert sess.compile_count == 1


# ---------------------------------------------------------------------- pooling
POOL_CASES = [  # (input NHWC, ksize, strides, padding)
    ((2, 7, 9, 3), 2, 2, "VALID"),
    ((2, 7, 9, 3), 3, 2, "SAME"),
    ((1, 5, 5, 1), 3, 1, "SAME"),
    ((3, 8, 7, 2), [2, 3], [1, 2], "SAME"),
    ((2, 9, 9, 4), 3, 3, "VALID"),
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pooling_and_gradients(case, fmt):
    shape, ksize, strides, padding = POOL_CASES[case]
    # few distinct values: windows hold ties, the gradient goes to the first maximum
    x = _nchw(np.round(rand(*shape) * 1.5).astype(np.float32), fmt)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, _free_batch(x.shape))
        mx = gc.nn.max_pool(xp, ksize, strides, padding, data_format=fmt)
        av = gc.nn.avg_pool(xp, ksize, strides, padding, data_format=fmt)
        loss = gc.reduce_sum(mx * mx) + gc.reduce_sum(gc.sin(av))
        (gx,) = gc.gradients(loss, [xp])
        # second order through MaxPoolGrad (MaxPoolGradGrad) and AvgPoolGrad (AvgPool)
        (ggx,) = gc.gradients(gc.reduce_sum(gx * gx), [xp])
    check(g, [mx, av, gx, ggx], {xp: x}, rtol=1e-5, atol=1e-5)


def test_max_pool_integers_and_padding_never_wins():
    x = np.full((1, 4, 4, 1), -np.inf, np.float32)
    x[0, 1, 1, 0] = -np.inf
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, [1, 4, 4, 1])
        mx = gc.nn.max_pool(xp, 3, 2, "SAME")
        (gx,) = gc.gradients(gc.reduce_sum(mx * 2.0), [xp])
    check(g, [mx, gx], {xp: x})
    xi = (np.arange(2 * 5 * 5 * 3) % 7).reshape(2, 5, 5, 3).astype(np.int32)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.int32, [None, 5, 5, 3])
        mx = gc.nn.max_pool(xp, 2, 2, "SAME")
    check(g, [mx], {xp: xi})


# ------------------------------------------------------------------------ Cumsum
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(axis, exclusive, reverse):
    x = rand(3, 7, 5)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, [None, 7, None])
        y = gc.cumsum(xp, axis, exclusive=exclusive, reverse=reverse)
        (gx,) = gc.gradients(gc.reduce_sum(y * y), [xp])
    want, got = run_both(g, [y, gx], {xp: x})
    np.testing.assert_array_equal(got[0], want[0])  # the same additions in the same order
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.float64])
def test_cumsum_dtypes(dtype):
    x = (rand(4, 9) * 10).astype(dtype)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(dtype, [4, 9])
        ys = [gc.cumsum(xp, 1), gc.cumsum(xp, 0, exclusive=True, reverse=True)]
    check(g, ys, {xp: x}, rtol=1e-3 if dtype == np.float16 else 1e-7)


# --------------------------------------------------------------------- GatherGrad
@pytest.mark.parametrize("axis,batch_dims", [(0, 0), (1, 0), (2, 1), (1, 1)])
def test_gather_gradient_scatter_adds(axis, batch_dims):
    params = rand(3, 5, 4)
    if batch_dims:
        indices = np.array([[0, 2, 2], [1, 1, 0], [3, 0, 3]], np.int32) % params.shape[axis]
    else:
        indices = np.array([[0, 2], [2, 1], [0, 0]], np.int32) % params.shape[axis]
    g = gc.Graph()
    with g.as_default():
        pp = gc.placeholder(gc.float32, [None, 5, 4])
        y = gc.gather(pp, gc.constant(indices), axis=axis, batch_dims=batch_dims)
        (gp,) = gc.gradients(gc.reduce_sum(y * gc.cos(y)), [pp])
        gp = gc.convert_to_tensor(gp)  # axis 0: an IndexedSlices, scattered here
    check(g, [gp], {pp: params})


def test_gather_grad_bad_index_is_an_error():
    g = gc.Graph()
    with g.as_default():
        grad = gc.placeholder(gc.float32, [None, 4])
        idx = gc.placeholder(gc.int32, [None])
        out = g.create_op("GatherGrad", [grad, idx, gc.constant([5, 4]), gc.constant(0)],
                          {"batch_dims": 0}, "GatherGrad").outputs[0]
    feeds = {grad: rand(3, 4), idx: np.array([1, 5, 0], np.int32)}
    for config in (REFERENCE, None):
        with gc.Session(graph=g, config=config) as sess:
            with pytest.raises(errors.InvalidArgumentError):
                sess.run(out, feeds)
    check(g, [out], {grad: rand(3, 4), idx: np.array([4, 4, 0], np.int32)})


# ------------------------------------------------------- MirrorPadGrad, InvertPermutation
@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad_gradient(mode):
    x = rand(4, 5, 3)
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, [None, 5, 3])
        y = gc.pad(xp, [[1, 2], [3, 1], [0, 0]], mode=mode)
        (gx,) = gc.gradients(gc.reduce_sum(y * gc.sin(y)), [xp])
    check(g, [y, gx], {xp: x})


def test_invert_permutation():
    g = gc.Graph()
    with g.as_default():
        p = gc.placeholder(gc.int32, [None])
        inv = gc.invert_permutation(p)
    perm = np.random.RandomState(0).permutation(11).astype(np.int32)
    got = check(g, [inv], {p: perm})
    np.testing.assert_array_equal(got[0], np.argsort(perm))
    for config in (REFERENCE, None):
        with gc.Session(graph=g, config=config) as sess:
            with pytest.raises(errors.InvalidArgumentError):
                sess.run(inv, {p: np.array([0, 2, 2], np.int32)})


# ------------------------------------------------------------------------ Where
def test_where_indices_runs_host_side():
    g = gc.Graph()
    with g.as_default():
        c = gc.placeholder(gc.float32, [None, 3])
        idx = gc.where(c > 0.0)
        s = gc.reduce_sum(c * 2.0)
    x = rand(5, 3)
    got = check(g, [idx, s], {c: x})
    np.testing.assert_array_equal(got[0], np.argwhere(x > 0))


# ------------------------------------------------------------------------- Pow
@pytest.mark.parametrize("exponent,expected", [(3.0, "Mul"), (4.0, "Mul"), (-1.0, "Reciprocal"),
                                               (1.0, None), (0.0, None), (2.0, "Mul")])
def test_pow_small_integer_exponent_becomes_multiplications(exponent, expected):
    from graphc.compiler.lower import lower
    from graphc.compiler.pipeline import optimize
    x = rand(3, 7) * 2
    g = gc.Graph()
    with g.as_default():
        xp = gc.placeholder(gc.float32, [None, 7])
        y = gc.pow(xp, exponent)
    module = lower([xp], [y], [], [x.shape])
    optimize(module)
    types = {n.type for n in module.nodes}
    assert "Pow" not in types
    if expected:
        assert expected in types
    check(g, [y], {xp: x}, rtol=3e-7, atol=0)


# ------------------------------------------------------------------- random ops
def _ulps(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.max(np.abs(a - b) / np.spacing(np.maximum(np.abs(a), np.abs(b))), initial=0)


def _random_graph(dtype, seed=7):
    g = gc.Graph()
    with g.as_default():
        n = gc.placeholder(gc.int32, [])
        shape = gc.stack([n, 5])
        ops = {"normal": gc.random_normal(shape, dtype=dtype, seed=seed),
               "uniform": gc.random_uniform(shape, dtype=dtype, seed=seed + 1),
               "truncated": gc.truncated_normal([4, 3, 7], dtype=dtype, seed=seed + 2),
               "int32": gc.random_uniform(shape, -5, 9, dtype=gc.int32, seed=seed + 3),
               "int64": gc.random_uniform([11], -2 ** 40, 2 ** 40, dtype=gc.int64,
                                          seed=seed + 4)}
    return g, n, ops


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64, gc.float16])
def test_random_ops_match_the_reference_bit_for_bit(dtype):
    g, n, ops = _random_graph(dtype)
    names = sorted(ops)
    want, got = run_both(g, [ops[k] for k in names], {n: 6}, runs=3)
    for run in range(3):
        for name, w, c in zip(names, want[run], got[run]):
            assert w.dtype == c.dtype and w.shape == c.shape, name
            if name in ("normal", "truncated") and dtype != gc.float16:
                # log/sin/cos are polynomials in compiled code, NumPy's in the reference
                assert _ulps(w, c) <= (1 if dtype == gc.float32 else 8), name
            else:
                np.testing.assert_array_equal(w, c, err_msg=name)
    # successive runs draw new numbers
    assert not np.array_equal(got[0][names.index("uniform")], got[1][names.index("uniform")])


def test_random_ops_seed_semantics_and_statistics():
    def sample(seed, graph_seed=None, config=None, size=8000):
        g = gc.Graph()
        with g.as_default():
            if graph_seed is not None:
                gc.set_random_seed(graph_seed)
            ops = [gc.random_normal([size], seed=seed), gc.truncated_normal([size], seed=seed),
                   gc.random_uniform([size], seed=seed)]
        with gc.Session(graph=g, config=config) as sess:
            return sess.run(ops)
    a, b = sample(3), sample(3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)          # same seeds, same numbers
    assert not np.array_equal(sample(3)[0], sample(4)[0])
    assert not np.array_equal(sample(None)[0], sample(None)[0])  # unseeded: OS entropy
    np.testing.assert_array_equal(sample(None, graph_seed=5)[2], sample(None, graph_seed=5)[2])
    normal, truncated, uniform = a
    assert abs(normal.mean()) < 0.05 and abs(normal.std() - 1) < 0.05
    assert np.abs(truncated).max() <= 2.0 and abs(truncated.std() - 0.88) < 0.05
    assert uniform.min() >= 0.0 and uniform.max() < 1.0 and abs(uniform.mean() - 0.5) < 0.02


def test_random_streams_continue_across_backends():
    """Both backends keep the op's key and run counter in the Session state."""
    g = gc.Graph()
    with g.as_default():
        r = gc.random_uniform([6], seed=11)
        y = r * 2.0
    with gc.Session(graph=g, config=REFERENCE) as sess:
        reference = [sess.run(r) for _ in range(3)]
    with gc.Session(graph=g) as sess:
        first = sess.run(r)
        second = sess.run([r, y])[0]   # another signature: same stream
        third = sess.run(r)
    for w, c in zip(reference, [first, second, third]):
        np.testing.assert_array_equal(w, c)


def test_random_uniform_int_bad_range_is_an_error():
    g = gc.Graph()
    with g.as_default():
        lo = gc.placeholder(gc.int32, [])
        r = gc.random_uniform([3], lo, 4, dtype=gc.int32, seed=1)
    for config in (REFERENCE, None):
        with gc.Session(graph=g, config=config) as sess:
            with pytest.raises(errors.InvalidArgumentError):
                sess.run(r, {lo: 4})


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10, in NumPy and in compiled code."""
    from graphc.ops.random_ops import philox4x32
    cases = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
             ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6,
                                                     0x6d5451fd)),
             ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
              (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for counter, key, expected in cases:
        assert [int(w) for w in philox4x32(counter, key)] == list(expected)
    assert [int(w) for w in _compiled_philox(*cases[2][:2])] == list(cases[2][2])


def _compiled_philox(counter, key):
    import ctypes

    from llvmlite import ir

    from kernels import philox
    from runtime import jit
    i32 = ir.IntType(32)
    module = ir.Module("philox_kat")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), "kat")
    b = ir.IRBuilder(fn.append_basic_block())
    words = philox.philox(b, [ir.Constant(i32, c) for c in counter],
                          [ir.Constant(i32, k) for k in key])
    for j, w in enumerate(words):
        b.store(w, b.gep(fn.args[0], [ir.Constant(ir.IntType(64), j)], source_etype=i32))
    b.ret_void()
    compiled = jit.CompiledModule(str(module), None)
    out = (ctypes.c_uint32 * 4)()
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address("kat"))(out)
    return list(out)


# ------------------------------------------------------------- every op type lowers
NOT_COMPUTED = {"Placeholder": "a feed", "Const": "data in the spec",
                "NoOp": "ordering only (run as a target below)",
                **dict.fromkeys(["If", "While", "TensorArrayV3", "TensorArrayScatterV3",
                                 "TensorArrayGatherV3", "TensorArrayScatterGrad",
                                 "TensorArrayGatherGrad"],
                                "control flow: not compiled natively yet, runs on the "
                                "reference executor (test_control_flow checks the fallback)")}


def _unary(fn, positive=False):
    return lambda p: [fn(p.pos if positive else p.x)]


def _binary(fn):
    return lambda p: [fn(p.x, p.y)]


def _grad(fn, *of):
    def build(p):
        y = fn(p)
        return gc.gradients(gc.reduce_sum(y * gc.sin(y)), [getattr(p, name) for name in of])
    return build


def _variable_update(update):
    def build(p):
        v = gc.Variable(np.arange(4, dtype=np.float32), name="v")
        p.init.append(v.initializer)
        return [update(v, p)]
    return build


def _pool(kind):
    return lambda p: getattr(gc.nn, kind)(p.img, 3, 2, "SAME")


def _conv(p):
    return gc.nn.conv2d(p.img, gc.constant(rand(3, 3, 2, 3)), 2, "SAME")


EXAMPLES = {
    # elementwise (unary)
    **{t: _unary(f) for t, f in [
        ("Abs", gc.abs), ("Ceil", gc.ceil), ("Cos", gc.cos), ("Elu", gc.nn.elu),
        ("Erf", gc.erf), ("Erfc", gc.erfc), ("Exp", gc.exp), ("Expm1", gc.expm1), ("Floor", gc.floor),
        ("LeakyRelu", gc.nn.leaky_relu), ("Log1p", gc.log1p), ("Neg", gc.negative),
        ("Relu", gc.nn.relu), ("Relu6", gc.nn.relu6), ("Round", gc.round),
        ("Selu", gc.nn.selu), ("Sigmoid", gc.sigmoid), ("Sign", gc.sign), ("Sin", gc.sin),
        ("Softplus", gc.nn.softplus), ("Softsign", gc.nn.softsign), ("Square", gc.square),
        ("Tanh", gc.tanh), ("Identity", lambda x: gc.identity(x) * 2.0),
        ("StopGradient", lambda x: gc.stop_gradient(x) * 2.0),
        ("CheckNumerics", lambda x: gc.check_numerics(x, "bad")),
        ("Cast", lambda x: gc.cast(x, gc.int32)),
        ("IsNan", lambda x: gc.cast(gc.is_nan(x / x), gc.float32)),
        ("IsInf", lambda x: gc.cast(gc.is_inf(x * 1e38), gc.float32)),
        ("IsFinite", lambda x: gc.cast(gc.is_finite(x * 1e38), gc.float32))]},
    **{t: _unary(f, positive=True) for t, f in [
        ("Log", gc.log), ("Sqrt", gc.sqrt), ("Rsqrt", gc.rsqrt),
        ("Reciprocal", gc.reciprocal)]},
    # elementwise (binary)
    **{t: _binary(f) for t, f in [
        ("Add", gc.add), ("Sub", gc.subtract), ("Mul", gc.multiply), ("RealDiv", gc.divide),
        ("FloorDiv", gc.floordiv), ("FloorMod", gc.floormod), ("Maximum", gc.maximum),
        ("Minimum", gc.minimum), ("SquaredDifference", gc.squared_difference),
        ("Equal", gc.equal), ("NotEqual", gc.not_equal), ("Less", gc.less),
        ("LessEqual", gc.less_equal), ("Greater", gc.greater),
        ("GreaterEqual", gc.greater_equal),
        ("LogicalAnd", lambda a, b: gc.logical_and(a > 0, b > 0)),
        ("LogicalOr", lambda a, b: gc.logical_or(a > 0, b > 0)),
        ("Select", lambda a, b: gc.where(a > b, a, b)),
        ("AddN", lambda a, b: gc.add_n([a, b, a]))]},
    "Pow": lambda p: [gc.pow(p.pos, p.y)],
    "LogicalNot": lambda p: [gc.logical_not(p.x > 0)],
    "PlaceholderWithDefault": lambda p: [gc.placeholder_with_default(p.x, [None, 4]) + 1.0],
    # reductions
    **{t: (lambda f: lambda p: [f(p.x, 1)])(f) for t, f in [
        ("Sum", gc.reduce_sum), ("Mean", gc.reduce_mean), ("Max", gc.reduce_max),
        ("Min", gc.reduce_min), ("Prod", gc.reduce_prod), ("ArgMax", gc.argmax),
        ("ArgMin", gc.argmin)]},
    "All": lambda p: [gc.reduce_all(p.x > -1.0, 0)],
    "Any": lambda p: [gc.reduce_any(p.x > 1.0, 0)],
    "Softmax": lambda p: [gc.nn.softmax(p.x)],
    "LogSoftmax": lambda p: [gc.nn.log_softmax(p.x)],
    "L2Loss": lambda p: [gc.nn.l2_loss(p.x)],
    "SparseSoftmaxCrossEntropyWithLogits": lambda p: [
        gc.nn.sparse_softmax_cross_entropy_with_logits(labels=p.i[:3] % 4, logits=p.x)],
    "BiasAdd": lambda p: [gc.nn.bias_add(p.x, gc.constant(rand(4)))],
    "BiasAddGrad": _grad(lambda p: gc.nn.bias_add(p.x, p.b4), "b4"),
    "SumToShape": _grad(lambda p: p.x + p.b4, "b4"),
    "Cumsum": lambda p: [gc.cumsum(p.x, 1)],
    # products, convolutions, pooling
    "MatMul": lambda p: [gc.matmul(p.x, p.y, transpose_b=True)],
    "BatchMatMulV2": lambda p: [gc.matmul(gc.reshape(p.x, [-1, 2, 2]),
                                          gc.reshape(p.y, [-1, 2, 2]))],
    "Conv2D": lambda p: [_conv(p)],
    "Conv2DBackpropInput": _grad(_conv, "img"),
    "Conv2DBackpropFilter": lambda p: gc.gradients(
        gc.reduce_sum(gc.nn.conv2d(p.img, p.filt, 1, "VALID")), [p.filt]),
    "MaxPool": lambda p: [_pool("max_pool")(p)],
    "AvgPool": lambda p: [_pool("avg_pool")(p)],
    "MaxPoolGrad": _grad(_pool("max_pool"), "img"),
    "AvgPoolGrad": _grad(_pool("avg_pool"), "img"),
    "MaxPoolGradGrad": lambda p: gc.gradients(gc.reduce_sum(gc.square(gc.gradients(
        gc.reduce_sum(gc.square(_pool("max_pool")(p))), [p.img])[0])), [p.img]),
    # index ops
    "Reshape": lambda p: [gc.reshape(p.x, [-1, 2])],
    "ExpandDims": lambda p: [gc.expand_dims(p.x, 1) * 2.0],
    "Squeeze": lambda p: [gc.squeeze(gc.expand_dims(p.x, 1) * 2.0, [1])],
    "Transpose": lambda p: [gc.transpose(p.x)],
    "BroadcastTo": lambda p: [gc.broadcast_to(p.b4, gc.shape(p.x)) + p.x],
    "Slice": lambda p: [gc.slice(p.x, [1, 1], [2, 2])],
    "StridedSlice": lambda p: [p.x[1:, ::2]],
    "StridedSliceGrad": _grad(lambda p: p.x[1:, ::2], "x"),
    "Pad": lambda p: [gc.pad(p.x, [[1, 0], [0, 2]])],
    "PadV2": lambda p: [gc.pad(p.x, [[1, 0], [0, 2]], constant_values=3.0)],
    "MirrorPad": lambda p: [gc.pad(p.x, [[1, 0], [0, 2]], mode="REFLECT")],
    "MirrorPadGrad": _grad(lambda p: gc.pad(p.x, [[1, 0], [0, 2]], mode="SYMMETRIC"), "x"),
    "ConcatV2": lambda p: [gc.concat([p.x, p.y], 1)],
    "Pack": lambda p: [gc.stack([p.x, p.y], 1)],
    "Unpack": lambda p: gc.unstack(p.x, axis=1),
    "Split": lambda p: gc.split(p.x, 2, 1),
    "SplitV": lambda p: gc.split(p.x, [1, 3], 1),
    "Tile": lambda p: [gc.tile(p.x, [2, 1])],
    "GatherV2": lambda p: [gc.gather(p.x, p.i % 4, axis=1)],
    "GatherGrad": lambda p: [gc.convert_to_tensor(  # the densified IndexedSlices
        gc.gradients(gc.reduce_sum(gc.sin(gc.gather(p.x, p.i % 3))), p.x)[0])],
    "OneHot": lambda p: [gc.one_hot(p.i % 4, 4)],
    "InvertPermutation": lambda p: [gc.invert_permutation(p.perm)],
    "Fill": lambda p: [gc.fill(gc.shape(p.x), 2.5)],
    "ZerosLike": lambda p: [gc.zeros_like(p.x) + p.x],
    "OnesLike": lambda p: [gc.ones_like(p.x) + p.x],
    "Range": lambda p: [gc.cast(gc.range(0, 8, 2), gc.float32) * p.x[0, 0]],
    "Shape": lambda p: [gc.shape(p.x) * 2],
    "ShapeN": lambda p: [s * 2 for s in gc.shape_n([p.x, p.img])],
    "Size": lambda p: [gc.size(p.x) * 2],
    "Rank": lambda p: [gc.rank(p.x)],
    # random
    "RandomStandardNormal": lambda p: [gc.random_normal(gc.shape(p.x), seed=1)],
    "RandomUniform": lambda p: [gc.random_uniform(gc.shape(p.x), seed=2)],
    "TruncatedNormal": lambda p: [gc.truncated_normal([3, 5], seed=3)],
    "RandomUniformInt": lambda p: [gc.random_uniform([7], 0, 9, gc.int32, seed=4)],
    # state
    "VariableV2": _variable_update(lambda v, p: v * 2.0),
    "Assign": _variable_update(lambda v, p: gc.assign(v, p.x[0] + 1.0)),
    "AssignAdd": _variable_update(lambda v, p: gc.assign_add(v, p.x[0])),
    "AssignSub": _variable_update(lambda v, p: gc.assign_sub(v, p.x[0])),
    "ScatterAdd": _variable_update(lambda v, p: gc.scatter_add(v, p.i,
                                                               gc.reshape(p.x, [-1])[:5])),
    "ScatterSub": _variable_update(lambda v, p: gc.scatter_sub(v, p.i,
                                                               gc.reshape(p.x, [-1])[:5])),
    "ScatterUpdate": _variable_update(lambda v, p: gc.scatter_update(v, [3, 0], p.x[0, :2])),
    # made only by the backward loop of a loop whose variables change shape (ops/while_v2;
    # test_loop_shape_invariants runs it there): here a block of 2x3 elements from 2 on
    "RaggedBlock": lambda p: [gc.get_default_graph().create_op(
        "RaggedBlock", [gc.reshape(p.x, [-1]), gc.constant(2), gc.constant([2, 3])], {},
        "ragged_block").outputs[0] * 2.0],
}


class _Inputs:
    def __init__(self):
        self.x = gc.placeholder(gc.float32, [None, 4], name="x")
        self.y = gc.placeholder(gc.float32, [None, 4], name="y")
        self.pos = gc.placeholder(gc.float32, [None, 4], name="pos")
        self.b4 = gc.placeholder(gc.float32, [4], name="b4")
        self.i = gc.placeholder(gc.int32, [None], name="i")
        self.perm = gc.placeholder(gc.int32, [None], name="perm")
        self.img = gc.placeholder(gc.float32, [None, 6, 5, 2], name="img")
        self.filt = gc.placeholder(gc.float32, [2, 2, 2, 3], name="filt")
        self.init = []

    def feeds(self):
        r = np.random.RandomState(5)
        return {self.x: rand(3, 4), self.y: rand(3, 4, seed=1),
                self.pos: np.abs(rand(3, 4, seed=2)) + 0.5, self.b4: rand(4, seed=3),
                self.i: np.array([0, 2, 1, 3, 2], np.int32),
                self.perm: r.permutation(6).astype(np.int32),
                self.img: rand(2, 6, 5, 2, seed=4), self.filt: rand(2, 2, 2, 3, seed=5)}


def _groups(size=12):
    types = sorted(EXAMPLES)
    return [types[k:k + size] for k in range(0, len(types), size)]


def test_every_registered_op_type_lowers_or_is_host_side():
    missing = sorted(t for t in OP_DEFS
                     if t not in EXAMPLES and t not in HOST_OP_TYPES and t not in NOT_COMPUTED
                     and not getattr(OP_DEFS[t], "host_only", False))
    assert not missing, f"op types with neither a native example nor a host reason: {missing}"


@pytest.mark.parametrize("group", _groups(), ids=lambda g: f"{g[0]}..{g[-1]}")
def test_registered_op_examples_compile_and_match(group):
    g = gc.Graph()
    fetches = []
    with g.as_default():
        p = _Inputs()
        for op_type in group:
            before = len(g.get_operations())
            fetches += list(EXAMPLES[op_type](p))
            made = {op.type for op in g.get_operations()[before:]}
            assert op_type in made, f"the example of {op_type} makes {sorted(made)}"
        noop = gc.no_op()
    feeds = p.feeds()
    results = []
    for config in (REFERENCE, None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gc.Session(graph=g, config=config) as sess:
                sess.run(p.init)
                results.append(sess.run(fetches + [noop], feeds)[:-1])
        assert not [w for w in caught if "could not compile" in str(w.message)], \
            [str(w.message) for w in caught]
    for t, want, got in zip(fetches, *results):
        assert np.asarray(got).dtype == np.asarray(want).dtype, t.name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=t.name)
