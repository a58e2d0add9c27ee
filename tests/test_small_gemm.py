"""Products of few rows on our own register tiles (graphc/compiler/backends/cpu/small_gemm.py).

Values against NumPy in float32 and float64 across the shapes the tiles cut differently
(no rows, a partial row tile, full ones; columns in panels, single vectors and scalar
tails; an empty inner dimension), the same bits on any number of threads, and static_rnn's
recurrent products, forward and backward, running on them with gradients that match
central differences. emit_product is wrapped to see which products took the tiles;
compiled specs are not cached, so every product is generated here.
"""
import ctypes
import re

import numpy as np
import pytest
from llvmlite import ir

import graphc as gc
from graphc.compiler.backends.cpu import small_gemm
from graphc.compiler.driver import compile_module
from graphc.compiler.lower import lower
from graphc.ops import rnn_cell
from runtime import jit
from tests.gradcheck import check_gradients



@pytest.fixture
def tiled(monkeypatch):
    """[(m, n, k, transpose_a, has_bias)] of each product generated on the tiles."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    emitted = []
    emit = small_gemm.emit_product

    def recording(b, node, a_ptr, b_ptr, c_ptr, bias_ptr, m):
        tiling = small_gemm._tiling(node, bias_ptr is not None)
        emitted.append((tiling.m, tiling.n, tiling.k, node.attrs["transpose_a"],
                        bias_ptr is not None))
        emit(b, node, a_ptr, b_ptr, c_ptr, bias_ptr, m)
    monkeypatch.setattr(small_gemm, "emit_product", recording)
    return emitted


def _operands(m, k, n, transpose_a, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    return a, rng.standard_normal((k, n)).astype(dtype)


def _product(a, b, transpose_a=False, transpose_b=False, bias=None, threads=None):
    config = None if threads is None else gc.ConfigProto(intra_op_parallelism_threads=threads)
    g = gc.Graph()
    with g.as_default():
        x, w = gc.placeholder(a.dtype, a.shape), gc.placeholder(b.dtype, b.shape)
        y = gc.matmul(x, w, transpose_a=transpose_a, transpose_b=transpose_b)
        if bias is not None:
            y = gc.nn.bias_add(y, gc.constant(bias))
        with gc.Session(graph=g, config=config) as sess:
            return sess.run(y, {x: a, w: b})


def _assert_product(got, a, b, transpose_a=False, transpose_b=False, bias=None):
    """got == op(A) . op(B) (+ bias) within the rounding bound of a K-term dot product in
    got's precision, |error| <= gamma_(K+1) * (|op(A)| . |op(B)| + |bias|) (Higham 3.5),
    against the float64 product of the same (rounded) inputs."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    a, b = (a.T if transpose_a else a), (b.T if transpose_b else b)
    want, scale = a @ b, np.abs(a) @ np.abs(b)
    if bias is not None:
        want, scale = want + bias, scale + np.abs(bias)
    u = np.finfo(got.dtype).eps / 2
    terms = a.shape[1] + 1
    bound = terms * u / (1 - terms * u) * scale + np.finfo(got.dtype).tiny
    assert got.shape == want.shape
    excess = np.abs(got - want) - bound
    assert (excess <= 0).all(), f"{(excess > 0).sum()} elements off, worst at " \
        f"{np.unravel_index(np.argmax(excess), excess.shape)}"


