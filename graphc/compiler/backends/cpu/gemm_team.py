"""The product of a gemm kernel (gemm_kernel.py) split across our thread team.

The BLAS library runs single-threaded inside our runs (the entry sets it so: entry.py),
so that one pool of threads -- ours -- runs everything: two pools on the same cores fight
(OpenBLAS's idle threads spin for a while after each call, and took the cores from our
teams: the conv_train workload of tools/bench.py ran twice as long). A large product is cut into units, each one BLAS
call on a block, claimed by the team's threads from a shared counter:
  "cols"   blocks of C's columns (and of op(B)'s), when C is at least as wide as tall
  "rows"   blocks of C's rows (and of op(A)'s), otherwise
  "batch"  runs of the batch of a BatchMatMulV2
The units are a function of the sizes (and the compiling machine's cores: MAX_UNITS) alone,
never of the team, and each element of C
is computed by one BLAS call whatever the team, so results do not depend on the thread
count.

How many units (_units): as many as the work pays for, UNIT_MACS multiply-adds each at
least, no narrower than MIN_BLOCK rows or columns, at most MAX_UNITS; a product below
2 * UNIT_MACS is one call, with no team. The rule depends on the work, not on which side
is cut: a [64, 256] . [256, 256] layer (4.2M multiply-adds) is two units whether its C is
cut in rows or in columns. Blocks start at multiples of ALIGN elements, so two threads
never write one cache line of C.
"""
import os

from llvmlite import ir

from graphc.compiler.backends.cpu import parallel
from graphc.compiler.backends.cpu.conv_team import claim_loop
from graphc.compiler.loops.products import row_major_strides, transposes
from kernels import dtypes as kd
from kernels import gemm
from kernels import parallel as kp
from kernels.loops import I32, I64, PTR, entry_alloca, for_range

# Multiply-adds of one unit, at least: ~17 us of one core's BLAS (~120 GFLOP/s on the
# 2-core VM for the workloads' shapes, tools/gemm_shapes.py), several times what a region
# costs while the team's threads still spin (~3 us: parallel.py's MIN_WORK note;
# tools/team_dispatch.py measures it), and enough that a unit more (its BLAS call packs
# the uncut operand again: 3-7% more one-thread time per halving, measured for the
# transformer's and the MLPs' shapes) is paid back by the second core. So a product is
# cut only from 2 * UNIT_MACS on.
UNIT_MACS = 1 << 20
# Rows or columns of a unit, at least: two 16-wide micro-tiles of OpenBLAS's sgemm kernels;
# 32-column units of [64, 256] . [256, 256] products still ran at ~80% of the rate of the
# whole (NN, NT and TN), so two of them on two cores beat one.
MIN_BLOCK = 32
# Units start at multiples of this many elements of the cut side: 16 floats = one cache
# line of a row of C (16 float64s: two), so the threads writing two neighbouring column
# blocks of C do not share a line at the boundary in every row.
ALIGN = 16


