"""The BLAS calls a gemm kernel makes (graphc/compiler/backends/cpu/gemm_team.py): how a
product is cut into units and how a batched product with strided views addresses them.

The compiled code's sgemm is swapped for a recording one that forwards each call to the
real routine (llvm.add_symbol: the JIT resolves the name when a module is loaded), so the
calls are seen as BLAS sees them and the results are still checked against NumPy.
"""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import gemm_team
from runtime import jit


@pytest.fixture
def sgemm_calls(monkeypatch):
    """[(m, n, k, lda, ldb, ldc)] of every cblas_sgemm call made by code loaded while the
    fixture is active."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")  # a cached spec is loaded all the same,
    jit.initialize()                                # but compiling fresh shows the splits
    name = jit.blas_symbol("cblas_sgemm")
    real_address = llvm.address_of_symbol(name)
    size = ctypes.c_int64 if jit.blas_int_bits() == 64 else ctypes.c_int32
    ptr, f32, enum = ctypes.c_void_p, ctypes.c_float, ctypes.c_int
    proto = ctypes.CFUNCTYPE(None, enum, enum, enum, size, size, size, f32, ptr, size, ptr,
                             size, f32, ptr, size)
    real = proto(real_address)
    calls = []

    def recording(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        calls.append((m, n, k, lda, ldb, ldc))
        real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    callback = proto(recording)
    llvm.add_symbol(name, ctypes.cast(callback, ctypes.c_void_p).value)
    try:
        yield calls
    finally:
        llvm.add_symbol(name, real_address)


def test_a_large_product_is_one_unit_per_core(sgemm_calls):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 256)).astype(np.float32)
    w = rng.standard_normal((256, 1024)).astype(np.float32)
    x = gc.placeholder(gc.float32, a.shape)
    y = gc.matmul(x, gc.constant(w))
    with gc.Session() as sess:
        got = sess.run(y, {x: a})
    np.testing.assert_allclose(got, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
    units = min(16, max(2, gemm_team.host_cores()))
    assert gemm_team.MAX_UNITS == units
    # rows (C is taller than wide): each unit packs all of B, so no more units than cores
    assert sorted(sgemm_calls) == [(2048 // units, 1024, 256, 256, 1024, 1024)] * units


@pytest.mark.parametrize("rows, inner, halves", [(96, 256, True), (72, 128, False)])
def test_a_narrow_product_worth_two_halves_is_cut_in_two(sgemm_calls, rows, inner, halves):
    """C of 256 columns is one MIN_BLOCK wide: one unit, one thread computing it, unless
    its multiply-adds reach 2 * HALF_MACS: then two halves of 128 columns. (More rows
    than small_gemm.MAX_ROWS: lstm_train's [32, 1024] . [1024, 256] runs on its tiles.)"""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((rows, inner)).astype(np.float32)
    w = rng.standard_normal((inner, 256)).astype(np.float32)
    x = gc.placeholder(gc.float32, a.shape)
    with gc.Session() as sess:
        got = sess.run(gc.matmul(x, gc.constant(w)), {x: a})
    np.testing.assert_allclose(got, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
    assert (rows * inner * 256 >= 2 * gemm_team.HALF_MACS) == halves
    cols = 128 if halves else 256
    assert sorted(sgemm_calls) == [(rows, cols, inner, inner, 256, 256)] * (256 // cols)


def test_a_batched_product_reads_and_writes_the_heads_in_place(sgemm_calls):
    """q k^T per head of [B*S, H*dh] data: each head's rows are H*dh apart (the heads split
    read at its strides), and ctx = probs v is written H*dh apart (the merge)."""
    b, s, h, dh = 2, 8, 3, 4
    rng = np.random.default_rng(1)
    qv, kv, vv = (rng.standard_normal((b * s, h * dh)).astype(np.float32) for _ in range(3))
    q, k, v = (gc.placeholder(gc.float32, qv.shape) for _ in range(3))
    heads = [gc.transpose(gc.reshape(t, [b, s, h, dh]), [0, 2, 1, 3]) for t in (q, k, v)]
    scores = gc.matmul(heads[0], heads[1], transpose_b=True)
    ctx = gc.reshape(gc.transpose(gc.matmul(scores, heads[2]), [0, 2, 1, 3]), [b * s, h * dh])
    with gc.Session() as sess:
        got = sess.run(ctx, {q: qv, k: kv, v: vv})
    qn, kn, vn = (t.astype(np.float64).reshape(b, s, h, dh).transpose(0, 2, 1, 3)
                  for t in (qv, kv, vv))
    want = (qn @ kn.transpose(0, 1, 3, 2) @ vn).transpose(0, 2, 1, 3).reshape(b * s, h * dh)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # scores = q k^T: [s, dh] x [s, dh]^T per head, both read with rows h*dh apart
    assert sgemm_calls.count((s, s, dh, h * dh, h * dh, s)) == b * h
    # ctx = scores v: [s, s] x [s, dh], v read and ctx written with rows h*dh apart
    assert sgemm_calls.count((s, dh, s, s, h * dh, h * dh)) == b * h
    assert len(sgemm_calls) == 2 * b * h
