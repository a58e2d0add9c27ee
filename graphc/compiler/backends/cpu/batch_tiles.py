"""The batch entries of a BatchMatMulV2 of small static matrices, each on register tiles
instead of a BLAS call: C = op(A) . B per entry, B not transposed.

Attention's products are of this kind: per batch entry and head, probs [128, 128] .
V [128, 64] forward, dS [128, 128] . K [128, 64] and P^T . dCtx backward,
transformer_train's 64 entries a product. OpenBLAS ran such an entry (1M multiply-adds)
at 55-75 GFLOP/s on one core (29 us a call, numpy's own loop, against ~12 us of
multiply-adds at the core's peak): each call checks its arguments, takes a buffer and
packs both operands, work paid back by large matrices only. Here a tile of ROWS rows x
COLS vectors of C's columns stays in registers while the k loop broadcasts one element
of op(A) per row against COLS vectors of B's row k, read where it lies: the rows of B are
contiguous along N whatever the view's row stride, and one entry's B (K x N, 32 KB for
attention) stays in L1/L2 across its row tiles, so there is nothing to pack.

Every operand is addressed with its own static strides (the views of
loops/products.ProductViews: the heads' split and merge read and write the stored
[B, S, H, dh] layout; dense entries are their row-major strides), so the transposes
folded into the product need no copy here either. The team (gemm_team.py) splits the
batch; each entry is one call of this module's entry function.

Results: every element of C is one chain of fused multiply-adds over k in order from 0,
whatever tile or tail it falls in, so neither the thread count nor the split changes a
bit. Products with a transposed B (Q . K^T) stay on BLAS: B's columns would be read
across its rows.

The tiles are small_gemm.py's (its Tiling, emit_rows and tile_function), given each
entry's strides, a static M, no bias and no prefetch of B's rows (a few-KB entry of B
stays in cache; small_gemm's weights come from L3).
"""
from llvmlite import ir

from graphc.compiler.backends.cpu import small_gemm
from graphc.compiler.backends.cpu.small_gemm import DTYPES, VECTOR_BYTES
from graphc.compiler.loops.products import row_major_strides, transposes
from kernels import dtypes as kd
from kernels.loops import I64, PTR, for_range

# A tile: rows x vectors. small_gemm's 8 x 3 unless N is a multiple of 4 vectors
# (attention's head size 64): then 6 x 4 covers N with whole tiles, where 8 x 3 left a
# 1-vector column of tiles of 8 accumulators (two loads per three multiply-adds) that made
# the 64-wide products 15-25% slower than OpenBLAS with A transposed. small_gemm keeps
# 8 x 3 for lstm_train's N of 1024 and 256, multiples of 4 vectors too: there that column
# is 1/64 and 1/16 of N, and 6 x 4 measured slower (small_gemm.ROWS).
TILES = ((6, 4), (small_gemm.ROWS, small_gemm.COLS))
# Multiply-adds of one entry, at most: above it OpenBLAS's per-call cost is a few percent
# of the entry's time and its packed panels beat reading B in place (an entry's B no
# longer stays in L2).
MAX_ENTRY_MACS = 1 << 22


def applies(node):
    """Whether BatchMatMulV2 `node` runs its entries on these tiles."""
    if node.type != "BatchMatMulV2" or transposes(node)[1]:
        return False
    out = node.outputs[0]
    operands = (*node.inputs[:2], out)
    if out.dtype.name not in DTYPES or any(v.dims is None for v in operands):
        return False
    # a rank-2 BatchMatMulV2 (unknown ranks fed matrices) is one product: the team cuts its
    # rows or columns into BLAS calls, not entries
    if len(out.dims) < 3 or not all(isinstance(d, int) for v in operands for d in v.dims):
        return False
    m, n = out.dims[-2:]
    k = node.inputs[1].dims[-2]
    lanes = VECTOR_BYTES // kd.itemsize(out.dtype.name)
    # narrower than a panel, every column would be a scalar one: BLAS does better
    return n >= min(cols for _, cols in TILES) * lanes and m * n * k <= MAX_ENTRY_MACS


def entry_function(module, node, strides=None):
    """fn(ptr a, ptr b, ptr c): one batch entry's C = op(A) . B, the pointers at the
    entry's first elements. strides: [A's, B's, C's] element strides of the views (each
    None when dense), or None (all dense)."""
    tiling = _tiling(node, strides or [None] * 3)
    fn, new = small_gemm.internal_function(module, f"{tiling.name}.entry", [PTR] * 3)
    if not new:
        return fn
    for arg in fn.args:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pointers = [*fn.args, ir.Constant(PTR, None)]   # no bias
    col = 0
    for vectors, lanes in small_gemm.column_widths(tiling):
        width = vectors * lanes
        count = (tiling.n - col) // width
        with for_range(b, ir.Constant(I64, count), name=f"cols{width}") as i:
            start = b.add(ir.Constant(I64, col), b.mul(i, ir.Constant(I64, width)))
            small_gemm.emit_rows(b, tiling, pointers, start, vectors, lanes)
        col += count * width
    b.ret_void()
    return fn


def _tiling(node, strides):
    """The small_gemm.Tiling of one entry of `node`: its views' strides, a tile of TILES."""
    a, bv = node.inputs[:2]
    out = node.outputs[0]
    m, n = out.dims[-2:]
    a_lead, ldb, ldc = ((s if s is not None else row_major_strides(v.dims))[-2]
                        for v, s in zip((a, bv, out), strides))
    lanes = VECTOR_BYTES // kd.itemsize(out.dtype.name)
    tile = next((rows, cols) for rows, cols in TILES
                if n % (cols * lanes) == 0 or cols == TILES[-1][1])
    return small_gemm.Tiling("graphc.batch_tiles", out.dtype.name, m, n, bv.dims[-2],
                             a_steps=(1, a_lead) if transposes(node)[0] else (a_lead, 1),
                             ldb=ldb, ldc=ldc, tile=tile)
