"""Batched products reading and writing transposed views (fusion step 2b): attention's heads
split ([B*S, D] -> [B, S, H, dh] -> [B, H, S, dh]) and merge are no copy kernels on the CPU;
the products address the views through offsets and leading dimensions.

Values are checked against NumPy references written here (float32 and float64, odd sizes,
one-entry batches) on every backend, gradients against central finite differences; the
structure (which kernels hold the transposes) on the CPU target and, unchanged, the GPU's.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.driver import compile_options, schedule_module
from tests.gradcheck import check_gradients

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}
GPU_TARGET = {"kind": "gpu", "arch": "sm_80", "ptx": False}


def _heads(t, b, s, h, dh):
    return gc.transpose(gc.reshape(t, [b, s, h, dh]), [0, 2, 1, 3])


def _attention(x, wq, wk, wv, b, s, h, dh):
    """BERT's self-attention core: heads split, softmax(q k^T) v, heads merged."""
    q, k, v = (_heads(gc.matmul(x, w), b, s, h, dh) for w in (wq, wk, wv))
    probs = gc.nn.softmax(gc.matmul(q, k, transpose_b=True))
    return gc.reshape(gc.transpose(gc.matmul(probs, v), [0, 2, 1, 3]), [b * s, h * dh])


def _np_attention(x, wq, wk, wv, b, s, h, dh):
    q, k, v = ((x @ w).reshape(b, s, h, dh).transpose(0, 2, 1, 3) for w in (wq, wk, wv))
    scores = q @ k.transpose(0, 1, 3, 2)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    ctx = (e / e.sum(-1, keepdims=True)) @ v
    return ctx.transpose(0, 2, 1, 3).reshape(b * s, h * dh)


def _inputs(dtype, b, s, h, dh, seed=0):
    rng = np.random.default_rng(seed)
    d = h * dh
    return [rng.standard_normal((b * s, d)).astype(dtype)] + \
        [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(dtype) for _ in range(3)]


def _kernels(fetches, feeds, target=None):
    module = lower(list(feeds), list(fetches), [], [np.shape(a) for a in feeds.values()])
    schedule_module(module, target=target, options=compile_options())
    return module.kernels


def _attention_graph(dtype, sizes):
    arrays = _inputs(dtype, *sizes)
    phs = [gc.placeholder(gc.as_dtype(dtype), a.shape) for a in arrays]
    out = _attention(*phs, *sizes)
    grads = gc.gradients(gc.reduce_sum(out * out), phs)
    return phs, arrays, out, grads


def test_heads_split_and_merge_are_read_and_written_by_the_products():
    phs, arrays, out, grads = _attention_graph(np.float32, (2, 5, 3, 4))
    kernels = _kernels([out] + grads, dict(zip(phs, arrays)))
    copies = [k for k in kernels if k.kind != "gemm" and any(n.type == "Transpose"
                                                               for n in k.nodes)]
    assert copies == [], [k.name for k in copies]
    products = [k for k in kernels if k.main is not None and k.main.type == "BatchMatMulV2"]
    # two views each: q k^T (q, k), probs v (v, the merge); backward: d(probs) = g v^T
    # (g: the incoming gradient split, v), dv = probs^T g (g, merged), dq = d(scores) k
    # (k, merged), dk = d(scores)^T q (q, merged)
    assert len(products) == 6
    assert sum(n.type == "Transpose" for k in products for n in k.nodes) == 12
    assert all(k.kind == "gemm" for k in kernels if any(n.type == "Transpose" for n in k.nodes))


def test_gpu_target_keeps_its_transpose_kernels():
    phs, arrays, out, grads = _attention_graph(np.float32, (2, 5, 3, 4))
    kernels = _kernels([out] + grads, dict(zip(phs, arrays)), target=GPU_TARGET)
    assert not any(n.type == "Transpose" for k in kernels if k.kind == "gemm" for n in k.nodes)
    assert sum(any(n.type == "Transpose" for n in k.nodes) for k in kernels) == 8


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", [(2, 5, 3, 4), (1, 7, 1, 3), (3, 1, 2, 5), (2, 6, 4, 1)])
def test_attention_matches_numpy(dtype, sizes):
    phs, arrays, out, grads = _attention_graph(dtype, sizes)
    with gc.Session() as sess:
        got = sess.run(out, dict(zip(phs, arrays)))
    want = _np_attention(*[a.astype(np.float64) for a in arrays], *sizes)
    np.testing.assert_allclose(got, want, **TOL[dtype])


@pytest.mark.parametrize("sizes", [(2, 3, 2, 2), (1, 4, 1, 3)])
def test_attention_gradients_match_finite_differences(sizes):
    check_gradients(lambda *xs: _attention(*xs, *sizes), _inputs(np.float64, *sizes),
                    rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True),
                                         (True, True)])
