"""Every public op that takes float tensors, in float32 and float64, on every backend,
against NumPy references written here (computed in float64 from the same input values,
never graphc's own reference kernels).

Tolerances per dtype: float64 results of exact-rounding ops (add, abs, reshape...) are
checked to 1e-12 relative (the reference rounds once, as they do), transcendentals to a
few ulp times the condition of the function on these inputs, accumulations (sums,
matmul, conv) to 1e-12 relative to the sum of magnitudes; float32 results to 1e-6
relative (2e-6 for transcendentals, 1e-5 for accumulations).

The cases of a group are fetched together: one Session run (one compile) per group,
dtype and backend. test_every_public_float_op_is_covered enumerates the op registry.
"""
import numpy as np
import pytest
from scipy import special

import graphc as tf
import graphc.distribute as hvd
from graphc.framework.op_def import OP_DEFS
from tests.conftest import BACKENDS

# rtol for (tolerance kind, dtype); atol is rtol times ATOL_SCALE (values near 0)
RTOL = {("exact", "float32"): 0, ("exact", "float64"): 0,
        ("simple", "float32"): 1e-6, ("simple", "float64"): 1e-12,
        ("trans", "float32"): 2e-6, ("trans", "float64"): 2e-14,
        ("accum", "float32"): 1e-5, ("accum", "float64"): 1e-12}
ATOL_SCALE = 1e-2


def _inputs():
    r = np.random.default_rng(20261124)
    u = lambda lo, hi, *s: r.uniform(lo, hi, s)  # noqa: E731
    x = u(-2, 2, 3, 5)
    x[0, :3] = [0.0, 0.5, -1.5]          # zero and half-integers: sign, round, relu ties
    return {"x": x, "y": u(-2, 2, 3, 5), "row": u(-2, 2, 5), "pos": u(0.2, 3, 3, 5),
            "unit": u(-0.9, 0.9, 3, 5), "empty": np.zeros((0, 3)), "cube": u(-2, 2, 2, 3, 4),
            "a": u(-1, 1, 3, 4), "b": u(-1, 1, 4, 5), "ba": u(-1, 1, 2, 3, 4),
            "bb": u(-1, 1, 2, 4, 2), "img": u(-1, 1, 2, 5, 4, 3), "filt": u(-1, 1, 2, 3, 3, 2),
            "dy": u(-1, 1, 2, 3, 2, 2), "bias": u(-1, 1, 3), "probs": r.dirichlet(np.ones(5), 3),
            "labels": np.array([1, 4, 0], np.int32), "ids": np.array([2, 0, 2, 1], np.int32),
            "mask": x > 0}


INPUTS = _inputs()


# ------------------------------------------------------------------ NumPy references
def np_conv(x, f, s, pad):
    n, h, w, c = x.shape
    kh, kw, _, o = f.shape
    if pad == "SAME":
        oh, ow = -(-h // s), -(-w // s)
        ph, pw = max((oh - 1) * s + kh - h, 0) // 2, max((ow - 1) * s + kw - w, 0) // 2
    else:
        oh, ow, ph, pw = (h - kh) // s + 1, (w - kw) // s + 1, 0, 0
    xp = np.zeros((n, h + kh + s, w + kw + s, c))
    xp[:, ph:ph + h, pw:pw + w] = x
    out = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * s:i * s + kh, j * s:j * s + kw, :]
            out[:, i, j, :] = np.tensordot(patch, f, axes=([1, 2, 3], [0, 1, 2]))
    return out


def np_conv_grads(x, f, dy, s, pad):
    """(d input, d filter) of sum(conv(x, f) * dy): the conv is linear in each."""
    def jac(shape, fn):
        flat = np.zeros(int(np.prod(shape)))
        for k in range(flat.size):
            e = np.zeros(flat.size)
            e[k] = 1
            flat[k] = np.sum(fn(e.reshape(shape)) * dy)
        return flat.reshape(shape)
    return jac(x.shape, lambda e: np_conv(e, f, s, pad)), jac(f.shape, lambda e: np_conv(x, e, s, pad))