# (m, k, n): no rows; one row; a partial tile of rows; full tiles; MAX_ROWS; odd inner
# dims; no inner dim. Columns (panels of 3 vectors: 48 float32, 24 float64): panels only
# (48), + scalar tails (49, 1023), + single vectors (1024, 256; float64's 1023)
SHAPES = [(0, 5, 48), (1, 1023, 49), (7, 37, 1023), (32, 256, 1024), (32, 1024, 256),
          (64, 33, 1023), (9, 0, 48)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_products_match_numpy(tiled, m, k, n, transpose_a, dtype):
    a, b = _operands(m, k, n, transpose_a, dtype, seed=m * 31 + k + n)
    got = _product(a, b, transpose_a=transpose_a)
    assert got.dtype == dtype and got.shape == (m, n)
    _assert_product(got, a, b, transpose_a)
    assert tiled == [(m, n, k, transpose_a, False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_is_added_after_the_product(tiled, dtype):
    """MatMul + BiasAdd: the gemm kernel hands the bias to the tiles (no pass over C)."""
    a, b = _operands(5, 19, 70, False, dtype, seed=3)
    bias = np.random.default_rng(4).standard_normal(70).astype(dtype)
    got = _product(a, b, bias=bias)
    _assert_product(got, a, b, bias=bias)
    assert tiled == [(5, 70, 19, False, True)]


@pytest.mark.parametrize("m,k,n,transpose_b", [
    (65, 8, 40, False),   # more rows than MAX_ROWS
    (8, 40, 7, False),    # narrower than a panel: scalar columns only
    (8, 40, 64, True),    # B transposed: its columns are not contiguous
])
def test_other_products_stay_on_blas_and_are_right(tiled, m, k, n, transpose_b):
    a, b = _operands(m, k, n, False, np.float32, seed=5)
    if transpose_b:
        b = np.ascontiguousarray(b.T)
    got = _product(a, b, transpose_b=transpose_b)
    _assert_product(got, a, b, transpose_b=transpose_b)
    assert tiled == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_thread_count_changes_no_bit(tiled, dtype):
    """Units of columns, the last one with the single-vector and scalar tails: each
    element is the same chain of multiply-adds on 1, 2 or 3 threads."""
    a, b = _operands(32, 256, 1023, False, dtype, seed=6)
    one, two, three = (_product(a, b, threads=t) for t in (1, 2, 3))
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, three)
    _assert_product(one, a, b)
    assert len(tiled) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [False, True])
def test_rows_known_at_run_time(tiled, dtype, with_bias):
    """A [None, K] operand (the batch of most TF1 scripts): one compile serves every
    number of rows, full tiles then a partial one, and the same rows give the same bits
    as when M is static; beyond MAX_ROWS the tiles are slower than BLAS, never wrong."""
    k, n = 37, 70
    rng = np.random.default_rng(8)
    w = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(dtype, [None, k])
        y = gc.matmul(x, gc.constant(w))
        if with_bias:
            y = gc.nn.bias_add(y, gc.constant(bias))
        with gc.Session(graph=g) as sess:
            for m in (32, 0, 1, 7, 8, 9, 63, 64, 100):
                a = rng.standard_normal((m, k)).astype(dtype)
                got = sess.run(y, {x: a})
                _assert_product(got, a, w, bias=bias if with_bias else None)
                if m == 9:
                    np.testing.assert_array_equal(
                        got, _product(a, w, bias=bias if with_bias else None))
    run_time = [t for t in tiled if not isinstance(t[0], int)]
    assert len(run_time) == 1 and run_time[0][1:] == (n, k, False, with_bias)


def _compiled_tile(tiling, vectors, lanes, partial):
    """fn(a, b, c, bias, valid) calling tile_function's tile of tiling.rows rows (compiled
    and called, as the kernels call it)."""
    module = ir.Module()
    tile = small_gemm.tile_function(module, tiling, tiling.rows, vectors, lanes, partial)
    i64, ptr = ir.IntType(64), ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 4 + [i64]), "tile")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(tile, list(fn.args[:4 + partial]))
    b.ret_void()
    compiled = jit.CompiledModule(str(module))
    call = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4, ctypes.c_int64)(
        compiled.address("tile"))
    call.keep = compiled
    return call


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("vectors,scalar", [(small_gemm.COLS, False), (1, True)])
@pytest.mark.parametrize("valid", [None, 1, 5])
def test_one_tile_takes_any_strides_bias_and_rows(monkeypatch, dtype, transpose_a, vectors,
                                                  scalar, valid):
    """The tile's facts are Tiling's parameters, which small_gemm's MatMuls (rows N apart,
    a bias, the prefetch, run-time rows) and batch_tiles.py's entries (their views'
    strides) set differently; here all at once: A's rows or columns, B's and C's rows
    apart from the tile's width, a bias, full and partial row tiles. Values against
    NumPy; C's elements outside the tile and its valid rows keep their values."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    rows, k = small_gemm.ROWS, 11   # 11: two trips of the unrolled k loop and 3 steps
    lanes = 1 if scalar else small_gemm.VECTOR_BYTES // np.dtype(dtype).itemsize
    width = vectors * lanes
    rng = np.random.default_rng(vectors + 2 * transpose_a)
    stored_a = rng.standard_normal((k, rows + 3) if transpose_a else (rows, k + 2))
    stored_b = rng.standard_normal((k, width + 5))
    c = np.full((rows, width + 3), 7.0)
    stored_a, stored_b, c, bias = (x.astype(dtype) for x in (
        stored_a, stored_b, c, rng.standard_normal(width)))
    lda = stored_a.shape[1]
    tiling = small_gemm.Tiling("graphc.test", np.dtype(dtype).name, rows, width, k,
                               a_steps=(1, lda) if transpose_a else (lda, 1),
                               ldb=stored_b.shape[1], ldc=c.shape[1], has_bias=True,
                               prefetch=True)
    tile = _compiled_tile(tiling, vectors, lanes, valid is not None)
    tile(*(x.ctypes.data for x in (stored_a, stored_b, c, bias)), valid or 0)
    done = valid or rows
    op_a = stored_a[:, :done].T if transpose_a else stored_a[:done, :k]
    _assert_product(c[:done, :width], op_a, stored_b[:, :width], bias=bias)
    untouched = np.full(c.shape, True)
    untouched[:done, :width] = False
    assert (c[untouched] == 7.0).all()


def _lstm_step_ir(batch, steps, width, hidden, static_batch=True):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [batch if static_batch else None, steps, width],
                           name="x")
        cell = rnn_cell.BasicLSTMCell(hidden)
        outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)
        loss = gc.reduce_sum(gc.square(gc.stack(outputs, axis=1)))
        grads = gc.gradients(loss, gc.trainable_variables())
        module = lower([x], grads, [], [(batch, steps, width)])
        return module, compile_module(module).spec["llvm_ir"]


@pytest.mark.parametrize("static_batch", [True, False])
def test_lstm_recurrent_products_run_on_the_tiles(monkeypatch, static_batch):
    """lstm_train's cell (batch 32, input 128, hidden 256) over 9 steps: the forward
    h_t . W_h and the backward dG_t . W_h^T are tile products, and W_h^T is made once
    per run (one Transpose for the 8 steps' products: shared_transposes), the tiles'
    layout of B. With a batch of None too (its rows known at run time)."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    steps = 9
    module, ir_text = _lstm_step_ir(32, steps, 128, 256, static_batch)
    columns = set(re.findall(r'define [^@]*@"?graphc\.small_gemm\.([\w.]+)\.columns', ir_text))
    m = "m32" if static_batch else "m_run"
    assert f"float32.{m}.n1024.k256.a256_1" in columns    # forward
    assert f"float32.{m}.n256.k1024.a1024_1" in columns   # backward
    products = [n for n in module.nodes
                if n.type == "MatMul" and getattr(n.outputs[0].dims[0], "hint",
                                                  n.outputs[0].dims[0]) == 32]
    assert len(products) == 2 * steps - 1
    assert not any(n.attrs["transpose_b"] for n in products)
    w_h_t = {n.inputs[1] for n in products if n.outputs[0].dims[1] == 256}
    assert len(w_h_t) == 1 and next(iter(w_h_t)).node.type == "Transpose"
    assert sum(n.type == "Transpose" and list(n.outputs[0].dims) == [1024, 256]
               for n in module.nodes) == 1


def _fed_cell(hidden, weights):
    queue = list(weights)
    cell = rnn_cell.BasicLSTMCell(hidden)
    cell.add_variable = lambda name, shape, initializer=None, dtype=None: queue.pop(0)
    return cell


def test_lstm_gradients_through_the_tiles_match_finite_differences(tiled):
    """float64, hidden 7: the 28 gate columns are a panel of three vectors and 4 scalar
    columns; the inputs, initial state and weights are all checked."""
    batch, steps, width, hidden = 3, 3, 2, 7
    rng = np.random.default_rng(7)
    x = rng.standard_normal((steps, batch, width))
    state = rng.standard_normal((batch, 2 * hidden))
    weights = [0.5 * rng.standard_normal((width + hidden, 4 * hidden)),
               0.5 * rng.standard_normal(4 * hidden)]

    def fn(xp, sp, *wp):
        c0, h0 = gc.split(sp, [hidden, hidden], axis=1)
        outs, final = gc.nn.static_rnn(_fed_cell(hidden, wp), gc.unstack(xp, num=steps),
                                       initial_state=rnn_cell.LSTMStateTuple(c0, h0))
        return gc.concat(outs + [final.c, final.h], 1)
    check_gradients(fn, [x, state] + weights)
    recurrent = [t for t in tiled if t[:3] == (batch, 4 * hidden, hidden)]
    assert recurrent and all(not t[3] for t in recurrent)
