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

This is small_gemm.py's tile (same ROWS x COLS, same k loop) with strides for A, B and C
and a static M; small_gemm keeps the dense MatMuls of few rows (and its prefetch of B's
rows, which a few-KB entry of B does not need).
"""
from llvmlite import ir

from graphc.compiler.loops.products import row_major_strides, transposes
from kernels import dtypes as kd
from kernels.loops import I32, I64, PTR, CarriedLoop, for_range

# One AVX-512 register of C's columns per vector; on narrower targets LLVM splits it.
VECTOR_BYTES = 64
# A tile: rows x vectors = 24 accumulators of 32 registers. 8 x 3 (small_gemm.py's
# measurements chose it) unless N is a multiple of 4 vectors (attention's head size 64):
# then 6 x 4 covers N with whole tiles, where 8 x 3 left a 1-vector column of tiles of 8
# accumulators (two loads per three multiply-adds) that made the 64-wide products 15-25%
# slower than OpenBLAS with A transposed.
TILES = ((6, 4), (8, 3))
UNROLL = 4   # k steps per trip of the k loop
# Multiply-adds of one entry, at most: above it OpenBLAS's per-call cost is a few percent
# of the entry's time and its packed panels beat reading B in place (an entry's B no
# longer stays in L2).
MAX_ENTRY_MACS = 1 << 22
DTYPES = ("float32", "float64")


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
    shape = _Shape(node, strides or [None] * 3)
    fn, new = _function(module, f"graphc.batch_tiles.{shape.key()}.entry", 3)
    if not new:
        return fn
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    col = ir.Constant(I64, 0)
    rest = shape.n % shape.panel
    widths = [(shape.cols, shape.lanes)] + [(1, shape.lanes)] * (rest >= shape.lanes) + \
        [(1, 1)] * (rest % shape.lanes > 0)
    for vectors, lanes in widths:
        width = vectors * lanes
        count = (shape.n - col.constant) // width
        with for_range(b, ir.Constant(I64, count), name=f"cols{width}") as i:
            _emit_rows(b, shape, fn.args, b.add(col, b.mul(i, ir.Constant(I64, width))),
                       vectors, lanes)
        col = ir.Constant(I64, col.constant + count * width)
    b.ret_void()
    return fn


class _Shape:
    """The static facts of one entry: sizes, dtype, element strides of op(A), B and C."""

    def __init__(self, node, strides):
        a, bv = node.inputs[:2]
        out = node.outputs[0]
        self.dtype = out.dtype.name
        self.m, self.n = out.dims[-2:]
        self.k = bv.dims[-2]
        a_lead, self.ldb, self.ldc = (
            (s if s is not None else row_major_strides(v.dims))[-2]
            for v, s in zip((a, bv, out), strides))
        # op(A)[row, k] lies at row * row_step + k * k_step
        self.row_step, self.k_step = (1, a_lead) if transposes(node)[0] else (a_lead, 1)
        self.elem = kd.memory_type(self.dtype)
        self.lanes = VECTOR_BYTES // kd.itemsize(self.dtype)
        self.rows, self.cols = next((rows, cols) for rows, cols in TILES
                                    if self.n % (cols * self.lanes) == 0 or cols == TILES[-1][1])
        self.panel = self.cols * self.lanes   # columns per tile of full vectors

    def key(self):
        return (f"{self.dtype}.m{self.m}.n{self.n}.k{self.k}.a{self.row_step}_{self.k_step}"
                f".b{self.ldb}.c{self.ldc}")


def _function(module, name, pointers):
    """(the function `name` of the module, whether it still needs its body)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing, False
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * pointers), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args:
        arg.add_attribute("noalias")
    return fn, True


def _emit_rows(b, shape, pointers, col, vectors, lanes):
    """Every row of C's columns [col, col + vectors * lanes): full tiles, then a tile of
    the remaining rows."""
    a_ptr, b_ptr, c_ptr = pointers
    at = lambda p, offset: b.gep(p, [offset], source_etype=shape.elem)  # noqa: E731
    b_at = at(b_ptr, col)
    full, rest = divmod(shape.m, shape.rows)

    def call(tile, row):
        b.call(tile, [at(a_ptr, b.mul(row, ir.Constant(I64, shape.row_step))), b_at,
                      at(c_ptr, b.add(b.mul(row, ir.Constant(I64, shape.ldc)), col))])
    if full:
        tile = _tile_function(b.module, shape, shape.rows, vectors, lanes)
        with for_range(b, ir.Constant(I64, full), name="rows") as r:
            call(tile, b.mul(r, ir.Constant(I64, shape.rows)))
    if rest:
        call(_tile_function(b.module, shape, rest, vectors, lanes),
             ir.Constant(I64, full * shape.rows))