def _pool_windows(shape, k, s, pad):
    """(output row, column, input row slice, column slice) of each SAME/VALID window."""
    n, h, w, c = shape
    if pad == "SAME":
        oh, ow = -(-h // s), -(-w // s)
        ph, pw = max((oh - 1) * s + k - h, 0) // 2, max((ow - 1) * s + k - w, 0) // 2
    else:
        oh, ow, ph, pw = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - ph, j * s - pw
            yield i, j, slice(max(r0, 0), r0 + k), slice(max(c0, 0), c0 + k)


def np_pool(x, k, s, reduce, pad):
    wins = list(_pool_windows(x.shape, k, s, pad))
    out = np.empty((x.shape[0], wins[-1][0] + 1, wins[-1][1] + 1, x.shape[3]))
    for i, j, rs, cs in wins:
        out[:, i, j, :] = reduce(x[:, rs, cs, :], axis=(1, 2))
    return out


def np_pool_grad(x, k, s, reduce, pad, w):
    """d/dx sum(pool(x) * w): a max window passes its weight to its (first) largest
    cell, an average window shares it among the cells inside the image."""
    g = np.zeros_like(x)
    for i, j, rs, cs in _pool_windows(x.shape, k, s, pad):
        win = x[:, rs, cs, :]
        if reduce is np.max:
            for b in range(x.shape[0]):
                for c in range(x.shape[3]):
                    r, q = np.unravel_index(np.argmax(win[b, :, :, c]), win.shape[1:3])
                    g[b, rs.start + r, cs.start + q, c] += w[b, i, j, c]
        else:
            g[:, rs, cs, :] += w[:, i:i + 1, j:j + 1, :] / (win.shape[1] * win.shape[2])
    return g


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_logsumexp(x, axis):
    m = x.max(axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis, keepdims=True))).squeeze(axis)


def np_selu(x):
    return 1.0507009873554804934193349852946 * np.where(
        x > 0, x, 1.6732632423543772848170429916717 * np.expm1(x))


def np_round(x):  # TF rounds half to even, as np.round
    return np.round(x)


def _scatter_ones(shape, index):
    out = np.zeros(shape)
    out[index] = 1.0
    return out


W = np.random.default_rng(7).uniform(-1, 1, (2, 3, 2, 3))   # pool output weights


# ------------------------------------------------------------------ cases
# (name, group, inputs, graphc fn, numpy reference, tolerance kind)
def _one_process_collectives(x):
    """In a process no MPI launcher started, graphc.distribute is a job of one process:
    each collective gives its input (tests/test_distribute.py runs 2 and 3 processes)."""
    hvd.init()
    return hvd.allreduce(x, op=hvd.Sum) + hvd.allreduce(x) + hvd.allgather(x) + \
        hvd.broadcast(x, 0)


