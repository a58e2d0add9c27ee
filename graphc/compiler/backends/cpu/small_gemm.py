"""Products of few rows, C[M, N] = op(A) . B with M <= MAX_ROWS, on our own register
tiles instead of a BLAS call.

static_rnn's recurrent products are of this kind: h_t [32, 256] . W_h [256, 1024] forward
and dG_t [32, 1024] . W_h^T [1024, 256] backward (the transpose made once:
passes/shared_transposes.py), 63 serial calls a step of lstm_train. OpenBLAS ran them at
82-110 GFLOP/s of the 2-thread peak of about 300: each call packs all of B (1 MB) into its
panel layout, work worth it when many rows of A use each panel, not 32. Here a tile of
ROWS rows x COLS vectors of C's columns stays in registers while the k loop broadcasts
one element of A per row against COLS vectors of B's row k, read where it lies (B's rows
are contiguous along N, so there is nothing to pack); the team splits C by columns.

    tile      fn(ptr a, ptr b, ptr c, ptr bias): rows x vectors of lanes, all of k
    columns   fn(ptr a, ptr b, ptr c, ptr bias, i64 lo, i64 hi, i64 m): C[:, lo:hi], all rows
    task      the team's: claims units of columns and runs `columns` on each

The tile (Tiling, tile_function) also runs batch_tiles.py's BatchMatMulV2 entries: its
facts are parameters (B's and C's row strides, A's element steps, the tile's rows x
vectors, the bias, the prefetch), each caller sets them for its products.

Every function is named after its static facts (dtype, sizes, flags) and emitted once
per LLVM module: lstm_train's 63 products are of two shapes, two sets of functions
(LLVM takes about 0.06 CPU-s for a set).

Results: every element of C is one chain of fused multiply-adds over k in order from 0,
then + bias, whatever tile, tail or unit it falls in, so the thread count and the split
never change a bit. Used for MatMuls (not batched) of float32/float64 with static N and
K, B not transposed (a transposed B would be read across its rows: the vectors would need
a gather or a pack) and dense operands; anything else stays on BLAS (gemm_team.py). M may
be known only at run time (a batch of None, A not transposed): then the last rows are a
partial tile, and M is judged at its hint.
"""
from llvmlite import ir

from graphc.compiler.backends.cpu import gemm_team, parallel
from graphc.compiler.backends.cpu.conv_team import claim_loop
from kernels import dtypes as kd
from kernels import parallel as kp
from kernels.loops import I32, I64, PTR, CarriedLoop, entry_alloca, for_range

MAX_ROWS = 64
# One AVX-512 register of C's columns per vector; on narrower targets LLVM splits it.
VECTOR_BYTES = 64
# A tile: ROWS rows x COLS vectors = 24 accumulators of 32 registers, COLS loads of B and
# ROWS broadcasts of A per 24 multiply-adds (two FMA ports, two load ports). Standalone on
# one thread, lstm_train's two shapes took 0.61 and 0.56 of OpenBLAS's time with 8 x 3,
# 0.73 and 0.58 with 8 x 2, 0.83 and 0.60 with 6 x 4, ~1.0 and 0.72 with 4 x 4.
ROWS, COLS = 8, 3
UNROLL = 4   # k steps per trip of the k loop
# B's rows ahead of the k loop that each step prefetches. A tile reads a few cache lines
# of each row of B, rows N elements apart: a stride of pages (4 KB for lstm_train's
# forward) that the hardware prefetchers do not follow, so B coming from L3 (two weight
# matrices and the activations do not stay in L2) left the loop waiting on every row.
PREFETCH_ROWS = 16
# Products below this many multiply-adds run on one thread (a team costs more).
MIN_MACS = 1 << 18
DTYPES = ("float32", "float64")


