"""The BLAS calls a gemm kernel makes (graphc/compiler/backends/cpu/gemm_team.py): how a
product is cut into units and how a batched product with strided views addresses them.

The compiled code's sgemm is swapped for a recording one that forwards each call to the
real routine (llvm.add_symbol: the JIT resolves the name when a module is loaded), so the
calls are seen as BLAS sees them and the results are still checked against NumPy.
"""
import ctypes

import llvmlite.binding as llvm
from llvmlite import ir
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


# ---------------------------------------------------------------- the unit rule
def unit_plans(monkeypatch, mode, max_units):
    """plan(extent, macs) -> (units, block) as gemm_team._units emits them for `mode` on a
    compiling machine of `max_units` cores (the IR itself, compiled and called)."""
    monkeypatch.setattr(gemm_team, "MAX_UNITS", max_units)
    i64 = ir.IntType(64)
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(i64, [i64, i64, ir.PointerType()]), "plan")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    units, block = gemm_team._units(b, fn.args[0], fn.args[1], mode)
    b.store(block, fn.args[2])
    b.ret(units)
    compiled = jit.CompiledModule(str(module))
    call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_void_p)(compiled.address("plan"))

    def plan(extent, macs):
        block_out = ctypes.c_int64(-1)
        got = call(extent, macs, ctypes.addressof(block_out))
        plan.keep = compiled
        return got, block_out.value
    return plan


@pytest.mark.parametrize("mode, cores, extent, m, n, k, units, block", [
    # compile_scale's [64, 256] . [256, 256] layers: 4.2M multiply-adds, two column halves
    # on two cores whichever product of the step (its C is 64 x 256 or 256 x 256)
    ("cols", 2, 256, 64, 256, 256, 2, 128),
    ("cols", 4, 256, 64, 256, 256, 4, 64),
    # transformer_train's [2048, 256] . [256, 1024]: one unit per core, 16 on 16 cores
    ("rows", 2, 2048, 2048, 1024, 256, 2, 1024),
    ("rows", 16, 2048, 2048, 1024, 256, 16, 128),
    # a 1000-wide C: the first block ends at a cache line of every row (512, not 500)
    ("cols", 2, 1000, 256, 1000, 2048, 2, 512),
    ("cols", 4, 1000, 256, 1000, 2048, 4, 256),
    # 2.1M multiply-adds: two units of 1M; 1M: one call, no team
    ("cols", 2, 256, 16, 256, 512, 2, 128),
    ("cols", 8, 512, 4, 512, 512, 1, 512),
    # narrower than 2 * MIN_BLOCK: one unit however much work; at 2 * MIN_BLOCK: two
    ("cols", 16, 40, 40, 40, 4096, 1, 48),
    ("cols", 16, 64, 64, 64, 4096, 2, 32),
    # more work than units: the cores bound it, and the units cover the extent
    ("rows", 2, 1023, 1023, 1023, 1023, 2, 512),
    ("rows", 3, 1023, 1023, 1023, 1023, 3, 352),
    # a batch is cut by entries, not aligned
    ("batch", 2, 7, 128, 128, 128 * 7, 2, 4),
    ("batch", 16, 3, 128, 128, 128 * 3, 3, 1),
    ("batch", 2, 1, 512, 512, 512, 1, 1),
    # empty: no unit (k = 0 with rows: one unit, whose call zeroes C)
    ("rows", 2, 0, 0, 64, 64, 0, 1),
    ("rows", 2, 64, 64, 64, 0, 1, 64),
])
def test_the_units_of_a_product_follow_its_work(monkeypatch, mode, cores, extent, m, n, k,
                                                units, block):
    plan = unit_plans(monkeypatch, mode, cores)
    assert plan(extent, m * n * k) == (units, block)


@pytest.mark.parametrize("mode", ["rows", "cols", "batch"])
@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_units_cover_the_extent_within_the_bounds(monkeypatch, mode, cores):
    """Every row/column/entry is in exactly one unit; units <= cores; a product cut in
    units has UNIT_MACS of work per unit; blocks of rows or columns are MIN_BLOCK wide at
    least and start at multiples of ALIGN."""
    plan = unit_plans(monkeypatch, mode, cores)
    rng = np.random.default_rng(7)
    cases = [(e, w) for e in (0, 1, 7, 31, 32, 33, 64, 255, 256, 1000, 1023, 2048)
             for w in (0, 1, 7, 1023)] + \
        [(int(e), int(e) * int(w)) for e, w in zip(rng.integers(1, 5000, 60),
                                                     rng.integers(1, 1 << 16, 60))]
    for extent, per_entry in cases:
        macs = extent * per_entry
        units, block = plan(extent, macs)
        assert block >= 1 and units * block >= extent and (units - 1) * block < extent
        assert units <= max(cores, 1) and (units == 0) == (extent == 0)
        if units > 1:
            assert units <= macs // gemm_team.UNIT_MACS
            if mode != "batch":
                assert block % gemm_team.ALIGN == 0 and block >= gemm_team.MIN_BLOCK