CASES = [
    ("abs", "unary", "x", tf.abs, np.abs, "exact"),
    ("negative", "unary", "x", tf.negative, np.negative, "exact"),
    ("sign", "unary", "x", tf.sign, np.sign, "exact"),
    # x / 0 is +-inf (nan where x is 0); where() brings the bool results back to floats
    ("is_nan_is_inf", "unary", "x",
     lambda x: tf.where(tf.is_nan(x / (x - x)), x * 0 + 2, x * 0) +
     tf.where(tf.is_inf(x / (x - x)), x * 0 + 1, x * 0),
     lambda x: np.where(x == 0, 2.0, 1.0).astype(x.dtype), "exact"),
    ("square", "unary", "x", tf.square, np.square, "simple"),
    ("sqrt", "unary", "pos", tf.sqrt, np.sqrt, "simple"),
    ("rsqrt", "unary", "pos", tf.rsqrt, lambda x: 1 / np.sqrt(x), "trans"),
    ("reciprocal", "unary", "pos", tf.reciprocal, lambda x: 1 / x, "simple"),
    ("exp", "unary", "x", tf.exp, np.exp, "trans"),
    ("log", "unary", "pos", tf.log, np.log, "trans"),
    ("log1p", "unary", "pos", tf.log1p, np.log1p, "trans"),
    ("expm1", "unary", "x", tf.expm1, np.expm1, "trans"),
    ("tanh", "unary", "x", tf.tanh, np.tanh, "trans"),
    ("sigmoid", "unary", "x", tf.sigmoid, lambda x: 1 / (1 + np.exp(-x)), "trans"),
    ("sin", "unary", "x", tf.sin, np.sin, "trans"),
    ("cos", "unary", "x", tf.cos, np.cos, "trans"),
    ("floor", "unary", "x", tf.floor, np.floor, "exact"),
    ("ceil", "unary", "x", tf.ceil, np.ceil, "exact"),
    ("round", "unary", "x", tf.round, np_round, "exact"),
    ("erf", "unary", "x", tf.erf, special.erf, "trans"),
    ("relu", "unary", "x", tf.nn.relu, lambda x: np.maximum(x, 0), "exact"),
    ("relu6", "unary", "x", lambda x: tf.nn.relu6(x * 4), lambda x: np.clip(x * 4, 0, 6),
     "exact"),
    ("leaky_relu", "unary", "x", lambda x: tf.nn.leaky_relu(x, 0.25),
     lambda x: np.where(x > 0, x, 0.25 * x), "exact"),
    ("elu", "unary", "x", tf.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x)), "trans"),
    ("selu", "unary", "x", tf.nn.selu, np_selu, "trans"),
    ("softplus", "unary", "x", tf.nn.softplus, lambda x: np.logaddexp(0, x), "trans"),
    ("softsign", "unary", "x", tf.nn.softsign, lambda x: x / (1 + np.abs(x)), "simple"),
    ("identity", "unary", "x", tf.identity, lambda x: x, "exact"),
    ("stop_gradient", "unary", "x", tf.stop_gradient, lambda x: x, "exact"),
    ("check_numerics", "unary", "x", lambda x: tf.check_numerics(x, "m"), lambda x: x, "exact"),
    ("zeros_like", "unary", "x", tf.zeros_like, np.zeros_like, "exact"),
    ("ones_like", "unary", "x", tf.ones_like, np.ones_like, "exact"),
    ("clip_by_value", "unary", "x", lambda x: tf.clip_by_value(x, -0.5, 1.0),
     lambda x: np.clip(x, -0.5, 1.0), "exact"),
    ("cast_other_float", "unary", "x",
     lambda x: tf.cast(tf.cast(x, tf.float16), x.dtype),
     lambda x: x.astype(np.float16).astype(np.float64), "exact"),
    ("empty_exp", "unary", "empty", tf.exp, np.exp, "trans"),
    ("add", "binary", "x row", tf.add, np.add, "simple"),
    ("subtract", "binary", "x y", tf.subtract, np.subtract, "simple"),
    ("multiply", "binary", "x row", tf.multiply, np.multiply, "simple"),
    ("truediv", "binary", "x pos", tf.truediv, np.divide, "simple"),
    ("floordiv", "binary", "x pos", tf.floordiv, np.floor_divide, "simple"),
    ("floormod", "binary", "x pos", tf.floormod, np.mod, "simple"),
    ("pow", "binary", "pos x", tf.pow, np.power, "trans"),
    ("maximum", "binary", "x y", tf.maximum, np.maximum, "exact"),
    ("minimum", "binary", "x row", tf.minimum, np.minimum, "exact"),
    ("squared_difference", "binary", "x y", tf.squared_difference,
     lambda a, b: (a - b) ** 2, "simple"),
    ("add_n", "binary", "x y", lambda a, b: tf.add_n([a, b, a]), lambda a, b: a + b + a,
     "simple"),
    ("equal", "binary", "x x", lambda a, b: tf.equal(a, b * 1), np.equal, "exact"),
    ("not_equal", "binary", "x y", tf.not_equal, np.not_equal, "exact"),
    ("less", "binary", "x y", tf.less, np.less, "exact"),
    ("less_equal", "binary", "x row", tf.less_equal, np.less_equal, "exact"),
    ("greater", "binary", "x y", tf.greater, np.greater, "exact"),
    ("greater_equal", "binary", "x y", tf.greater_equal, np.greater_equal, "exact"),
    ("where_select", "binary", "x y", lambda a, b: tf.where(a > b, a, b),
     lambda a, b: np.where(a > b, a, b), "exact"),
    ("sigmoid_xent", "binary", "x unit",
     lambda a, b: tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.abs(b), logits=a),
     lambda a, b: np.maximum(a, 0) - a * np.abs(b) + np.log1p(np.exp(-np.abs(a))), "trans"),
    ("reduce_sum", "reduction", "x", lambda x: tf.reduce_sum(x, 1), lambda x: x.sum(1),
     "accum"),
    ("reduce_sum_empty", "reduction", "empty", lambda x: tf.reduce_sum(x, 0),
     lambda x: x.sum(0), "accum"),
    ("reduce_mean", "reduction", "cube", lambda x: tf.reduce_mean(x, [0, 2], keepdims=True),
     lambda x: x.mean((0, 2), keepdims=True), "accum"),
    ("reduce_max", "reduction", "x", lambda x: tf.reduce_max(x, 0), lambda x: x.max(0),
     "exact"),
    ("reduce_min", "reduction", "cube", tf.reduce_min, np.min, "exact"),
    ("reduce_prod", "reduction", "x", lambda x: tf.reduce_prod(x, 1), lambda x: x.prod(1),
     "accum"),
    ("reduce_logsumexp", "reduction", "x", lambda x: tf.reduce_logsumexp(x, 1),
     lambda x: np_logsumexp(x, 1), "trans"),
    ("argmax", "reduction", "x", lambda x: tf.argmax(x, 1), lambda x: x.argmax(1), "exact"),
    ("argmin", "reduction", "x", lambda x: tf.argmin(x, 0), lambda x: x.argmin(0), "exact"),
    ("count_nonzero", "reduction", "x", lambda x: tf.count_nonzero(x, 1),
     lambda x: np.count_nonzero(x, 1), "exact"),
    ("cumsum", "reduction", "x", lambda x: tf.cumsum(x, 1), lambda x: np.cumsum(x, 1),
     "accum"),
    ("cumsum_exclusive_reverse", "reduction", "x",
     lambda x: tf.cumsum(x, 0, exclusive=True, reverse=True),
     lambda x: np.flip(np.cumsum(np.flip(x, 0), 0), 0) - x, "accum"),
    ("softmax", "reduction", "x", tf.nn.softmax, np_softmax, "trans"),
    ("log_softmax", "reduction", "x", tf.nn.log_softmax,
     lambda x: x - np_logsumexp(x, 1)[:, None], "trans"),
    ("l2_loss", "reduction", "x", tf.nn.l2_loss, lambda x: (x ** 2).sum() / 2, "accum"),
    ("l2_normalize", "reduction", "x", lambda x: tf.nn.l2_normalize(x, 1),
     lambda x: x / np.sqrt((x ** 2).sum(1, keepdims=True)), "trans"),
    ("moments_variance", "reduction", "x", lambda x: tf.nn.moments(x, [0])[1],
     lambda x: x.var(0), "accum"),
    ("softmax_xent", "reduction", "x probs",
     lambda a, p: tf.nn.softmax_cross_entropy_with_logits_v2(labels=p, logits=a),
     lambda a, p: -(p * (a - np_logsumexp(a, 1)[:, None])).sum(1), "trans"),
    ("sparse_softmax_xent", "reduction", "x",
     lambda a: tf.nn.sparse_softmax_cross_entropy_with_logits(
         labels=tf.constant(INPUTS["labels"]), logits=a),
     lambda a: np_logsumexp(a, 1) - a[np.arange(3), INPUTS["labels"]], "trans"),
    ("reshape", "array", "x", lambda x: tf.reshape(x, [5, -1]), lambda x: x.reshape(5, -1),
     "exact"),
    ("transpose", "array", "cube", lambda x: tf.transpose(x, [2, 0, 1]),
     lambda x: x.transpose(2, 0, 1), "exact"),
    ("expand_dims", "array", "x", lambda x: tf.expand_dims(x, 1), lambda x: x[:, None],
     "exact"),
    ("squeeze", "array", "x", lambda x: tf.squeeze(x[:, :1]), lambda x: x[:, 0], "exact"),
    ("concat", "array", "x y", lambda a, b: tf.concat([a, b], 1),
     lambda a, b: np.concatenate([a, b], 1), "exact"),
    ("stack", "array", "x y", lambda a, b: tf.stack([a, b], 1),
     lambda a, b: np.stack([a, b], 1), "exact"),
    ("unstack", "array", "x", lambda x: tf.unstack(x, axis=1)[3], lambda x: x[:, 3], "exact"),
    ("split", "array", "x", lambda x: tf.split(x, 3, 0)[1], lambda x: x[1:2], "exact"),
    ("split_sizes", "array", "x", lambda x: tf.split(x, [2, -1], 1)[1], lambda x: x[:, 2:],
     "exact"),
    ("slice", "array", "x", lambda x: tf.slice(x, [1, 1], [2, -1]), lambda x: x[1:, 1:],
     "exact"),
    ("strided_slice", "array", "cube", lambda x: x[::-1, 1:, ::2], lambda x: x[::-1, 1:, ::2],
     "exact"),
    ("tile", "array", "x", lambda x: tf.tile(x, [2, 1]), lambda x: np.tile(x, (2, 1)),
     "exact"),
    ("pad", "array", "x", lambda x: tf.pad(x, [[1, 0], [0, 2]]),
     lambda x: np.pad(x, [(1, 0), (0, 2)]), "exact"),
    ("pad_value", "array", "x", lambda x: tf.pad(x, [[1, 1], [0, 0]], constant_values=2.5),
     lambda x: np.pad(x, [(1, 1), (0, 0)], constant_values=2.5), "exact"),
    ("pad_reflect", "array", "x", lambda x: tf.pad(x, [[1, 1], [2, 0]], mode="REFLECT"),
     lambda x: np.pad(x, [(1, 1), (2, 0)], mode="reflect"), "exact"),
    ("pad_symmetric", "array", "x", lambda x: tf.pad(x, [[1, 0], [0, 2]], mode="SYMMETRIC"),
     lambda x: np.pad(x, [(1, 0), (0, 2)], mode="symmetric"), "exact"),
    ("broadcast_to", "array", "row", lambda x: tf.broadcast_to(x, [2, 5]),
     lambda x: np.broadcast_to(x, (2, 5)), "exact"),
    ("gather", "array", "x", lambda x: tf.gather(x, INPUTS["ids"][:3], axis=1),
     lambda x: x[:, INPUTS["ids"][:3]], "exact"),
    ("unique", "array", "x", lambda x: tf.unique(tf.reshape(tf.round(x), [-1]))[0],
     lambda x: _first_occurrences(np.round(x).ravel()), "exact"),
    ("mpi_collectives", "array", "x", lambda x: _one_process_collectives(x),
     lambda x: 4 * x, "simple"),
    ("one_hot", "array", "row",
     lambda x: tf.one_hot(INPUTS["ids"], 3, on_value=x[0], off_value=x[1]),
     lambda x: np.where(np.eye(3)[INPUTS["ids"]] > 0, x[0], x[1]), "exact"),
    ("fill", "array", "row", lambda x: tf.fill([2, 3], x[2]),
     lambda x: np.full((2, 3), x[2]), "exact"),
    ("range", "array", "row", lambda x: tf.range(0.5, 3.0, 0.75, dtype=x.dtype) + x[0],
     lambda x: np.arange(0.5, 3.0, 0.75) + x[0], "simple"),
    ("shape_size_rank", "array", "cube",
     lambda x: tf.cast(tf.concat([tf.shape(x), [tf.size(x), tf.rank(x)]], 0), x.dtype),
     lambda x: np.array([2, 3, 4, 24, 3.0]), "exact"),
    ("shape_n", "array", "x y", lambda a, b: tf.shape_n([a, b[:1]])[1],
     lambda a, b: np.array([1, 5]), "exact"),
    ("where_indices", "array", "x", lambda x: tf.where(x > 0.5), lambda x: np.argwhere(x > 0.5),
     "exact"),
    ("placeholder_with_default", "array", "x",
     lambda x: tf.placeholder_with_default(x, [3, 5]) * 2, lambda x: x * 2, "exact"),
    ("matmul", "nn", "a b", tf.matmul, np.matmul, "accum"),
    ("matmul_transposed", "nn", "b a",
     lambda b, a: tf.matmul(b, a, transpose_a=True, transpose_b=True), lambda b, a: b.T @ a.T,
     "accum"),
    ("batch_matmul", "nn", "ba bb", tf.matmul, np.matmul, "accum"),
    ("bias_add", "nn", "img bias", tf.nn.bias_add, np.add, "simple"),
    ("conv2d_same", "nn", "img filt",
     lambda x, f: tf.nn.conv2d(x, f, [1, 2, 2, 1], "SAME"),
     lambda x, f: np_conv(x, f, 2, "SAME"), "accum"),
    ("conv2d_valid", "nn", "img filt",
     lambda x, f: tf.nn.conv2d(x, f, [1, 1, 1, 1], "VALID"),
     lambda x, f: np_conv(x, f, 1, "VALID"), "accum"),
    ("conv2d_backprop_input", "nn", "filt dy",
     lambda f, dy: tf.nn.conv2d_backprop_input([2, 5, 4, 3], f, dy, [1, 2, 2, 1], "SAME"),
     lambda f, dy: np_conv_grads(INPUTS["img"], f, dy, 2, "SAME")[0], "accum"),
    ("conv2d_backprop_filter", "nn", "img dy",
     lambda x, dy: tf.nn.conv2d_backprop_filter(x, [2, 3, 3, 2], dy, [1, 2, 2, 1], "SAME"),
     lambda x, dy: np_conv_grads(x, INPUTS["filt"], dy, 2, "SAME")[1], "accum"),
    ("max_pool", "nn", "img", lambda x: tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"),
     lambda x: np_pool(x, 2, 2, np.max, "SAME"), "exact"),
    ("avg_pool", "nn", "img", lambda x: tf.nn.avg_pool(x, [1, 3, 3, 1], [1, 1, 1, 1], "VALID"),
     lambda x: np_pool(x, 3, 1, np.mean, "VALID"), "accum"),
    ("conv2d_transpose", "nn", "filt dy",
     lambda f, dy: tf.nn.conv2d_transpose(dy, f, [2, 5, 4, 3], [1, 2, 2, 1], "SAME"),
     lambda f, dy: np_conv_grads(INPUTS["img"], f, dy, 2, "SAME")[0], "accum"),
    ("gelu", "nn", "x", tf.nn.gelu, lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
     "trans"),
    ("gelu_tanh", "nn", "x", lambda x: tf.nn.gelu(x, approximate=True),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
     "trans"),
    ("batch_normalization", "nn", "x row pos",
     lambda x, r, p: tf.nn.batch_normalization(x, r, p[0], r * 2, r - 1, 1e-3),
     lambda x, r, p: (x - r) / np.sqrt(p[0] + 1e-3) * (r - 1) + r * 2, "trans"),
    ("fused_batch_norm", "nn", "img bias",
     lambda x, b: tf.nn.fused_batch_norm(x, b + 2, b, epsilon=1e-3)[0],
     lambda x, b: (x - x.mean((0, 1, 2))) / np.sqrt(x.var((0, 1, 2)) + 1e-3) * (b + 2) + b,
     "accum"),
    ("embedding_lookup", "nn", "x", lambda x: tf.nn.embedding_lookup(x, INPUTS["ids"][:3]),
     lambda x: x[INPUTS["ids"][:3]], "exact"),
    ("top_k", "nn", "x", lambda x: tf.nn.top_k(x, 3)[0], lambda x: -np.sort(-x, 1)[:, :3],
     "exact"),
    # host ops: the user's function's result, and Print's pass-through (first_n=0: silent)
    ("py_func", "nn", "x", lambda x: tf.py_func(lambda a: a * 2, [x], x.dtype),
     lambda x: x * 2, "exact"),
    ("Print", "nn", "x", lambda x: tf.Print(x, [x], first_n=0), lambda x: x, "exact"),
    # control flow (host stages until the compiler has regions): cond's taken branch, a
    # loop of 3 doublings, a TensorArray written in a loop and stacked, map_fn (a While
    # over a TensorArray: scatter, then gather), and the gradient of a loop (the
    # TensorArray grads); Assert passes its data through a control dependency
    ("cond", "control", "x", lambda x: tf.cond(tf.reduce_sum(x) > -1e9, lambda: x * 2,
                                               lambda: x - 1), lambda x: x * 2, "exact"),
    ("while_loop", "control", "x",
     lambda x: tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2), [0, x])[1],
     lambda x: x * 8, "exact"),
    ("map_fn", "control", "x", lambda x: tf.map_fn(lambda row: row * row, x),
     lambda x: x * x, "simple"),
    ("tensor_array_grad", "control", "x",
     lambda x: tf.gradients(tf.reduce_sum(tf.map_fn(lambda row: row * row, x)), x)[0],
     lambda x: 2 * x, "exact"),
    ("assert", "control", "x", lambda x: _asserted(x), lambda x: x, "exact"),
    ("softmax_xent_v1", "nn", "x probs",
     lambda a, p: tf.nn.softmax_cross_entropy_with_logits(labels=p, logits=a),
     lambda a, p: -(p * (a - np_logsumexp(a, 1)[:, None])).sum(1), "trans"),
    # gradient ops, made by tf.gradients: the reference is the exact adjoint
    ("max_pool_grad", "grad", "img",
     lambda x: tf.gradients(tf.reduce_sum(
         tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME") * W), x)[0],
     lambda x: np_pool_grad(x, 2, 2, np.max, "SAME", W), "simple"),
    ("avg_pool_grad", "grad", "img",
     lambda x: tf.gradients(tf.reduce_sum(
         tf.nn.avg_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME") * W), x)[0],
     lambda x: np_pool_grad(x, 2, 2, np.mean, "SAME", W), "simple"),
    ("bias_add_grad", "grad", "img bias",
     lambda x, b: tf.gradients(tf.reduce_sum(tf.nn.bias_add(x, b) * x), b)[0],
     lambda x, b: x.sum((0, 1, 2)), "accum"),
    ("gather_grad", "grad", "x",
     # an IndexedSlices, as in TF: densified into a GatherGrad
     lambda x: tf.convert_to_tensor(
         tf.gradients(tf.reduce_sum(tf.gather(x, INPUTS["ids"][:3]) * 2.0), x)[0]),
     lambda x: np.bincount(INPUTS["ids"][:3], minlength=3)[:, None] * 2.0 * np.ones((3, 5)),
     "exact"),
    ("strided_slice_grad", "grad", "cube",
     lambda x: tf.gradients(tf.reduce_sum(x[::-1, 1:, ::2] * 3.0), x)[0],
     lambda x: _scatter_ones(x.shape, np.s_[:, 1:, ::2]) * 3.0, "exact"),
    ("mirror_pad_grad", "grad", "x",
     lambda x: tf.gradients(tf.reduce_sum(tf.pad(x, [[1, 1], [0, 0]], mode="REFLECT")), x)[0],
     lambda x: np.array([1.0, 3.0, 1.0])[:, None] * np.ones((3, 5)), "exact"),
    ("broadcast_grad", "grad", "x row",
     lambda a, r: tf.gradients(tf.reduce_sum((a + r) * a), r)[0], lambda a, r: a.sum(0),
     "accum"),
]
GROUPS = sorted({c[1] for c in CASES})

# Registered types that take no float tensor, or that no public function builds on its own.
NOT_FLOAT_OPS = {
    "Assign", "AssignAdd", "AssignSub", "VariableV2", "IsVariableInitialized",
    "UninitializedNames", "VariableValueOrDefault",   # variables: test_variables
    "ScatterAdd", "ScatterSub", "ScatterUpdate",      # variable updates: test_sparse_gradients
    "Const", "Placeholder", "NoOp",                   # sources and ordering
    "All", "Any", "LogicalAnd", "LogicalNot", "LogicalOr",   # bool only
    "InvertPermutation",                                      # int only
    "HistogramSummary", "ImageSummary", "AudioSummaryV2", "MergeSummary",  # host strings
    "ScalarSummary",
    "IteratorGetNext", "MakeIterator",                # tf.data
    "IteratorToStringHandle", "IteratorGetNextFromStringHandle",  # feedable iterators
    "ParseExampleProtos",                             # serialized Examples: test_tf_example
    "LogUniformCandidateSampler", "UniformCandidateSampler",  # int samples
    "MaxPoolGradGrad",      # second derivative of max-pool: test_nn_ops' gradchecks
    "PrintV2",              # tf.print: no output, writes text (test_tf1_ops_breadth)
    "FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2", "QueueEnqueueV2",
    "QueueEnqueueManyV2",
    "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueCloseV2",
    "QueueSizeV2", "QueueIsClosedV2",  # queues move values unchanged: test_tf1_queues
    "CountUpTo",            # int variables only
    "StringJoin", "ReduceJoin", "StringSplit", "StringSplitV2", "StringLength",
    "StringLower", "StringUpper", "StringStrip", "Substr", "RegexReplace", "RegexFullMatch",
    "StaticRegexReplace", "StaticRegexFullMatch", "StringToHashBucketFast", "ReadFile",
    "WriteFile", "MatchingFiles", "EncodeBase64", "DecodeBase64",  # strings only: test_strings
    "AsString", "StringToNumber", "DecodeRaw",  # float32/float64 cases in test_strings
    "HashTable", "InitializeTable", "InitializeTableFromTextFile", "LookupTableFind",
    "LookupTableSize",  # tables of every value dtype: test_lookup
    "DecodeJpeg", "DecodePng", "DecodeBmp", "DecodeGif", "DecodeImage", "IsJpeg",
    "EncodePng", "EncodeJpeg",  # uint8 pixels (float decode_image: test_image_decode)
    "TextLineReaderV2", "WholeFileReaderV2", "TFRecordReaderV2", "FixedLengthRecordReaderV2",
    "ReaderReadV2", "ReaderReadUpToV2", "ReaderNumRecordsProducedV2",
    "ReaderNumWorkUnitsCompletedV2", "ReaderResetV2",  # file records: test_readers
    "SparseToDense",  # float32/float64 cases and gradient in test_sparse_to_dense
    "RaggedBlock",  # not public: made by the gradient of a loop whose variables change
    # shape; float32/float64 through it in test_loop_shape_invariants
}
# Random ops: their values are graphc's own stream (not NumPy's); checked for dtype/range.
RANDOM_OPS = {"RandomUniform": lambda dt: tf.random_uniform([400], dtype=dt, seed=1),
              "RandomStandardNormal": lambda dt: tf.random_normal([400], dtype=dt, seed=2),
              "TruncatedNormal": lambda dt: tf.truncated_normal([400], dtype=dt, seed=3),
              "RandomUniformInt": lambda dt: tf.cast(tf.random_uniform(
                  [400], maxval=7, dtype=tf.int32, seed=4), dt)}


def _first_occurrences(a):
    """The distinct values of a in order of first occurrence (tf.unique's order)."""
    _, first = np.unique(a, return_index=True)
    return a[np.sort(first)]


def _asserted(x):
    with tf.control_dependencies([tf.Assert(tf.reduce_all(tf.is_finite(x)), [x])]):
        return tf.identity(x)


def _build(cases, dtype):
    phs, feeds, outs = {}, {}, []
    for name, _, args, fn, _, _ in cases:
        ts = []
        for key in args.split():
            if key not in phs:
                v = INPUTS[key]
                v = v.astype(dtype) if v.dtype.kind == "f" else v
                phs[key] = tf.placeholder(v.dtype, v.shape, name=key)
                feeds[phs[key]] = v
            ts.append(phs[key])
        outs.append(fn(*ts))
    return outs, feeds


def _check(name, got, want, tol, dtype):
    want = np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}"
    if got.dtype.kind == "f":
        assert got.dtype == dtype, f"{name}: dtype {got.dtype}"
    rtol = RTOL[(tol, np.dtype(dtype).name)]
    # float32 inputs are exact: only the op's own rounding (and the result's) is checked
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=rtol * ATOL_SCALE * max(1.0, float(np.max(np.abs(want),
                                                                              initial=0))),
                               err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("group", GROUPS)
def test_public_float_ops_match_numpy(group, dtype, backend):
    cases = [c for c in CASES if c[1] == group]
    outs, feeds = _build(cases, dtype)
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        got = sess.run(outs, feeds)
    for (name, _, args, _, ref, tol), g in zip(cases, got):
        # the reference sees the values the op saw (float32 inputs widened exactly)
        vals = [INPUTS[k].astype(dtype).astype(np.float64) if INPUTS[k].dtype.kind == "f"
                else INPUTS[k] for k in args.split()]
        _check(name, np.asarray(g), ref(*vals), tol, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_ops_dtype_and_range(dtype, backend):
    outs = {k: fn(tf.as_dtype(dtype)) for k, fn in RANDOM_OPS.items()}
    with tf.Session(config=tf.ConfigProto(backend=backend)) as sess:
        got = sess.run(outs)
    for k, v in got.items():
        assert v.dtype == dtype and v.shape == (400,), k
    assert 0 <= got["RandomUniform"].min() and got["RandomUniform"].max() < 1
    assert abs(got["RandomUniform"].mean() - 0.5) < 0.06
    assert abs(got["RandomStandardNormal"].std() - 1) < 0.15
    assert np.abs(got["TruncatedNormal"]).max() <= 2
    assert set(np.unique(got["RandomUniformInt"])) <= set(range(7))


def test_every_public_float_op_is_covered():
    """Every registered op type that takes a float tensor is built by some case above."""
    built = set()
    for dtype in (np.float32, np.float64):
        tf.reset_default_graph()
        _build(CASES, dtype)
        for fn in RANDOM_OPS.values():
            fn(tf.as_dtype(dtype))
        built |= {op.type for op in tf.get_default_graph().get_operations()}
    missing = set(OP_DEFS) - built - NOT_FLOAT_OPS
    assert not missing, f"public float ops without a float32/float64 case: {sorted(missing)}"
