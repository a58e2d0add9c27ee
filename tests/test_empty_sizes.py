"""Every kernel kind with a zero in each dim position (and 1, 7, 1023 where cheap), on
each backend and through the standalone runtime.

A zero size that native code mishandles kills the process (a division by a zero chunk
count traps, a gemm on a garbage range faults), so the cases run in a child process per
backend (`GRAPHC_BACKEND=b python -m tests.test_empty_sizes CASE...`), reporting each case on
its own line; a case that kills the child (or hangs it past CHILD_TIMEOUT_S) is reported
as failed with the child's exit status and the child is started again on the cases after
it. The compiled backend's cases run a second time with every safe loop split over the
thread team (GRAPHC_PARALLEL_MIN_WORK=0). Expectations are NumPy, written here,
following TF1: an empty batch gives empty results, a sum over an empty axis 0, a product 1,
max -inf, min +inf, mean nan, logsumexp -inf, a gemm with k = 0 zeros, a filter gradient
over an empty batch zeros.
"""
import json
import os
import subprocess
import sys
import traceback
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc.compiled_executor import GpuFallbackWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {}


def case(fn):
    CASES[fn.__name__[len("case_"):]] = fn
    return fn


def _rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _placeholder(value):
    return gc.placeholder(gc.as_dtype(value.dtype), [None] * value.ndim)


def _feed(*values):
    """Placeholders of unknown dims for `values` (so sizes are run-time arguments, as in
    a real batch), and the feed dict."""
    phs = [_placeholder(v) for v in values]
    return phs, dict(zip(phs, values))


# ------------------------------------------------------------------------------ gemm
def _matmul_case(m, k, n, dtype):
    a, b = _rand((m, k), dtype), _rand((k, n), dtype, 1)
    (pa, pb), feeds = _feed(a, b)
    return [gc.matmul(pa, pb)], feeds, [a.astype(np.float64) @ b]


for _m, _k, _n in [(0, 4, 3), (3, 0, 5), (4, 3, 0), (0, 0, 0), (1, 1023, 7), (7, 1023, 1)]:
    for _dt in (np.float32, np.float64):
        CASES[f"matmul_{_m}x{_k}x{_n}_{_dt.__name__}"] = \
            (lambda m=_m, k=_k, n=_n, dt=_dt: _matmul_case(m, k, n, dt))


@case
def case_matmul_transposed_k0():
    a, b = _rand((0, 3)), _rand((4, 0))
    (pa, pb), feeds = _feed(a, b)
    return [gc.matmul(pa, pb, transpose_a=True, transpose_b=True)], feeds, [np.zeros((3, 4))]


@case
def case_batch_matmul_empty_batch_and_k():
    a, b = _rand((0, 2, 3)), _rand((0, 3, 4))
    c, d = _rand((2, 3, 0)), _rand((2, 0, 4))
    (pa, pb, pc, pd), feeds = _feed(a, b, c, d)
    return [gc.matmul(pa, pb), gc.matmul(pc, pd)], feeds, [np.zeros((0, 2, 4)),
                                                           np.zeros((2, 3, 4))]


@case
def case_dense_and_its_gradients_empty_batch():
    x = _rand((0, 5), np.float64)
    w, bias = _rand((5, 3), np.float64, 1), _rand((3,), np.float64, 2)
    px = gc.placeholder(gc.float64, [None, 5])
    wv, bv = gc.constant(w), gc.constant(bias)
    y = gc.nn.relu(gc.matmul(px, wv) + bv)
    dx, dw, db = gc.gradients(gc.reduce_sum(y), [px, wv, bv])
    return [y, dx, dw, db], {px: x}, [np.zeros((0, 3)), np.zeros((0, 5)), np.zeros((5, 3)),
                                      np.zeros(3)]