@pytest.mark.parametrize("a_shape, w_shape, transpose_a, transpose_b, calls", [
    # h . W: 64 rows of an untransposed B run on small_gemm's tiles (test_small_gemm.py)
    ((64, 256), (256, 256), False, False, []),
    ((64, 256), (256, 256), False, True, [(64, 128, 256, 256, 256, 256)] * 2),   # dZ . W^T
    ((64, 256), (64, 256), True, False, [(256, 128, 64, 256, 256, 256)] * 2),    # h^T . dZ
])
def test_the_deep_mlps_products_are_cut_in_two_on_two_cores(
        sgemm_calls, monkeypatch, a_shape, w_shape, transpose_a, transpose_b, calls):
    """compile_scale_64's layer products (4.2M multiply-adds each) run as two column
    halves, one per core, forward and backward."""
    monkeypatch.setattr(gemm_team, "MAX_UNITS", 2)
    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    x = gc.placeholder(gc.float32, a.shape)
    y = gc.matmul(x, gc.constant(w), transpose_a=transpose_a, transpose_b=transpose_b)
    with gc.Session() as sess:
        got = sess.run(y, {x: a})
    want = (a.T if transpose_a else a).astype(np.float64) @ (w.T if transpose_b else w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert sgemm_calls == calls


def test_column_units_start_at_cache_lines(sgemm_calls, monkeypatch):
    """[8, 2048] . [1000, 2048]^T: two units of 512 and 488 columns, not of 500. (B
    transposed keeps it on BLAS: 8 rows of an untransposed B run on small_gemm's tiles.)"""
    monkeypatch.setattr(gemm_team, "MAX_UNITS", 2)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 2048)).astype(np.float32)
    w = rng.standard_normal((1000, 2048)).astype(np.float32)
    x = gc.placeholder(gc.float32, a.shape)
    with gc.Session() as sess:
        got = sess.run(gc.matmul(x, gc.constant(w), transpose_b=True), {x: a})
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)
    assert sorted(sgemm_calls) == [(8, 488, 2048, 2048, 2048, 1000),
                                   (8, 512, 2048, 2048, 2048, 1000)]


# ------------------------------------------------------- results, split or not
def _product_results(dtype, m, k, n, transpose_a, transpose_b, bias, threads):
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    c = rng.standard_normal(n).astype(dtype)
    x = gc.placeholder(dtype, a.shape)
    y = gc.matmul(x, gc.constant(w), transpose_a=transpose_a, transpose_b=transpose_b)
    if bias:
        y = y + gc.constant(c)
    config = gc.ConfigProto(intra_op_parallelism_threads=threads)
    with gc.Session(config=config) as sess:
        got = sess.run(y, {x: a})
    want = (a.T if transpose_a else a).astype(np.float64) @ \
        (w.T if transpose_b else w).astype(np.float64)
    return got, want + c if bias else want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [
    (0, 5, 7), (7, 0, 9), (1, 1, 1), (7, 1023, 7), (1, 1023, 1023), (1023, 1023, 1),
    (33, 1023, 1023), (1023, 7, 1023), (64, 4096, 40), (1023, 1023, 1023)])
@pytest.mark.parametrize("transpose_a, transpose_b, bias", [
    (False, False, True), (False, True, False), (True, False, False), (True, True, True)])
def test_products_match_numpy_and_one_thread_bit_for_bit(dtype, m, k, n, transpose_a,
                                                         transpose_b, bias):
    """Products cut in units or not (odd and empty sizes) equal NumPy's, and 2 threads
    give the bits of 1."""
    one, want = _product_results(dtype, m, k, n, transpose_a, transpose_b, bias, 1)
    two, _ = _product_results(dtype, m, k, n, transpose_a, transpose_b, bias, 2)
    assert one.shape == two.shape == (m, n) and one.dtype == two.dtype == dtype
    tol = (1e-5 if dtype == np.float32 else 1e-13) * max(k, 1)
    np.testing.assert_allclose(one, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch, m, k, n", [(0, 7, 5, 3), (1, 1, 1, 1), (7, 33, 1023, 65),
                                            (3, 1023, 7, 33)])
def test_batched_products_match_numpy_and_one_thread_bit_for_bit(dtype, batch, m, k, n):
    rng = np.random.default_rng(batch + m + k + n)
    a = rng.standard_normal((batch, m, k)).astype(dtype)
    w = rng.standard_normal((batch, k, n)).astype(dtype)
    results = []
    for threads in (1, 2):
        x = gc.placeholder(dtype, a.shape)
        config = gc.ConfigProto(intra_op_parallelism_threads=threads)
        with gc.Session(config=config) as sess:
            results.append(sess.run(gc.matmul(x, gc.constant(w)), {x: a}))
    tol = (1e-5 if dtype == np.float32 else 1e-13) * max(k, 1)
    np.testing.assert_allclose(results[0], a.astype(np.float64) @ w, rtol=tol, atol=tol)
    np.testing.assert_array_equal(results[0], results[1])


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