def applies(node, views):
    """Whether MatMul `node` (its kernel's ProductViews `views`) runs on these tiles."""
    if node.type != "MatMul" or node.attrs["transpose_b"]:
        return False
    out = node.outputs[0]
    if out.dtype.name not in DTYPES or views.result is not None or \
            any(s is not None for _, s in views.operands):
        return False
    m, n = out.dims
    k = node.inputs[0].dims[0 if node.attrs["transpose_a"] else 1]
    if not isinstance(n, int) or not isinstance(k, int):
        return False
    if not isinstance(m, int) and (node.attrs["transpose_a"] or not hasattr(m, "hint")):
        return False   # a run-time M is a number of rows of A, not its row stride
    # narrower than a panel, every column would be a scalar one (a weight gradient
    # x^T . g of few classes): BLAS does better. A run-time M is judged at its hint: the
    # choice changes the speed, never the result (the tiles take any M), so no guard.
    lanes = VECTOR_BYTES // kd.itemsize(out.dtype.name)
    return _hint(m) <= MAX_ROWS and n >= COLS * lanes


def _hint(d):
    return d if isinstance(d, int) else d.hint


def emit_product(b, node, a_ptr, b_ptr, c_ptr, bias_ptr, m):
    """C = op(A) @ B (+ the bias row) for MatMul `node` (applies(node) holds); m: C's
    rows, an i64 value of the caller's."""
    tiling = _tiling(node, bias_ptr is not None)
    columns = _columns_function(b.module, tiling)
    bias = ir.Constant(PTR, None) if bias_ptr is None else bias_ptr
    units, block = _units(tiling)
    if units == 1 or not parallel.enabled():
        b.call(columns, [a_ptr, b_ptr, c_ptr, bias, ir.Constant(I64, 0),
                         ir.Constant(I64, tiling.n), m])
        return
    # a, b, c, bias, the next unit (the shared counter), m
    layout = parallel.Layout(ir.LiteralStructType([PTR] * 4 + [I64, I64]))
    task = _task_function(b.module, tiling, columns, layout, units, block)
    data = entry_alloca(b, layout.type, "small_gemm.team.data")
    for k, v in enumerate([a_ptr, b_ptr, c_ptr, bias, ir.Constant(I64, 0), m]):
        b.store(v, layout.address(b, data, k))
    team = kp.emit_team_size(b, b.load(kp.threads_global(b.module), typ=I32),
                             ir.Constant(I64, units))
    with b.if_else(b.icmp_signed(">", team, ir.Constant(I32, 1))) as (on_team, alone):
        with on_team:
            b.call(kp.parallel_fn(b.module), [task, data, team])
        with alone:
            b.call(task, [data])


def _tiling(node, has_bias):
    """The Tiling of MatMul `node`: dense operands (B's and C's rows N apart), 8 x 3
    tiles, B's rows prefetched."""
    out = node.outputs[0]
    m, n = out.dims   # m: an int, or a SymDim (known at run time)
    a_dims = node.inputs[0].dims
    transpose_a = node.attrs["transpose_a"]
    k = a_dims[0] if transpose_a else a_dims[1]
    return Tiling("graphc.small_gemm", out.dtype.name, m, n, k,
                  a_steps=(1, m) if transpose_a else (k, 1), ldb=n, ldc=n,
                  has_bias=has_bias, prefetch=True)


class Tiling:
    """The static facts that one product's tiles are emitted from.

    op(A)[row, k] lies at row * row_step + k * k_step (a_steps); B's row k at k * ldb and
    C's row r at r * ldc, each row contiguous along N. A full tile is rows x cols vectors.
    has_bias: the tiles add the row their bias pointer points at; prefetch: each k step
    prefetches B's row PREFETCH_ROWS ahead. m is an int, or a SymDim known at run time.
    Functions are named `name` + what they compute; `name` is the caller's prefix and
    the facts, so equal names are equal code."""

    def __init__(self, prefix, dtype, m, n, k, a_steps, ldb, ldc, has_bias=False,
                 prefetch=False, tile=(ROWS, COLS)):
        self.dtype, self.m, self.n, self.k = dtype, m, n, k
        self.row_step, self.k_step = a_steps
        self.ldb, self.ldc = ldb, ldc
        self.has_bias, self.prefetch = has_bias, prefetch
        self.rows, self.cols = tile
        self.elem = kd.memory_type(dtype)
        self.lanes = VECTOR_BYTES // kd.itemsize(dtype)
        self.panel = self.cols * self.lanes   # columns per tile of full vectors
        self.name = f"{prefix}.{self._key()}"

    def _key(self):
        m = self.m if isinstance(self.m, int) else "_run"
        # the tile shape and the prefetch are the prefix's (its caller's) choices
        strides = "" if self.ldb == self.ldc == self.n else f".b{self.ldb}.c{self.ldc}"
        return (f"{self.dtype}.m{m}.n{self.n}.k{self.k}.a{self.row_step}_{self.k_step}"
                f"{strides}{'.bias' if self.has_bias else ''}")


