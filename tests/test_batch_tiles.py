"""Batch entries of small static products on register tiles
(graphc/compiler/backends/cpu/batch_tiles.py).

Values against NumPy in float32 and float64 across the shapes the tiles cut differently
(no rows, rows left after whole tiles, 6 x 4 tiles for N a multiple of 4 vectors and 8 x 3
ones else, single vectors and scalar tails; an empty inner dimension, an empty batch),
A transposed or not, dense and broadcast batches and the strided views of attention's
heads; the same bits on any number of threads; attention's gradients through the tiles
against central differences. entry_function is wrapped to see which products took the
tiles; compiled specs are not cached, so every product is generated here.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import batch_tiles
from tests.gradcheck import check_gradients
from tests.test_small_gemm import _assert_product


@pytest.fixture
def tiled(monkeypatch):
    """[(m, n, k, adj_x)] of each product generated on the tiles."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    emitted = []
    entry_function = batch_tiles.entry_function

    def recording(module, node, strides=None):
        m, n = node.outputs[0].dims[-2:]
        emitted.append((m, n, node.inputs[1].dims[-2], node.attrs["adj_x"]))
        return entry_function(module, node, strides)
    monkeypatch.setattr(batch_tiles, "entry_function", recording)
    return emitted


def _run(fetch_fn, arrays, threads=None):
    config = None if threads is None else gc.ConfigProto(intra_op_parallelism_threads=threads)
    g = gc.Graph()
    with g.as_default():
        phs = [gc.placeholder(a.dtype, a.shape) for a in arrays]
        with gc.Session(graph=g, config=config) as sess:
            return sess.run(fetch_fn(*phs), dict(zip(phs, arrays)))


def _batched(batch_a, batch_b, m, k, n, adj_x, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch_a + ((k, m) if adj_x else (m, k))).astype(dtype)
    return a, rng.standard_normal(batch_b + (k, n)).astype(dtype)


