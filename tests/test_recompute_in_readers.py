"""A loop kernel recomputes another loop kernel's elementwise value from what it reads anyway
instead of reading it from memory (fusion step 2c): GELU's tanh in its gradient's kernel
(from the GELU input, which that kernel reads), layer norm's normalized input in its
gradient's kernel (from x - mean and the rsqrt, which it reads). Each was a tensor written
by the forward and read back by the backward.

Structure on the CPU and GPU targets; values against NumPy references written here (float32
and float64, odd sizes) on every backend; gradients against central finite differences.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.driver import compile_options, schedule_module
from tests.gradcheck import check_gradients

ALL_BACKENDS = pytest.mark.backends("compiled", "reference", "gpu_emulated")

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-11)}
GPU_TARGET = {"kind": "gpu", "arch": "sm_80", "ptx": False}
GELU_C = np.sqrt(2 / np.pi)
EPS = 1e-5


def _gelu(h):
    return 0.5 * h * (1.0 + gc.tanh(GELU_C * (h + 0.044715 * h * h * h)))


def _ffn(x, w1, w2):
    """A BERT feed-forward block's core: gelu(x w1) w2; also returns gelu's tanh."""
    h = gc.matmul(x, w1)
    h3 = h * h * h
    t = gc.tanh(GELU_C * (h + 0.044715 * h3))
    return gc.matmul(0.5 * h * (1.0 + t), w2), t


def _layer_norm(x, w, gamma, beta):
    """A post-LN residual: layer_norm(x + x w); also returns the normalized value."""
    h = x + gc.matmul(x, w)
    mean, var = gc.nn.moments(h, axes=[1], keep_dims=True)
    xhat = (h - mean) * gc.rsqrt(var + EPS)
    return xhat * gamma + beta, xhat


def _np_ffn(x, w1, w2):
    h = x @ w1
    return (0.5 * h * (1.0 + np.tanh(GELU_C * (h + 0.044715 * h ** 3)))) @ w2


def _np_ffn_grads(x, w1, w2):
    """d(sum(y * y) / 2) / (x, w1, w2) by the chain rule, written out."""
    dy = _np_ffn(x, w1, w2)
    h = x @ w1
    t = np.tanh(GELU_C * (h + 0.044715 * h ** 3))
    g = 0.5 * h * (1.0 + t)
    dg = dy @ w2.T
    dh = dg * (0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * h * h))
    return dh @ w1.T, x.T @ dh, g.T @ dy


def _np_layer_norm(x, w, gamma, beta):
    h = x + x @ w
    mean = h.mean(1, keepdims=True)
    var = ((h - mean) ** 2).mean(1, keepdims=True)
    return (h - mean) / np.sqrt(var + EPS) * gamma + beta


def _np_layer_norm_grads(x, w, gamma, beta, wo):
    """d(sum(z * z) / 2) / (x, w, gamma, beta), z = layer_norm(...) wo."""
    dy = (_np_layer_norm(x, w, gamma, beta) @ wo) @ wo.T
    h = x + x @ w
    n = h.shape[1]
    mean = h.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(((h - mean) ** 2).mean(1, keepdims=True) + EPS)
    xhat = (h - mean) * rstd
    dxhat = dy * gamma
    dh = rstd * (dxhat - dxhat.mean(1, keepdims=True) -
                 xhat * (dxhat * xhat).sum(1, keepdims=True) / n)
    return dh + dh @ w.T, x.T @ dh, (dy * xhat).sum(0), dy.sum(0)


def _arrays(dtype, shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) / np.sqrt(s[0])).astype(dtype) for s in shapes]


def _kernels(fetches, feeds, target=None):
    module = lower(list(feeds), list(fetches), [], [np.shape(a) for a in feeds.values()])
    schedule_module(module, target=target, options=compile_options())
    return module.kernels


def _written(kernels, tensor):
    return any(v.node.name == tensor.op.name for k in kernels for v in k.outputs)


def _computing(kernels, tensor):
    return [k for k in kernels if any(n.name == tensor.op.name for n in k.nodes)]


def _ffn_graph(dtype, n, d, f):
    arrays = _arrays(dtype, [(n, d), (d, f), (f, d)])
    phs = [gc.placeholder(gc.as_dtype(dtype), a.shape) for a in arrays]
    x, w1, w2 = phs
    y, t = _ffn(x, w1, w2)
    # the incoming gradient y . w2^T is a product of the forward's result, as in training
    grads = gc.gradients(0.5 * gc.reduce_sum(y * y), [x, w1, w2])
    return dict(zip(phs, arrays)), arrays, y, t, grads


def _layer_norm_graph(dtype, n, d):
    arrays = _arrays(dtype, [(n, d), (d, d), (d,), (d,), (d, d)])
    phs = [gc.placeholder(gc.as_dtype(dtype), a.shape) for a in arrays]
    x, w, gamma, beta, wo = phs
    y, xhat = _layer_norm(x, w, gamma, beta)
    z = gc.matmul(y, wo)
    grads = gc.gradients(0.5 * gc.reduce_sum(z * z), [x, w, gamma, beta])
    return dict(zip(phs, arrays)), arrays, y, xhat, grads


@pytest.mark.parametrize("target", [None, GPU_TARGET], ids=["cpu", "gpu"])
def test_gelu_gradient_recomputes_the_tanh_instead_of_reading_it(target):
    feeds, _, y, t, grads = _ffn_graph(np.float32, 12, 8, 16)
    kernels = _kernels([y] + grads, feeds, target)
    computing = _computing(kernels, t)
    assert [k.kind for k in computing] == ["loop", "loop"], "\n".join(map(str, kernels))
    assert not _written(kernels, t)
    # the gradient's kernel reads no new tensor for it: the GELU input h and the incoming
    # gradient (a product), besides scalars
    h = t.op.inputs[0].op.inputs[1].op.inputs[0]
    tensors = [v for v in computing[1].inputs if any(d != 1 for d in v.dims)]
    assert sorted(v.node.type for v in tensors) == ["MatMul", "MatMul"]
    assert any(v.node.name == h.op.name for v in tensors)


@pytest.mark.parametrize("target", [None, GPU_TARGET], ids=["cpu", "gpu"])
def test_layer_norm_gradient_recomputes_the_normalized_input(target):
    feeds, _, y, xhat, grads = _layer_norm_graph(np.float32, 12, 8)
    kernels = _kernels([y] + grads, feeds, target)
    assert len(_computing(kernels, xhat)) == 2, "\n".join(map(str, kernels))
    assert not _written(kernels, xhat)


def test_a_value_a_product_also_reads_stays_written():
    """GELU's output is read by the next product: recomputing it in the gradient's kernel
    would save no write, so the forward writes it and the gradient reads it."""
    feeds, _, y, t, grads = _ffn_graph(np.float32, 12, 8, 16)
    kernels = _kernels([y] + grads, feeds)
    gelu = y.op.inputs[0]
    assert _written(kernels, gelu)
    assert len(_computing(kernels, gelu)) == 1


def test_a_broadcast_value_is_not_recomputed_along_the_loop():
    """Layer norm's rsqrt is [n, 1]; recomputed in an [n, d] loop it would be computed d
    times per row: its kernel writes it and the gradient reads it."""
    feeds, _, y, xhat, grads = _layer_norm_graph(np.float32, 12, 8)
    kernels = _kernels([y] + grads, feeds)
    rsqrt = xhat.op.inputs[1]
    assert rsqrt.op.type == "Rsqrt"
    assert len(_computing(kernels, rsqrt)) == 1 and _written(kernels, rsqrt)


@ALL_BACKENDS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, d, f", [(12, 8, 16), (1, 3, 5), (7, 5, 1)])
def test_gelu_block_and_gradients_match_numpy(dtype, n, d, f):
    feeds, arrays, y, _, grads = _ffn_graph(dtype, n, d, f)
    with gc.Session() as sess:
        got = sess.run([y] + grads, feeds)
    want = [_np_ffn(*arrays[:3])] + list(_np_ffn_grads(*arrays))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[dtype])


@ALL_BACKENDS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, d", [(12, 8), (1, 3), (5, 1)])
def test_layer_norm_block_and_gradients_match_numpy(dtype, n, d):
    feeds, arrays, y, _, grads = _layer_norm_graph(dtype, n, d)
    with gc.Session() as sess:
        got = sess.run([y] + grads, feeds)
    want = [_np_layer_norm(*arrays[:4])] + list(_np_layer_norm_grads(*arrays))
    tol = TOL[dtype] if d > 1 else dict(rtol=1e-4, atol=1e-4)  # one column: x - mean ~ 0
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **tol)


@ALL_BACKENDS
def test_gelu_block_gradients_match_finite_differences():
    shapes = [(6, 4), (4, 9), (9, 3)]
    check_gradients(lambda x, w1, w2: _ffn(x, w1, w2)[0], _arrays(np.float64, shapes))


@ALL_BACKENDS
def test_layer_norm_block_gradients_match_finite_differences():
    arrays = _arrays(np.float64, [(6, 5), (5, 5), (5,), (5,)])
    check_gradients(lambda *xs: _layer_norm(*xs)[0], arrays)