def _units(tiling):
    """(units, columns per unit): whole panels, at most one unit per core of the
    compiling machine (gemm_team.MAX_UNITS), one for a small product."""
    panels = -(-tiling.n // tiling.panel)
    if _hint(tiling.m) * tiling.n * tiling.k < MIN_MACS or panels < 2:
        return 1, tiling.n
    units = min(gemm_team.MAX_UNITS, panels)
    block = -(-panels // units) * tiling.panel
    return -(-tiling.n // block), block


def internal_function(module, name, arg_types):
    """(the function `name` of the module, whether it still needs its body)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing, False
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    return fn, True


def _task_function(module, tiling, columns, layout, units, block):
    """The team's task: claims units of columns from the shared counter and runs
    `columns` on each. The thread that calls the team claims first, so when all threads
    run, thread t mostly gets unit t every step and finds its columns of B (half of W_h
    for two) in its core's L2; when the OS holds a thread back, another takes its unit."""
    fn, new = internal_function(module, f"{tiling.name}.u{units}.task", [PTR])
    if not new:
        return fn
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = fn.args[0]
    pointers = [layout.load(b, data, k) for k in range(4)]
    m = layout.load(b, data, 5)
    n = ir.Constant(I64, tiling.n)
    with claim_loop(b, layout.address(b, data, 4), ir.Constant(I64, units)) as u:
        lo = b.mul(u, ir.Constant(I64, block))
        hi = b.add(lo, ir.Constant(I64, block))
        b.call(columns, pointers + [lo, b.select(b.icmp_signed("<", hi, n), hi, n), m])
    kp.count_task(b)
    b.ret_void()
    return fn


def _columns_function(module, tiling):
    """C[:, lo:hi] for every row, in column_widths(tiling) from lo. lo is a multiple of
    the panel and hi one too or N."""
    fn, new = internal_function(module, f"{tiling.name}.columns", [PTR] * 4 + [I64, I64, I64])
    if not new:
        return fn
    for arg in fn.args[:3]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lo, hi, m = fn.args[4:]
    col = lo
    for vectors, lanes in column_widths(tiling):
        width = ir.Constant(I64, vectors * lanes)
        count = b.sdiv(b.sub(hi, col), width)
        with for_range(b, count, name=f"cols{vectors * lanes}") as i:
            _emit_rows(b, tiling, fn.args[:4], b.add(col, b.mul(i, width)), vectors, lanes, m)
        col = b.add(col, b.mul(count, width))
    b.ret_void()
    return fn


def column_widths(tiling):
    """[(vectors, lanes)] of the tiles that cover N from a panel's start: panels of cols
    vectors, then single vectors, then single columns (scalar lanes); only the widths that
    N's last panel needs (compile time)."""
    rest = tiling.n % tiling.panel
    return [(tiling.cols, tiling.lanes)] + [(1, tiling.lanes)] * (rest >= tiling.lanes) + \
        [(1, 1)] * (rest % tiling.lanes > 0)


def _emit_rows(b, tiling, pointers, col, vectors, lanes, m):
    if isinstance(tiling.m, int):
        emit_rows(b, tiling, pointers, col, vectors, lanes)
    else:
        _emit_run_time_rows(b, tiling, pointers, col, vectors, lanes, m)


def emit_rows(b, tiling, pointers, col, vectors, lanes):
    """Every row of C's columns [col, col + vectors * lanes) for a static M: full tiles,
    then a tile of the remaining rows. pointers: a, b, c, bias at the product's first
    elements (bias: any pointer without has_bias)."""
    a_ptr, b_ptr, c_ptr, bias_ptr = pointers
    at = lambda p, offset: b.gep(p, [offset], source_etype=tiling.elem)  # noqa: E731
    b_at, bias_at = at(b_ptr, col), at(bias_ptr, col)
    full, rest = divmod(tiling.m, tiling.rows)
    if full:
        tile = tile_function(b.module, tiling, tiling.rows, vectors, lanes)
        with for_range(b, ir.Constant(I64, full), name="rows") as r:
            row = b.mul(r, ir.Constant(I64, tiling.rows))
            b.call(tile, [at(a_ptr, b.mul(row, ir.Constant(I64, tiling.row_step))), b_at,
                          at(c_ptr, b.add(b.mul(row, ir.Constant(I64, tiling.ldc)), col)),
                          bias_at])
    if rest:
        row = full * tiling.rows
        tile = tile_function(b.module, tiling, rest, vectors, lanes)
        b.call(tile, [at(a_ptr, ir.Constant(I64, row * tiling.row_step)), b_at,
                      at(c_ptr, b.add(ir.Constant(I64, row * tiling.ldc), col)), bias_at])


def _emit_run_time_rows(b, tiling, pointers, col, vectors, lanes, m):
    """emit_rows for a run-time M: m // rows full tiles, then one partial tile."""
    a_ptr, b_ptr, c_ptr, bias_ptr = pointers
    at = lambda p, offset: b.gep(p, [offset], source_etype=tiling.elem)  # noqa: E731
    b_at, bias_at = at(b_ptr, col), at(bias_ptr, col)
    rows = ir.Constant(I64, tiling.rows)
    full, rest = b.udiv(m, rows), b.urem(m, rows)

    def a_c_at(row):
        return [at(a_ptr, b.mul(row, ir.Constant(I64, tiling.row_step))), b_at,
                at(c_ptr, b.add(b.mul(row, ir.Constant(I64, tiling.ldc)), col)), bias_at]
    tile = tile_function(b.module, tiling, tiling.rows, vectors, lanes)
    with for_range(b, full, name="rows") as r:
        b.call(tile, a_c_at(b.mul(r, rows)))
    with b.if_then(b.icmp_signed(">", rest, ir.Constant(I64, 0))):
        partial = tile_function(b.module, tiling, tiling.rows, vectors, lanes, partial=True)
        b.call(partial, a_c_at(b.mul(full, rows)) + [rest])


def tile_function(module, tiling, rows, vectors, lanes, partial=False):
    """fn(ptr a, ptr b, ptr c, ptr bias): C[rows, vectors * lanes] = op(A)[rows, :] .
    B[:, the columns] (+ bias), the accumulators carried in registers through the k loop;
    a, b, c and bias point at the tile's first row / column. partial: fn(..., i64 valid)
    computes only the first `valid` rows (1 to rows - 1): the others read A's last valid
    row and store nothing, so each row's multiply-adds are those of a full tile."""
    name = f"{tiling.name}.tile{rows}x{vectors}x{lanes}{'.partial' if partial else ''}"
    fn, new = internal_function(module, name, [PTR] * 4 + [I64] * partial)
    if not new:
        return fn
    for arg in fn.args[:3]:
        arg.add_attribute("noalias")
    _Tile(fn, tiling, rows, vectors, lanes).emit()
    return fn


class _Tile:
    def __init__(self, fn, tiling, rows, vectors, lanes):
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.a, self.bm, self.c, self.bias = fn.args[:4]
        self.valid = fn.args[4] if len(fn.args) > 4 else None
        self.tiling, self.rows, self.vectors, self.lanes = tiling, rows, vectors, lanes
        # A's row r at this offset: r itself, or the last valid row for the rows after it
        self.row_at = [ir.Constant(I64, r * tiling.row_step) for r in range(rows)]
        if self.valid is not None:
            b, last = self.b, self.b.sub(self.valid, ir.Constant(I64, 1))
            self.row_at = [b.mul(b.select(b.icmp_signed("<", ir.Constant(I64, r), last),
                                          ir.Constant(I64, r), last),
                                 ir.Constant(I64, tiling.row_step)) for r in range(rows)]
        elem = tiling.elem
        self.vec = elem if lanes == 1 else ir.VectorType(elem, lanes)
        suffix = f"f{kd.bits(tiling.dtype)}" if lanes == 1 else \
            f"v{lanes}f{kd.bits(tiling.dtype)}"
        self.fma = fn.module.globals.get(f"llvm.fma.{suffix}") or ir.Function(
            fn.module, ir.FunctionType(self.vec, [self.vec] * 3), f"llvm.fma.{suffix}")
        if tiling.prefetch:
            self.prefetch = fn.module.globals.get("llvm.prefetch.p0") or ir.Function(
                fn.module, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]),
                "llvm.prefetch.p0")

    def emit(self):
        b, tiling = self.b, self.tiling
        zero = ir.Constant(self.vec, 0.0) if self.lanes == 1 else \
            ir.Constant(self.vec, [ir.Constant(tiling.elem, 0.0)] * self.lanes)
        acc = [zero] * (self.rows * self.vectors)
        trips, rest = divmod(tiling.k, UNROLL)
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
        return self.b.gep(p, [offset], source_etype=self.tiling.elem)

    def _step(self, k, acc):
        """acc[r][v] + op(A)[r, k] * B[k, vector v] for the tile's rows."""
        b, tiling = self.b, self.tiling
        size = kd.itemsize(tiling.dtype)
        b_row = self._at(self.bm, b.mul(k, ir.Constant(I64, tiling.ldb)))
        taps = [b.load(self._at(b_row, ir.Constant(I64, v * self.lanes)), typ=self.vec,
                       align=size) for v in range(self.vectors)]
        if tiling.prefetch:
            self._prefetch(b_row)
        a_col = self._at(self.a, b.mul(k, ir.Constant(I64, tiling.k_step)))
        out = []
        for r in range(self.rows):
            x = b.load(self._at(a_col, self.row_at[r]),
                       typ=tiling.elem, align=size)
            splat = x if self.lanes == 1 else _splat(b, self.vec, x)
            out += [b.call(self.fma, [splat, taps[v], acc[r * self.vectors + v]])
                    for v in range(self.vectors)]
        return out

    def _prefetch(self, b_row):
        ahead = self._at(b_row, ir.Constant(I64, PREFETCH_ROWS * self.tiling.ldb))
        for v in range(self.vectors):  # past B's end too: a prefetch never faults
            self.b.call(self.prefetch, [self._at(ahead, ir.Constant(I64, v * self.lanes)),
                                        ir.Constant(I32, 0), ir.Constant(I32, 3),
                                        ir.Constant(I32, 1)])

    def _store(self, acc):
        b, tiling = self.b, self.tiling
        size = kd.itemsize(tiling.dtype)
        offsets = [ir.Constant(I64, v * self.lanes) for v in range(self.vectors)]
        bias = [b.load(self._at(self.bias, o), typ=self.vec, align=size) for o in offsets] \
            if tiling.has_bias else None
        for r in range(self.rows):
            if self.valid is None:
                self._store_row(acc, r, offsets, bias)
                continue
            with b.if_then(b.icmp_signed("<", ir.Constant(I64, r), self.valid)):
                self._store_row(acc, r, offsets, bias)

    def _store_row(self, acc, r, offsets, bias):
        b, tiling = self.b, self.tiling
        row = self._at(self.c, ir.Constant(I64, r * tiling.ldc))
        for v, o in enumerate(offsets):
            value = acc[r * self.vectors + v]
            if bias is not None:
                value = b.fadd(value, bias[v])
            b.store(value, self._at(row, o), align=kd.itemsize(tiling.dtype))


def _splat(b, vec, x):
    undef = ir.Constant(vec, ir.Undefined)
    zeros = ir.Constant(ir.VectorType(I32, vec.count), [0] * vec.count)
    return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I64, 0)), undef, zeros)