# ------------------------------------------------------------------------------ conv
def _out_size(size, k, stride, padding):
    return -(-size // stride) if padding == "SAME" else max((size - k) // stride + 1, 0)


def _taps(in_hw, k_hw, strides, padding):
    """(output cell, filter tap, input cell) of every tap that reads inside the input, by
    TF's rule: SAME pads (total padding) // 2 before and the rest after."""
    (h, wd), (kh, kw), (sh, sw) = in_hw, k_hw, strides
    oh, ow = _out_size(h, kh, sh, padding), _out_size(wd, kw, sw, padding)
    ph = max((oh - 1) * sh + kh - h, 0) // 2 if padding == "SAME" else 0
    pw = max((ow - 1) * sw + kw - wd, 0) // 2 if padding == "SAME" else 0
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    hi, wi = i * sh + a - ph, j * sw + b - pw
                    if 0 <= hi < h and 0 <= wi < wd:
                        yield (i, j), (a, b), (hi, wi)


def _conv_expect(x, w, strides, padding):
    """NHWC conv2d in float64 by explicit taps."""
    n, h, wd, _ = x.shape
    kh, kw, _, co = w.shape
    out = np.zeros((n, _out_size(h, kh, strides[0], padding),
                    _out_size(wd, kw, strides[1], padding), co))
    for o, t, c in _taps((h, wd), (kh, kw), strides, padding):
        out[:, o[0], o[1], :] += x[:, c[0], c[1], :].astype(np.float64) @ w[t]
    return out


def _conv_case(x_shape, w_shape, padding="SAME", strides=(1, 1), dtype=np.float32):
    x, w = _rand(x_shape, dtype), _rand(w_shape, dtype, 1)
    # the window is compile-time geometry; the batch is a run-time size
    px = gc.placeholder(gc.as_dtype(x.dtype), [None, *x_shape[1:]])
    pw = gc.placeholder(gc.as_dtype(w.dtype), w_shape)
    feeds = {px: x, pw: w}
    y = gc.nn.conv2d(px, pw, [1, *strides, 1], padding)
    expect = _conv_expect(x, w, strides, padding)
    dy = _rand(expect.shape, dtype, 2)
    pdy = _placeholder(dy)
    feeds[pdy] = dy
    dx, dw = gc.gradients(y, [px, pw], grad_ys=pdy)
    # the gradients of sum(y * dy): by the chain rule through the explicit-tap conv
    dx_expect = _conv_input_grad(x.shape, w, dy, strides, padding)
    dw_expect = _conv_filter_grad(x, w.shape, dy, strides, padding)
    return [y, dx, dw], feeds, [expect, dx_expect, dw_expect]


def _conv_input_grad(x_shape, w, dy, strides, padding):
    dx = np.zeros(x_shape)
    for o, t, c in _taps(x_shape[1:3], w.shape[:2], strides, padding):
        dx[:, c[0], c[1], :] += dy[:, o[0], o[1], :].astype(np.float64) @ w[t].T
    return dx


def _conv_filter_grad(x, w_shape, dy, strides, padding):
    dw = np.zeros(w_shape)
    for o, t, c in _taps(x.shape[1:3], w_shape[:2], strides, padding):
        dw[t] += x[:, c[0], c[1], :].astype(np.float64).T @ dy[:, o[0], o[1], :]
    return dw


_CONVS = {
    "batch0_c4": ((0, 4, 4, 4), (3, 3, 4, 3)),       # the issue's layer (im2col + gemm)
    "batch0_c1": ((0, 8, 8, 1), (3, 3, 1, 4)),       # few taps: the direct loop lowering
    "batch0_pointwise": ((0, 5, 5, 3), (1, 1, 3, 2)),
    "in_channels0": ((2, 5, 5, 0), (3, 3, 0, 3)),
    "filters0": ((2, 5, 5, 2), (3, 3, 2, 0)),
    "height0": ((2, 0, 5, 2), (3, 3, 2, 3)),
    "width0_c1": ((2, 5, 0, 1), (3, 3, 1, 3)),
    "batch1": ((1, 4, 4, 4), (3, 3, 4, 3)),
    "batch7": ((7, 5, 5, 3), (3, 3, 3, 2)),
    "batch1023": ((1023, 4, 4, 2), (3, 3, 2, 3)),
}
for _name, (_xs, _ws) in _CONVS.items():
    CASES[f"conv_{_name}"] = lambda xs=_xs, ws=_ws: _conv_case(xs, ws)
CASES["conv_batch0_float64"] = lambda: _conv_case((0, 4, 4, 4), (3, 3, 4, 3), dtype=np.float64)
CASES["conv_valid_output0"] = lambda: _conv_case((2, 2, 5, 2), (3, 3, 2, 3), "VALID")
CASES["conv_batch0_strided"] = lambda: _conv_case((0, 7, 7, 3), (3, 3, 3, 2), "SAME", (2, 2))


def _conv_nchw_case(x_shape, w_shape):
    """NCHW: a chunk is one image (conv_kernel.py), so its chunk count is the batch."""
    x, w = _rand(x_shape), _rand(w_shape, seed=1)
    px = gc.placeholder(gc.float32, [None, *x_shape[1:]])
    pw = gc.placeholder(gc.float32, w_shape)
    y = gc.nn.conv2d(px, pw, [1, 1, 1, 1], "SAME", data_format="NCHW")
    dx, dw = gc.gradients(gc.reduce_sum(y), [px, pw])
    nhwc = x.transpose(0, 2, 3, 1)
    ones = np.ones(nhwc.shape[:3] + (w_shape[3],))
    return [y, dx, dw], {px: x, pw: w}, [
        _conv_expect(nhwc, w, (1, 1), "SAME").transpose(0, 3, 1, 2),
        _conv_input_grad(nhwc.shape, w, ones, (1, 1), "SAME").transpose(0, 3, 1, 2),
        _conv_filter_grad(nhwc, w_shape, ones, (1, 1), "SAME")]


CASES["conv_nchw_batch0"] = lambda: _conv_nchw_case((0, 3, 5, 5), (3, 3, 3, 2))
CASES["conv_nchw_in_channels0"] = lambda: _conv_nchw_case((2, 0, 5, 5), (3, 3, 0, 2))
CASES["conv_nchw_height0"] = lambda: _conv_nchw_case((2, 3, 0, 5), (3, 3, 3, 2))
CASES["conv_nchw_batch7"] = lambda: _conv_nchw_case((7, 3, 5, 5), (3, 3, 3, 2))


@case
def case_conv_layer_adam_issue_graph():
    """The issue's reproduction: conv2d + max pool + reduce_mean on an empty batch."""
    x = gc.placeholder(gc.float32, [None, 4, 4, 4])
    y = gc.layers.conv2d(x, 3, 3, padding="same")
    p = gc.layers.max_pooling2d(y, 2, 2)
    loss = gc.reduce_mean(p)
    return [y, p, loss], {x: np.zeros((0, 4, 4, 4), np.float32)}, \
        [np.zeros((0, 4, 4, 3)), np.zeros((0, 2, 2, 3)), np.float32(np.nan)]


@case
def case_static_zero_dims():
    """Zeros known at graph construction: constant sizes through the same kernels."""
    x = gc.placeholder(gc.float32, [0, 4, 4, 4])
    y = gc.layers.conv2d(x, 3, 3, padding="same")
    p = gc.layers.max_pooling2d(y, 2, 2)
    a, b = gc.placeholder(gc.float32, [3, 0]), gc.placeholder(gc.float32, [0, 4])
    dw, = gc.gradients(gc.reduce_sum(p), [gc.trainable_variables()[0]])
    feeds = {x: np.zeros((0, 4, 4, 4), np.float32), a: np.zeros((3, 0), np.float32),
             b: np.zeros((0, 4), np.float32)}
    return [p, dw, gc.matmul(a, b), gc.reduce_max(a, 1), gc.cumsum(a, 1)], feeds, \
        [np.zeros((0, 2, 2, 3)), np.zeros((3, 3, 4, 3)), np.zeros((3, 4)), np.full(3, -np.inf),
         np.zeros((3, 0))]


@case
def case_conv_layer_adam_step_on_empty_batch():
    """The issue's training step on an empty batch: zero gradients, so the first step
    leaves the variables as they are (m = v = 0) while the beta powers advance."""
    x = gc.placeholder(gc.float32, [None, 4, 4, 4])
    p = gc.layers.max_pooling2d(gc.layers.conv2d(x, 3, 3, padding="same"), 2, 2)
    opt = gc.train.AdamOptimizer().minimize(gc.reduce_mean(p))
    kernel, bias = gc.trainable_variables()
    powers = [v for v in gc.global_variables() if v.name.startswith("beta")]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        before = sess.run([kernel, bias])
        sess.run(opt, {x: np.zeros((0, 4, 4, 4), np.float32)})
        got = sess.run([kernel, bias] + powers)
    b1, b2 = np.float32(0.9), np.float32(0.999)
    return got, before + [b1 * b1, b2 * b2]


# ---------------------------------------------------------------------------- pooling
def _pool_case(shape, kind):
    x = _rand(shape)
    (px,), feeds = _feed(x)
    pool = gc.nn.max_pool if kind == "max" else gc.nn.avg_pool
    y = pool(px, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    n, h, w, c = shape
    windows = x[:, :h // 2 * 2, :w // 2 * 2].reshape(n, h // 2, 2, w // 2, 2, c)
    expect = windows.max(axis=(2, 4)) if kind == "max" else windows.mean(axis=(2, 4))
    dx, = gc.gradients(gc.reduce_sum(y), [px])
    if kind == "avg":
        dx_expect = np.zeros(shape)
        dx_expect[:, :h // 2 * 2, :w // 2 * 2] = 0.25
    else:
        dx_expect = np.zeros(shape)  # a max window's winner gets 1 (distinct random values)
        hit = windows == windows.max(axis=(2, 4), keepdims=True)
        dx_expect[:, :h // 2 * 2, :w // 2 * 2] = hit.reshape(n, h // 2 * 2, w // 2 * 2, c)
    return [y, dx], feeds, [expect, dx_expect]


for _kind in ("max", "avg"):
    for _shape in [(0, 4, 4, 3), (2, 4, 4, 0), (2, 0, 4, 3), (2, 1, 4, 3), (1, 6, 6, 7),
                   (1023, 4, 4, 1)]:
        CASES[f"{_kind}_pool_{'x'.join(map(str, _shape))}"] = \
            lambda s=_shape, k=_kind: _pool_case(s, k)


# ------------------------------------------------------------------------- reductions
_REDUCERS = {"sum": (gc.reduce_sum, np.sum), "prod": (gc.reduce_prod, np.prod),
             "max": (gc.reduce_max, lambda a, axis: np.max(a, axis, initial=-np.inf)),
             "min": (gc.reduce_min, lambda a, axis: np.min(a, axis, initial=np.inf)),
             "mean": (gc.reduce_mean, None),
             "logsumexp": (gc.reduce_logsumexp, None)}


def _np_reduce(kind, a, axis):
    a = a.astype(np.float64)
    if kind == "mean":
        count = a.shape[axis] if axis is not None else a.size
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sum(a, axis) / count
    if kind == "logsumexp":
        with np.errstate(divide="ignore"):
            return np.log(np.sum(np.exp(a), axis))
    return _REDUCERS[kind][1](a, axis=axis)


def _reduce_case(kind, shape, axis, dtype=np.float32):
    x = _rand(shape, dtype)
    (px,), feeds = _feed(x)
    return [_REDUCERS[kind][0](px, axis)], feeds, [_np_reduce(kind, x, axis)]


for _kind in _REDUCERS:
    CASES[f"reduce_{_kind}_over_empty_axis"] = lambda k=_kind: _reduce_case(k, (3, 0), 1)
    CASES[f"reduce_{_kind}_over_empty_batch"] = lambda k=_kind: _reduce_case(k, (0, 4), 0)
    CASES[f"reduce_{_kind}_to_empty"] = lambda k=_kind: _reduce_case(k, (0, 5), 1)
    CASES[f"reduce_{_kind}_all_of_empty"] = lambda k=_kind: _reduce_case(k, (2, 0, 3), None)
# big enough to be split over the thread team, with the other dim 0
CASES["reduce_sum_rows_of_nothing_1023x0"] = lambda: _reduce_case("sum", (100000, 0), 1)
CASES["reduce_max_batch0_of_wide_rows"] = lambda: _reduce_case("max", (0, 100000), 0)
CASES["reduce_sum_7x1023_float64"] = lambda: _reduce_case("sum", (7, 1023), 1, np.float64)
CASES["reduce_max_1023x7"] = lambda: _reduce_case("max", (1023, 7), 0)


@case
def case_argmax_of_empty_rows():
    x = _rand((0, 5))
    (px,), feeds = _feed(x)
    return [gc.argmax(px, 1)], feeds, [np.zeros((0,), np.int64)]


@case
def case_argmax_over_empty_axis_is_an_error():
    """TF: InvalidArgumentError (an index of nothing has no value to give)."""
    x = gc.placeholder(gc.float32, [None, None])
    with gc.Session() as sess:
        try:
            sess.run(gc.argmax(x, 1), {x: np.zeros((3, 0), np.float32)})
        except gc.errors.InvalidArgumentError as e:
            return [str(e).startswith("Reduction axis 1 is empty in shape [3,0]")], [True]
    return ["no error"], [True]


@case
def case_reshape_of_empty_to_unknown_by_zero_is_an_error():
    """The -1 of an empty tensor over a 0 dim has no value: TF's InvalidArgumentError
    (a division by zero in the dims, refused before native code runs)."""
    x = gc.placeholder(gc.float32, [None, None])
    y = gc.reshape(x, [-1, gc.shape(x)[1]]) * 2.0
    with gc.Session() as sess:
        ok = sess.run(y, {x: np.zeros((0, 3), np.float32)})
        try:
            sess.run(y, {x: np.zeros((0, 0), np.float32)})
        except gc.errors.InvalidArgumentError as e:
            return [ok, "Input to reshape is a tensor with 0 values" in str(e)], \
                [np.zeros((0, 3)), True]
    return [ok, "no error"], [np.zeros((0, 3)), True]


@case
def case_reduce_gradients_empty_batch():
    x = _rand((0, 4), np.float64)
    (px,), feeds = _feed(x)
    outs = [gc.gradients(f(px), [px])[0]
            for f in (gc.reduce_sum, gc.reduce_mean, gc.reduce_max)]
    return outs, feeds, [np.zeros((0, 4))] * 3


# ------------------------------------------------------------------------------ scans
def _cumsum_case(shape, axis, exclusive=False, reverse=False, dtype=np.float32):
    x = _rand(shape, dtype)
    (px,), feeds = _feed(x)
    a = np.flip(x, axis) if reverse else x
    expect = np.cumsum(a.astype(np.float64), axis)
    if exclusive:
        expect = expect - a
    expect = np.flip(expect, axis) if reverse else expect
    return [gc.cumsum(px, axis, exclusive=exclusive, reverse=reverse)], feeds, [expect]


CASES["cumsum_rows0"] = lambda: _cumsum_case((0, 5), 0)
CASES["cumsum_over_empty_axis"] = lambda: _cumsum_case((3, 0), 1)
CASES["cumsum_across_empty_rows"] = lambda: _cumsum_case((0, 5), 1, True, True)
CASES["cumsum_1023_float64"] = lambda: _cumsum_case((1023,), 0, dtype=np.float64)
CASES["cumsum_7x1023_exclusive"] = lambda: _cumsum_case((7, 1023), 1, exclusive=True)


# --------------------------------------------------------------------- gather, scatter
@case
def case_gather_no_indices():
    params, empty = _rand((5, 3)), _rand((0, 3))
    idx = np.zeros((0,), np.int32)
    (pp, pe, pi), feeds = _feed(params, empty, idx)
    return [gc.gather(pp, pi), gc.gather(pe, pi)], feeds, [np.zeros((0, 3))] * 2


@case
def case_embedding_step_with_no_ids():
    """A sparse gradient of 0 rows: the variable is unchanged."""
    w0 = _rand((5, 3))
    w = gc.Variable(w0)
    ids = gc.placeholder(gc.int32, [None])
    loss = gc.reduce_sum(gc.nn.embedding_lookup(w, ids))
    step = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
    with gc.control_dependencies([step]):
        after = gc.identity(w.read_value())
    return [after], {ids: np.zeros((0,), np.int32)}, [w0]


@case
def case_scatter_add_no_indices():
    w0 = _rand((4, 3))
    w = gc.Variable(w0)
    idx = gc.placeholder(gc.int32, [None])
    upd = gc.placeholder(gc.float32, [None, 3])
    return [gc.scatter_add(w, idx, upd)], \
        {idx: np.zeros((0,), np.int32), upd: np.zeros((0, 3), np.float32)}, [w0]


# --------------------------------------------------------------- softmax, xent, norm
@case
def case_softmax_and_xent_empty_batch():
    logits = _rand((0, 10))
    labels = np.zeros((0,), np.int32)
    (pl, py), feeds = _feed(logits, labels)
    xent = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=py, logits=pl)
    dense = gc.nn.softmax_cross_entropy_with_logits_v2(labels=gc.one_hot(py, 10), logits=pl)
    loss = gc.reduce_mean(xent)
    grad, = gc.gradients(gc.reduce_sum(xent) + gc.reduce_sum(dense), [pl])
    return [gc.nn.softmax(pl), xent, dense, loss, grad], feeds, \
        [np.zeros((0, 10)), np.zeros((0,)), np.zeros((0,)), np.float32(np.nan),
         np.zeros((0, 10))]


@case
def case_softmax_no_classes():
    x = _rand((3, 0))
    (px,), feeds = _feed(x)
    return [gc.nn.softmax(px), gc.nn.log_softmax(px)], feeds, [np.zeros((3, 0))] * 2


@case
def case_softmax_1023_classes():
    x = _rand((7, 1023))
    (px,), feeds = _feed(x)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return [gc.nn.softmax(px)], feeds, [e / e.sum(1, keepdims=True)]


@case
def case_batch_norm_empty_batch():
    x = np.zeros((0, 4, 4, 3), np.float32)
    px = gc.placeholder(gc.float32, [None, 4, 4, 3])
    mean, var = gc.nn.moments(px, [0, 1, 2])
    y = gc.nn.batch_normalization(px, mean, var, gc.zeros([3]), gc.ones([3]), 1e-3)
    fy, fmean, fvar = gc.nn.fused_batch_norm(px, gc.ones([3]), gc.zeros([3]))
    nan = np.full(3, np.nan)
    return [mean, var, y, fy, fmean, fvar], {px: x}, [nan, nan, x, x, nan, nan]


# ------------------------------------------------------------------------- elementwise
@case
def case_elementwise_broadcasts_to_empty():
    a, b = _rand((0, 4)), _rand((4,))
    c, d = _rand((7, 1)), _rand((1, 0))
    (pa, pb, pc, pd), feeds = _feed(a, b, c, d)
    return [gc.exp(pa) + pb, pc * pd, gc.tanh(pd)], feeds, \
        [np.zeros((0, 4)), np.zeros((7, 0)), np.zeros((1, 0))]


@case
def case_elementwise_1023():
    a = _rand((1023,))
    (pa,), feeds = _feed(a)
    return [gc.exp(pa) * 2.0], feeds, [np.exp(a.astype(np.float64)) * 2.0]


@case
def case_shape_ops_on_empty():
    a, b = _rand((0, 3)), _rand((2, 3))
    t = _rand((0, 3, 2))
    idx = np.zeros((0,), np.int32)
    (pa, pb, pt, pi), feeds = _feed(a, b, t, idx)
    return [gc.concat([pa, pb], 0), gc.transpose(pt, [2, 0, 1]), gc.tile(pa, [5, 2]),
            gc.one_hot(pi, 4), gc.reshape(pt, [-1, 6])], feeds, \
        [b, np.zeros((2, 0, 3)), np.zeros((0, 6)), np.zeros((0, 4)), np.zeros((0, 6))]


@case
def case_index_ops_on_empty():
    a, t = _rand((0, 6)), _rand((2, 0))
    five = _rand((5, 3))
    (pa, pt, pf), feeds = _feed(a, t, five)
    pieces = gc.split(pa, 3, axis=1)
    rows = gc.unstack(pt, num=2)
    n = gc.shape(pa)[0]
    return [gc.pad(pa, [[1, 1], [0, 0]]), pf[2:2], gc.slice(pf, [1, 0], [0, 3]), *pieces,
            gc.stack([pa, pa]), *rows, gc.range(n), gc.add_n([pa, pa, pa])], feeds, \
        [np.zeros((2, 6)), np.zeros((0, 3)), np.zeros((0, 3))] + [np.zeros((0, 2))] * 3 + \
        [np.zeros((2, 0, 6)), np.zeros((0,)), np.zeros((0,)), np.zeros((0,), np.int32),
         np.zeros((0, 6))]


@case
def case_more_reductions_of_empty():
    a, e = _rand((0, 5)), _rand((3, 0))
    (pa, pe), feeds = _feed(a, e)
    bias = gc.constant(_rand((5,)))
    grad_bias, = gc.gradients(gc.reduce_sum(gc.nn.bias_add(pa, bias)), [bias])
    return [gc.nn.l2_loss(pa), grad_bias, gc.reduce_any(pe > 0, 1), gc.reduce_all(pe > 0, 1),
            gc.argmin(pa, 1)], feeds, \
        [np.float32(0), np.zeros(5), np.zeros(3, bool), np.ones(3, bool),
         np.zeros((0,), np.int64)]


@case
def case_data_dependent_sizes_of_empty():
    a = _rand((0, 2))
    v = _rand((0,))
    (pa, pv), feeds = _feed(a, v)
    unique, where = gc.unique(pv), gc.where(pa > 0)
    return [unique[0], unique[1], where], feeds, \
        [np.zeros((0,)), np.zeros((0,), np.int32), np.zeros((0, 2), np.int64)]


@case
def case_random_of_empty_shape():
    a = _rand((0, 3))
    (pa,), feeds = _feed(a)
    return [gc.random_normal(gc.shape(pa)), gc.random_uniform(gc.shape(pa))], feeds, \
        [np.zeros((0, 3))] * 2


@case
def case_max_pool_second_order_empty_batch():
    x = _rand((0, 4, 4, 2), np.float64)
    px = gc.placeholder(gc.float64, [None, 4, 4, 2])
    y = gc.nn.max_pool(px, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    dx, = gc.gradients(gc.reduce_sum(y * y), [px])
    ddx, = gc.gradients(gc.reduce_sum(dx), [px])
    return [dx, ddx], {px: x}, [np.zeros((0, 4, 4, 2))] * 2


# ----------------------------------------------------------------------------- training
@case
def case_adam_step_on_empty_batch():
    """A nonempty step, then an empty one: the empty batch's gradient is 0 (a gemm with
    k = 0), so Adam still advances its beta powers and decays m and v, as TF does."""
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    w0 = _rand((4, 1), np.float64)
    x1 = _rand((2, 4), np.float64, 3)
    w = gc.Variable(w0)
    px = gc.placeholder(gc.float64, [None, 4])
    step = gc.train.AdamOptimizer(lr, b1, b2, eps).minimize(gc.reduce_mean(gc.matmul(px, w)))
    with gc.control_dependencies([step]):
        after = gc.identity(w.read_value())
    # TF's hyperparameters are float32 tensors cast to the variable's dtype, and its beta
    # powers float32 variables whatever the variable's dtype
    lr, b1, b2, eps = (np.float64(np.float32(h)) for h in (lr, b1, b2, eps))
    p1, p2 = np.float32(b1), np.float32(b2)
    g = x1.sum(0)[:, None] / 2
    m1, v1 = (1 - b1) * g, (1 - b2) * g * g
    w1 = w0 - lr * np.sqrt(1 - np.float64(p2)) / (1 - np.float64(p1)) * m1 / (np.sqrt(v1) + eps)
    p1, p2 = p1 * np.float32(b1), p2 * np.float32(b2)
    m2, v2 = b1 * m1, b2 * v1
    w2 = w1 - lr * np.sqrt(1 - np.float64(p2)) / (1 - np.float64(p1)) * m2 / (np.sqrt(v2) + eps)
    return [after], [{px: x1}, {px: np.zeros((0, 4))}], [w2]


# --------------------------------------------------------------- the standalone runtime
def _exported_model_case(kind):
    """Exports a CNN or an MLP (CPU code; GPU code on the gpu_emulated backend, run by
    the emulated device) and runs the loaded file on 0 rows and on 1 row."""
    import tempfile

    import runtime
    from graphc.export import export
    gpu = os.environ.get("GRAPHC_BACKEND") == "gpu_emulated"
    x = gc.placeholder(gc.float32, [None, 8, 8, 1], name="x")
    if kind == "cnn":
        h = gc.layers.conv2d(x, 4, 3, padding="same", activation=gc.nn.relu)
        h = gc.layers.max_pooling2d(h, 2, 2)
        h = gc.layers.conv2d(h, 8, 3, padding="same", activation=gc.nn.relu)
    else:
        h = gc.layers.dense(gc.layers.flatten(x), 16, activation=gc.nn.relu)
    probs = gc.nn.softmax(gc.layers.dense(gc.layers.flatten(h), 10))
    one = _rand((1, 8, 8, 1))
    with gc.Session() as sess, tempfile.TemporaryDirectory() as folder:
        sess.run(gc.global_variables_initializer())
        expect_one = sess.run(probs, {x: one})
        path = export(sess, os.path.join(folder, f"{kind}.gcx"), {"x": x}, {"probs": probs},
                      target="gpu" if gpu else "cpu")
        model = runtime.load(path, device="emulated" if gpu else None)
        got = [model.run({"x": np.zeros((0, 8, 8, 1), np.float32)})["probs"],
               model.run({"x": one})["probs"]]
    return got, [np.zeros((0, 10), np.float32), expect_one]


CASES["runtime_cnn_zero_rows"] = lambda: _exported_model_case("cnn")
CASES["runtime_mlp_zero_rows"] = lambda: _exported_model_case("mlp")


# ------------------------------------------------------------------------- the child
def _compare(got, expect):
    got, expect = np.asarray(got), np.asarray(expect)
    if got.shape != expect.shape:
        raise AssertionError(f"shape {got.shape}, expected {expect.shape}")
    tol = 1e-4 if got.dtype in (np.float32,) else 1e-10
    np.testing.assert_allclose(got.astype(np.float64), expect.astype(np.float64),
                               rtol=tol, atol=tol, equal_nan=True)


def _run_case(name):
    gc.reset_default_graph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = CASES[name]()
        if len(built) == 2:  # a case that runs itself: (results, expectations)
            got, expected = built
        else:
            fetches, feeds, expected = built
            with gc.Session() as sess:
                sess.run(gc.global_variables_initializer())
                for f in feeds if isinstance(feeds, list) else [feeds]:
                    got = sess.run(fetches, f)
    # a run that fell back to the reference executor or to CPU code tests nothing native
    fallbacks = [str(w.message) for w in caught if "could not compile" in str(w.message)
                 or issubclass(w.category, GpuFallbackWarning)]
    if fallbacks:
        raise AssertionError(f"not compiled for the backend: {fallbacks[0]}")
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} results for {len(expected)} expectations")
    for k, (g, e) in enumerate(zip(got, expected)):
        try:
            _compare(g, e)
        except AssertionError as err:
            raise AssertionError(f"output {k}: {err}") from None


def _child(names):
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        try:
            _run_case(name)
            result = {"case": name, "ok": True}
        except Exception:
            result = {"case": name, "ok": False, "error": traceback.format_exc(limit=4)}
        print(json.dumps(result), flush=True)


CHILD_TIMEOUT_S = 300  # all cases of a backend take ~10 s; a case looping forever hangs


def run_cases(backend, names, **env):
    """{case: None (passed) or the failure text}; a case that kills or hangs the child is
    a failure with the child's exit status, and the child restarts after it."""
    results, todo = {}, list(names)
    env = dict(os.environ, GRAPHC_BACKEND=backend, **env,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    while todo:
        try:
            proc = subprocess.run([sys.executable, "-m", "tests.test_empty_sizes", *todo],
                                  cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT_S)
            out, err, how = proc.stdout, proc.stderr, f"died (exit status {proc.returncode})"
        except subprocess.TimeoutExpired as e:
            out, err, how = _text(e.stdout), _text(e.stderr), "hung"
            proc = None
        started = _read_reports(out, results)
        if started is not None:
            results[started] = f"the process {how}:\n{err[-2000:]}"
        elif proc is None or proc.returncode != 0:
            raise RuntimeError(f"case runner {how}: {err[-2000:]}")
        todo = [n for n in todo if n not in results]
    return results


def _text(output):
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _read_reports(out, results):
    """Fills `results` from the child's report lines; returns the case it started and did
    not finish, or None."""
    started = None
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if "start" in msg:
            started = msg["start"]
        else:
            results[msg["case"]] = None if msg["ok"] else msg["error"]
            started = None
    return started


@pytest.fixture(scope="module")
def backend_results():
    cache = {}

    def get(backend):
        if backend not in cache:
            cache[backend] = results = run_cases(backend, list(CASES))
            if backend == "compiled":  # again with every safe loop split over the team
                split = run_cases(backend, list(CASES), GRAPHC_PARALLEL_MIN_WORK="0")
                for name, failure in split.items():
                    if failure and not results[name]:
                        results[name] = f"with GRAPHC_PARALLEL_MIN_WORK=0: {failure}"
        return cache[backend]
    return get


@pytest.mark.parametrize("name", list(CASES))
def test_zero_sizes(backend, backend_results, name):
    failure = backend_results(backend)[name]
    assert failure is None, failure


if __name__ == "__main__":
    _child(sys.argv[1:])