def host_cores():
    """The cores this process may run on (the machine compiling the code)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# Units per product, at most: one per core of the compiling machine (2 to 16). Each unit's
# BLAS call packs all of the operand it does not cut (B for blocks of rows), so a unit more
# is a pack more: on the 2-core machine, transformer_train's [2048, *] products cut in 2
# units instead of 8 (of 256 rows) took a step from 127.7 to 121.2 CPU-ms on one
# thread. Claimed units still even out a thread the OS holds back by at most one unit.
# The team size (set when the code is loaded) is never an input, so results do not depend
# on the thread count.
MAX_UNITS = min(16, max(2, host_cores()))


def emit_product(b, program, node, gemm_fn, a_ptr, b_ptr, c_ptr, syms, name, batch_positions,
                 bias_ptr=None, strides=None, entry=None):
    """C = op(A) @ op(B) for MatMul/BatchMatMulV2 `node`, on the team when large; with
    bias_ptr (a MatMul's), C = bias rows + op(A) @ op(B). strides: a batched product's
    views (loops/products.ProductViews), [A's, B's, C's] element strides (None: dense).
    entry: a batched product's fn(a, b, c) computing one batch entry (batch_tiles.py), in
    place of the BLAS call (gemm_fn None then)."""
    shape = _Shape(b, program, node, syms)
    calls = _EntryCalls(node, gemm_fn, entry)
    # units of batch entries, each at its views' offsets
    strided = None if strides is None else _StridedBatch(node, strides)
    if not parallel.enabled():
        mode = "batch" if shape.batch else "rows"
        _emit_units(b, program, node, calls, shape, mode, (a_ptr, b_ptr, c_ptr, bias_ptr),
                    syms, ir.Constant(I64, 0), shape.extent(mode), batch_positions, strided)
        return
    mode = "batch" if shape.batch else _split(node)
    extent = shape.extent(mode)
    macs = b.mul(b.mul(b.mul(shape.m, shape.n), shape.k), shape.count)
    units, block = _units(b, extent, macs, mode)
    # a, b, c, syms, units, block, next unit (shared counter), bias (or null)
    layout = parallel.Layout(ir.LiteralStructType([PTR, PTR, PTR, PTR, I64, I64, I64, PTR]))
    task = _emit_task(program, node, calls, mode, layout, name, batch_positions,
                      bias_ptr is not None, strided)
    data = entry_alloca(b, layout.type, "gemm.team.data")
    bias = ir.Constant(PTR, None) if bias_ptr is None else bias_ptr
    for k, v in enumerate([a_ptr, b_ptr, c_ptr, syms, units, block, ir.Constant(I64, 0), bias]):
        b.store(v, layout.address(b, data, k))
    team = kp.emit_team_size(b, b.load(kp.threads_global(b.module), typ=I32), units)
    with b.if_else(b.icmp_signed(">", team, ir.Constant(I32, 1))) as (on_team, alone):
        with on_team:
            b.call(kp.parallel_fn(b.module), [task, data, team])
        with alone:
            b.call(task, [data])


def _split(node):
    """"cols" or "rows": each unit packs its block of one operand and all of the other,
    so split the side whose whole operand is the smaller one to repack (at the hints)."""
    out = node.outputs[0]
    m, n = _hint(out.dims[-2]), _hint(out.dims[-1])
    return "cols" if m <= n else "rows"


class _Shape:
    """m, n, k and the batch count of a product, as i64 values of the function."""

    def __init__(self, b, program, node, syms):
        a, _ = node.inputs
        out = node.outputs[0]
        ta, _ = transposes(node)
        dim = lambda d: program.emit_dim(b, d, syms)  # noqa: E731
        self.m, self.n = dim(out.dims[-2]), dim(out.dims[-1])
        self.k = dim(a.dims[-2] if ta else a.dims[-1])
        self.batch = out.dims[:-2]
        self.count = ir.Constant(I64, 1)
        for d in self.batch:
            self.count = b.mul(self.count, dim(d))

    def extent(self, mode):
        return {"cols": self.n, "rows": self.m, "batch": self.count}[mode]


def _units(b, extent, macs, mode):
    """(units, block) of a product whose cut side has `extent` rows, columns or batch
    entries: min(macs / UNIT_MACS, extent / MIN_BLOCK (1 for "batch"), MAX_UNITS) units,
    at least 1, of `block` entries each (the last one fewer), block a multiple of ALIGN
    unless cut by the batch; i64 values of the run-time sizes."""
    one = ir.Constant(I64, 1)
    least = lambda x, y: b.select(b.icmp_signed("<", x, y), x, y)  # noqa: E731
    units = least(b.udiv(macs, ir.Constant(I64, UNIT_MACS)), ir.Constant(I64, MAX_UNITS))
    if mode != "batch":
        units = least(units, b.udiv(extent, ir.Constant(I64, MIN_BLOCK)))
    units = b.select(b.icmp_signed("<", units, one), one, units)
    block = parallel.ceil_div(b, extent, units)
    if mode != "batch":
        block = b.mul(parallel.ceil_div(b, block, ir.Constant(I64, ALIGN)),
                      ir.Constant(I64, ALIGN))
    block = parallel.at_least_one(b, block)
    return parallel.ceil_div(b, extent, block), block


def _emit_task(program, node, calls, mode, layout, name, batch_positions, has_bias,
               strided):
    module = program.llvm
    fn = ir.Function(module, kp.TASK_TYPE, f"{name}.gemm.task")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = fn.args[0]
    load = lambda k: layout.load(b, data, k)  # noqa: E731
    a_ptr, b_ptr, c_ptr, syms, units, block = (load(k) for k in range(6))
    counter = layout.address(b, data, 6)
    bias_ptr = load(7) if has_bias else None
    shape = _Shape(b, program, node, syms)
    with claim_loop(b, counter, units) as u:
        lo = b.mul(u, block)
        hi = b.add(lo, block)
        extent = shape.extent(mode)
        hi = b.select(b.icmp_signed("<", hi, extent), hi, extent)
        _emit_units(b, program, node, calls, shape, mode, (a_ptr, b_ptr, c_ptr, bias_ptr),
                    syms, lo, hi, batch_positions, strided)
    kp.count_task(b)
    b.ret_void()
    return fn


def _emit_units(b, program, node, calls, shape, mode, pointers, syms, lo, hi,
                batch_positions, strided=None):
    """The BLAS call(s) for [lo, hi) of the mode's extent (rows of C, columns, or batch).
    calls: the _EntryCalls; pointers: A, B, C and the bias (None, or a MatMul's: see
    _fill_bias); strided: a _StridedBatch for a product with views (batch mode)."""
    a_ptr, b_ptr, c_ptr, bias_ptr = pointers
    a, bv = node.inputs
    dtype = node.outputs[0].dtype.name
    ta, tb = transposes(node)
    m, n, k = shape.m, shape.n, shape.k
    elem = calls.elem
    gemm_fn = calls.gemm_fn
    at = lambda p, offset: b.gep(p, [offset], source_etype=elem)  # noqa: E731
    lds = (m if ta else k, k if tb else n, n)
    if strided is not None:
        strided.emit(b, calls, shape, (a_ptr, b_ptr, c_ptr), lo, hi)
        return
    if mode == "batch":
        dim = lambda d: program.emit_dim(b, d, syms)  # noqa: E731
        a_size = b.mul(dim(a.dims[-2]), dim(a.dims[-1]))
        b_size = b.mul(dim(bv.dims[-2]), dim(bv.dims[-1]))
        with for_range(b, hi, start=lo, name="batch") as index:
            a_at, b_at = batch_positions(b, index, shape.batch, a.dims[:-2], bv.dims[:-2], dim)
            calls.emit(b, shape, at(a_ptr, b.mul(a_at, a_size)),
                       at(b_ptr, b.mul(b_at, b_size)), at(c_ptr, b.mul(index, b.mul(m, n))))
        return
    size = b.sub(hi, lo)
    beta = 0.0 if bias_ptr is None else 1.0
    if mode == "cols":   # C[:, lo:hi] = op(A) @ op(B)[:, lo:hi]
        if bias_ptr is not None:
            _fill_bias(b, elem, bias_ptr, c_ptr, ir.Constant(I64, 0), m, lo, size, n)
        gemm.call_gemm(b, gemm_fn, dtype, ta, tb, m, size, k, a_ptr,
                       at(b_ptr, b.mul(lo, k) if tb else lo), at(c_ptr, lo), beta=beta,
                       lds=lds)
    else:                # C[lo:hi, :] = op(A)[lo:hi, :] @ op(B)
        if bias_ptr is not None:
            _fill_bias(b, elem, bias_ptr, c_ptr, lo, hi, ir.Constant(I64, 0), n, n)
        gemm.call_gemm(b, gemm_fn, dtype, ta, tb, size, n, k,
                       at(a_ptr, lo if ta else b.mul(lo, k)), b_ptr, at(c_ptr, b.mul(lo, n)),
                       beta=beta, lds=lds)


def _fill_bias(b, elem, bias_ptr, c_ptr, row_lo, row_hi, col, cols, n):
    """C[row_lo:row_hi, col:col+cols] = bias[col:col+cols], row by row: the block the next
    BLAS call adds its product into (beta = 1), so the bias costs no pass over C."""
    nbytes = b.mul(cols, ir.Constant(I64, 8 if isinstance(elem, ir.DoubleType) else 4))
    memcpy = b.module.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)]),
        "llvm.memcpy.p0.p0.i64")
    src = b.gep(bias_ptr, [col], source_etype=elem)
    with for_range(b, row_hi, start=row_lo, name="bias.row") as row:
        dst = b.gep(c_ptr, [b.add(b.mul(row, n), col)], source_etype=elem)
        b.call(memcpy, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])


class _EntryCalls:
    """How one batch entry's product is emitted: a BLAS call, or a call of the entry
    function of batch_tiles.py (whose strides are static, in the function)."""

    def __init__(self, node, gemm_fn, entry):
        self.dtype = node.outputs[0].dtype.name
        self.transposes = transposes(node)
        self.gemm_fn, self.entry = gemm_fn, entry
        self.elem = kd.memory_type(self.dtype)

    def emit(self, b, shape, a_at, b_at, c_at, lds=None):
        if self.entry is not None:
            b.call(self.entry, [a_at, b_at, c_at])
            return
        gemm.call_gemm(b, self.gemm_fn, self.dtype, *self.transposes, shape.m, shape.n,
                       shape.k, a_at, b_at, c_at, lds=lds)


def _hint(d):
    return d.hint if hasattr(d, "hint") else int(d)


class _StridedBatch:
    """The BLAS calls of batch entries [lo, hi) of a product whose operands or result are
    strided views (static dims): entry i's matrices start at the offsets of its batch
    coordinates (broadcast as in numpy) and their rows are the views' second-to-last
    strides apart, so a transposed operand or result needs no copy."""

    def __init__(self, node, strides):
        a, bv = node.inputs
        out = node.outputs[0]
        self.batch = [int(d) for d in out.dims[:-2]]
        self.operands = [([int(d) for d in v.dims],
                          s if s is not None else row_major_strides(v.dims))
                         for v, s in zip((a, bv, out), strides)]

    def emit(self, b, calls, shape, pointers, lo, hi):
        elem = calls.elem
        lds = [ir.Constant(I64, s[-2]) for _, s in self.operands]
        with for_range(b, hi, start=lo, name="batch") as index:
            coords, rest = [], index
            for d in reversed(self.batch):
                coords.append(b.urem(rest, ir.Constant(I64, d)))
                rest = b.udiv(rest, ir.Constant(I64, d))
            coords = coords[::-1]
            at = [b.gep(p, [self._offset(b, coords, dims, s)], source_etype=elem)
                  for p, (dims, s) in zip(pointers, self.operands)]
            calls.emit(b, shape, *at, lds=lds)

    def _offset(self, b, coords, dims, strides):
        offset = ir.Constant(I64, 0)
        lead = len(coords) - (len(dims) - 2)
        for i, d in enumerate(dims[:-2]):
            if d != 1:
                offset = b.add(offset, b.mul(coords[lead + i], ir.Constant(I64, strides[i])))
        return offset