def _tile_function(module, shape, rows, vectors, lanes):
    """fn(a, b, c): C[rows, vectors * lanes] = op(A)[rows, :] . B[:, the columns], the
    accumulators carried in registers through the k loop; a, b, c point at the tile's
    first row / column."""
    fn, new = _function(module, f"graphc.batch_tiles.{shape.key()}.tile{rows}x{vectors}x"
                        f"{lanes}", 3)
    if new:
        _Tile(fn, shape, rows, vectors, lanes).emit()
    return fn


class _Tile:
    def __init__(self, fn, shape, rows, vectors, lanes):
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.a, self.bm, self.c = fn.args
        self.shape, self.rows, self.vectors, self.lanes = shape, rows, vectors, lanes
        elem = shape.elem
        self.vec = elem if lanes == 1 else ir.VectorType(elem, lanes)
        suffix = f"f{kd.bits(shape.dtype)}" if lanes == 1 else \
            f"v{lanes}f{kd.bits(shape.dtype)}"
        self.fma = fn.module.globals.get(f"llvm.fma.{suffix}") or ir.Function(
            fn.module, ir.FunctionType(self.vec, [self.vec] * 3), f"llvm.fma.{suffix}")

    def emit(self):
        b, shape = self.b, self.shape
        zero = ir.Constant(self.vec, 0.0) if self.lanes == 1 else \
            ir.Constant(self.vec, [ir.Constant(shape.elem, 0.0)] * self.lanes)
        acc = [zero] * (self.rows * self.vectors)
        trips, rest = divmod(shape.k, UNROLL)
        if trips:
            loop = CarriedLoop(b, ir.Constant(I64, trips), acc, "k")
            with loop as (t, acc):
                k0 = b.mul(t, ir.Constant(I64, UNROLL))
                for u in range(UNROLL):
                    acc = self._step(b.add(k0, ir.Constant(I64, u)), acc)
                loop.carry(acc)
            acc = loop.results
        for u in range(rest):
            acc = self._step(ir.Constant(I64, trips * UNROLL + u), acc)
        self._store(acc)
        b.ret_void()

    def _at(self, p, offset):
        return self.b.gep(p, [offset], source_etype=self.shape.elem)

    def _step(self, k, acc):
        """acc[r][v] + op(A)[r, k] * B[k, vector v] for the tile's rows."""
        b, shape = self.b, self.shape
        size = kd.itemsize(shape.dtype)
        b_row = self._at(self.bm, b.mul(k, ir.Constant(I64, shape.ldb)))
        taps = [b.load(self._at(b_row, ir.Constant(I64, v * self.lanes)), typ=self.vec,
                       align=size) for v in range(self.vectors)]
        a_col = self._at(self.a, b.mul(k, ir.Constant(I64, shape.k_step)))
        out = []
        for r in range(self.rows):
            x = b.load(self._at(a_col, ir.Constant(I64, r * shape.row_step)),
                       typ=shape.elem, align=size)
            splat = x if self.lanes == 1 else _splat(b, self.vec, x)
            out += [b.call(self.fma, [splat, taps[v], acc[r * self.vectors + v]])
                    for v in range(self.vectors)]
        return out

    def _store(self, acc):
        b, shape = self.b, self.shape
        size = kd.itemsize(shape.dtype)
        for r in range(self.rows):
            row = self._at(self.c, ir.Constant(I64, r * shape.ldc))
            for v in range(self.vectors):
                b.store(acc[r * self.vectors + v],
                        self._at(row, ir.Constant(I64, v * self.lanes)), align=size)


def _splat(b, vec, x):
    undef = ir.Constant(vec, ir.Undefined)
    zeros = ir.Constant(ir.VectorType(I32, vec.count), [0] * vec.count)
    return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I64, 0)), undef, zeros)