def test_transposed_operands_with_adjoint_flags_match_numpy(dtype, adj_x, adj_y):
    """[S, B, r, c] -> [B, S, r, c] operands (batch axes swapped) under every adjoint flag,
    the result swapped back: views whose batch strides are not in order."""
    rng = np.random.default_rng(1)
    s, b, m, k, n = 3, 2, 5, 4, 3
    a = rng.standard_normal((s, b) + ((k, m) if adj_x else (m, k))).astype(dtype)
    c = rng.standard_normal((s, b) + ((n, k) if adj_y else (k, n))).astype(dtype)
    pa, pc = gc.placeholder(dtype, a.shape), gc.placeholder(dtype, c.shape)
    prod = gc.matmul(gc.transpose(pa, [1, 0, 2, 3]), gc.transpose(pc, [1, 0, 2, 3]),
                     adjoint_a=adj_x, adjoint_b=adj_y)
    out = gc.transpose(prod, [1, 0, 2, 3])
    feeds = {pa: a, pc: c}
    kernels = _kernels([out], feeds)
    assert len(kernels) == 1 and kernels[0].kind == "gemm"
    with gc.Session() as sess:
        got = sess.run(out, feeds)
    a64, c64 = a.astype(np.float64), c.astype(np.float64)
    opa = np.swapaxes(a64, -1, -2) if adj_x else a64
    opc = np.swapaxes(c64, -1, -2) if adj_y else c64
    np.testing.assert_allclose(got, opa @ opc, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcast_batch_operand_view_matches_numpy(dtype):
    """A view operand against a rank-3 operand broadcast over the leading batch axis."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 2, 3, 5)).astype(dtype)   # -> [2, 4, 3, 5]
    c = rng.standard_normal((4, 5, 6)).astype(dtype)      # broadcast over the 2
    pa, pc = gc.placeholder(dtype, a.shape), gc.placeholder(dtype, c.shape)
    out = gc.matmul(gc.transpose(pa, [1, 0, 2, 3]), pc)
    with gc.Session() as sess:
        got = sess.run(out, {pa: a, pc: c})
    np.testing.assert_allclose(got, np.transpose(a, [1, 0, 2, 3]).astype(np.float64) @ c,
                               **TOL[dtype])


def test_a_transpose_also_read_by_a_loop_or_fetched_stays_a_copy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    c = rng.standard_normal((3, 2, 5, 4)).astype(np.float32)
    pa, pc = gc.placeholder(gc.float32, a.shape), gc.placeholder(gc.float32, c.shape)
    ta = gc.transpose(pa, [1, 0, 2, 3])
    prod = gc.matmul(ta, pc)
    total = gc.reduce_sum(ta)                   # a loop reads the transposed value too
    merged = gc.transpose(prod, [1, 0, 2, 3])   # fetched with the product itself
    feeds = {pa: a, pc: c}
    kernels = _kernels([prod, total, merged], feeds)
    gemm = next(k for k in kernels if k.kind == "gemm")
    assert [n.type for n in gemm.nodes] == ["BatchMatMulV2"]
    with gc.Session() as sess:
        got = sess.run([prod, total, merged], feeds)
    want = np.transpose(a, [1, 0, 2, 3]).astype(np.float64) @ c
    np.testing.assert_allclose(got[0], want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got[1], a.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(got[2], np.transpose(want, [1, 0, 2, 3]), rtol=2e-5,
                               atol=2e-5)


def test_a_transpose_moving_the_last_axis_is_no_view():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    c = rng.standard_normal((2, 5, 4)).astype(np.float32)
    pa, pc = gc.placeholder(gc.float32, a.shape), gc.placeholder(gc.float32, c.shape)
    out = gc.matmul(gc.transpose(pa, [0, 2, 1]), pc)
    kernels = _kernels([out], {pa: a, pc: c})
    assert [n.type for k in kernels if k.kind == "gemm" for n in k.nodes] == ["BatchMatMulV2"]
    with gc.Session() as sess:
        got = sess.run(out, {pa: a, pc: c})
    np.testing.assert_allclose(got, np.transpose(a, [0, 2, 1]).astype(np.float64) @ c,
                               rtol=2e-5, atol=2e-5)


def test_integer_products_keep_their_transposes():
    """No BLAS for integers: their products are loop kernels, the transposes stay copies."""
    a = (np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5) % 7).astype(np.int32)
    c = (np.arange(3 * 2 * 5 * 4).reshape(3, 2, 5, 4) % 5).astype(np.int32)
    pa, pc = gc.placeholder(gc.int32, a.shape), gc.placeholder(gc.int32, c.shape)
    out = gc.transpose(gc.matmul(gc.transpose(pa, [1, 0, 2, 3]), pc), [1, 0, 2, 3])
    kernels = _kernels([out], {pa: a, pc: c})
    assert [n.type for k in kernels if k.kind == "gemm" for n in k.nodes] == ["BatchMatMulV2"]
    with gc.Session() as sess:
        got = sess.run(out, {pa: a, pc: c})
    np.testing.assert_array_equal(
        got, np.transpose(np.transpose(a, [1, 0, 2, 3]) @ c, [1, 0, 2, 3]))


def test_a_view_of_a_variable_reads_it_before_its_update():
    """The product reads the variable's buffer through the view when its kernel runs: an
    update ordered after the product (a control dependency) must not show through."""
    rng = np.random.default_rng(5)
    init = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)
    c = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    var = gc.Variable(init)
    pc = gc.placeholder(gc.float32, c.shape)
    out = gc.matmul(gc.transpose(var, [1, 0, 2, 3]), pc)
    with gc.control_dependencies([out]):
        step = gc.assign_add(var, gc.ones_like(var))
    with gc.Session() as sess:
        sess.run(var.initializer)
        got, _ = sess.run([out, step], {pc: c})
        after = sess.run(out, {pc: c})
    want = np.transpose(init, [1, 0, 2, 3]).astype(np.float64) @ c
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(after, np.transpose(init + 1, [1, 0, 2, 3]).astype(np.float64)
                               @ c, rtol=2e-5, atol=2e-5)