def _assert_batched(got, a, b, adj_x):
    """Each entry of got within _assert_product's rounding bound (NumPy broadcasting)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    assert got.shape[:-2] == batch
    for index in np.ndindex(*batch):
        _assert_product(got[index], a[index], b[index], transpose_a=adj_x)


# (m, k, n): no rows; one row and a scalar tail; rows left after 8-row tiles with a single
# vector and a scalar tail; attention's 128 x 128 . 128 x 64 (6 x 4 tiles, 2 rows left);
# 1023 columns; odd sizes; no inner dimension. float64's vectors are 8 wide: 49 has a
# scalar tail after two 24-column panels, 64 takes 6 x 4 tiles in both precisions.
SHAPES = [(0, 5, 48), (1, 37, 49), (13, 7, 64), (128, 128, 64), (7, 33, 1023),
          (9, 0, 48), (31, 65, 100)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_products_match_numpy(tiled, m, k, n, adj_x, dtype):
    a, b = _batched((2, 3), (2, 3), m, k, n, adj_x, dtype, seed=m * 31 + k + n)
    got = _run(lambda x, y: gc.matmul(x, y, adjoint_a=adj_x), [a, b])
    assert got.dtype == dtype and got.shape == (2, 3, m, n)
    _assert_batched(got, a, b, adj_x)
    assert tiled == [(m, n, k, adj_x)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcast_and_empty_batches(tiled, dtype):
    a, b = _batched((4, 1), (3,), 10, 6, 50, False, dtype, seed=1)
    got = _run(lambda x, y: gc.matmul(x, y), [a, b])
    _assert_batched(got, a, b, False)
    a, b = _batched((0,), (0,), 10, 6, 50, True, dtype, seed=2)
    got = _run(lambda x, y: gc.matmul(x, y, adjoint_a=True), [a, b])
    assert got.shape == (0, 10, 50)
    assert tiled == [(10, 50, 6, False), (10, 50, 6, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_views_match_numpy(tiled, dtype):
    """probs . V read from the [B, S, H, dh] layout and written merged (the heads' split
    and merge as strides), and probs^T . V (A transposed, dense result)."""
    bsz, s, h, dh = 2, 9, 3, 64
    rng = np.random.default_rng(3)
    x = rng.standard_normal((bsz * s, h * dh)).astype(dtype)
    p = rng.standard_normal((bsz, h, s, s)).astype(dtype)

    def graph(px, pp):
        v = gc.transpose(gc.reshape(px, [bsz, s, h, dh]), [0, 2, 1, 3])
        ctx = gc.reshape(gc.transpose(gc.matmul(pp, v), [0, 2, 1, 3]), [bsz * s, h * dh])
        return [ctx, gc.matmul(pp, v, adjoint_a=True)]
    ctx, dv = _run(graph, [x, p])
    v = x.reshape(bsz, s, h, dh).transpose(0, 2, 1, 3)
    merged = ctx.reshape(bsz, s, h, dh).transpose(0, 2, 1, 3)
    _assert_batched(merged, p, v, False)
    _assert_batched(dv, p, v, True)
    assert sorted(tiled) == [(s, dh, s, False), (s, dh, s, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_thread_count_changes_no_bit(tiled, dtype):
    """Units of batch entries: each element is the same chain of multiply-adds on 1, 2 or
    3 threads."""
    a, b = _batched((3, 8), (3, 8), 128, 64, 100, True, dtype, seed=4)
    one, two, three = (_run(lambda x, y: gc.matmul(x, y, adjoint_a=True), [a, b], threads=t)
                       for t in (1, 2, 3))
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, three)
    _assert_batched(one, a, b, True)
    assert len(tiled) == 3


@pytest.mark.parametrize("m,k,n,adj_y", [
    (16, 8, 47, False),     # narrower than a panel of 3 float32 vectors
    (8, 40, 64, True),      # B transposed: its columns are not contiguous
    (512, 256, 64, False),  # an entry above MAX_ENTRY_MACS
])
def test_other_products_stay_on_blas_and_are_right(tiled, m, k, n, adj_y):
    a, b = _batched((2,), (2,), m, k, n, False, np.float32, seed=5)
    if adj_y:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    got = _run(lambda x, y: gc.matmul(x, y, adjoint_b=adj_y), [a, b])
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    _assert_batched(got, a, b, False)
    assert tiled == []


def test_attention_gradients_through_the_tiles_match_finite_differences(tiled):
    """Self-attention with 24-wide float64 heads: probs . V forward, dS . K, dS^T . Q and
    probs^T . dCtx backward run on the tiles."""
    bsz, s, h, dh = 1, 5, 2, 24
    d = h * dh
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((bsz * s, d))] + \
        [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(3)]

    def attention(x, wq, wk, wv):
        q, k, v = (gc.transpose(gc.reshape(gc.matmul(x, w), [bsz, s, h, dh]), [0, 2, 1, 3])
                   for w in (wq, wk, wv))
        probs = gc.nn.softmax(gc.matmul(q, k, transpose_b=True))
        return gc.reshape(gc.transpose(gc.matmul(probs, v), [0, 2, 1, 3]), [bsz * s, d])
    check_gradients(attention, inputs, rtol=1e-6, atol=1e-8)
    assert sorted(set(tiled)) == [(s, dh, s, False), (s, dh, s, True)]
    assert len(tiled) >= 4


def test_a_batch_matmul_of_matrices_stays_on_blas(tiled):
    """Operands of unknown rank make a BatchMatMulV2; fed matrices, it has no batch
    entries to give the tiles."""
    a, b = _batched((), (), 16, 8, 64, False, np.float32, seed=7)

    def product(x, y):
        return gc.matmul(gc.placeholder_with_default(x, None), gc.placeholder_with_default(y, None))
    got = _run(product, [a, b])
    assert got.shape == (16, 64)
    _assert_product(got, a, b)
    assert tiled == []
