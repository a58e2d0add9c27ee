"""The tiled matmul template: C[b] = op(A[b]) @ op(B[b]) through shared-memory tiles.

One block of THREADS threads computes a TILE x TILE tile of C, each thread a 4 x 4
micro-tile (rows ty + 16 i, columns tx + 16 j: consecutive threads store consecutive
columns). Per step of DEPTH along the inner dimension:

    threads: load the A and B tiles into shared memory, consecutive threads reading
             consecutive addresses whichever operand is transposed; zeros outside
    barrier
    threads: acc[i][j] = fma(As[kk][row i], Bs[kk][column j], acc[i][j]) for kk < DEPTH
    barrier

The accumulators live across the barriers in private slots (registers in PTX, arrays
indexed by thread in the emulation). Blocks stride over the output tiles of every batch
entry (the grid is a plain number of tiles, capped). Batch dims broadcast as in numpy
(loops/products.batch_positions, the CPU's rule too). The epilogue (bias add,
activation) is a second launch: the epilogue nests the CPU gemm kernel emits too, through
the loop template, reading the product back in place. Other dtypes than GEMM_DTYPES
(integer products) are not tiled: kinds.py plans them as loop kernels.
"""
from llvmlite import ir

from graphc.compiler.backends.gpu.loop import grid_stride_loop
from graphc.compiler.loops.products import batch_positions, transposes
from kernels import dtypes as kd
from kernels.loops import I64, for_range

TILE = 64        # C tile: TILE x TILE
DEPTH = 16       # inner-dimension step held in shared memory
THREADS = 256    # 16 x 16 threads, each a MICRO x MICRO micro-tile
MICRO = TILE // 16
GEMM_DTYPES = ("float32", "float64")  # the products this template computes


def _c(v):
    return ir.Constant(I64, v)


def emit_gemm_launch(t, program, layout, scalar_ops):
    node = layout.details["node"]
    a_val, b_val = node.inputs
    out = node.outputs[0]
    ta, tb = transposes(node)
    c_ptr, a_ptr, b_ptr = (t.args[layout.storages.index(k)] for k in layout.details["keys"])
    b = t.b
    dim = lambda d: program.emit_dim(b, d, t.syms)  # noqa: E731
    m, n = dim(out.dims[-2]), dim(out.dims[-1])
    k = dim(a_val.dims[-2] if ta else a_val.dims[-1])
    batch = list(out.dims[:-2])
    count = _c(1)
    for d in batch:
        count = b.mul(count, dim(d))
    tiles_m = b.udiv(b.add(m, _c(TILE - 1)), _c(TILE))
    tiles_n = b.udiv(b.add(n, _c(TILE - 1)), _c(TILE))
    per_batch = b.mul(tiles_m, tiles_n)
    ty = kd.llvm_type(out.dtype.name)
    a_tile = t.shared(ty, DEPTH * TILE, "a_tile")
    b_tile = t.shared(ty, DEPTH * TILE, "b_tile")
    acc = [[t.private(ty, f"acc{i}{j}") for j in range(MICRO)] for i in range(MICRO)]
    zero = ir.Constant(ty, 0.0)
    with grid_stride_loop(b, t.ctaid, t.nctaid, b.mul(count, per_batch), "tile") as tile:
        index = b.udiv(tile, per_batch)
        rest = b.urem(tile, per_batch)
        m0 = b.mul(b.udiv(rest, tiles_n), _c(TILE))
        n0 = b.mul(b.urem(rest, tiles_n), _c(TILE))
        a_at, b_at = (batch_positions(b, index, batch, a_val.dims[:-2], b_val.dims[:-2], dim)
                      if batch else (_c(0), _c(0)))
        a_base = b.gep(a_ptr, [b.mul(a_at, b.mul(m, k))], source_etype=ty)
        b_base = b.gep(b_ptr, [b.mul(b_at, b.mul(k, n))], source_etype=ty)
        c_base = b.gep(c_ptr, [b.mul(index, b.mul(m, n))], source_etype=ty)
        with t.threads() as tid:
            for row in acc:
                for slot in row:
                    b.store(zero, slot.at(tid))
        t.barrier()
        steps = b.udiv(b.add(k, _c(DEPTH - 1)), _c(DEPTH))
        with for_range(b, steps, name="kstep") as step:
            k0 = b.mul(step, _c(DEPTH))
            with t.threads() as tid:
                # A as [rows = m, inner = k]: element (r, kk) at r*K + kk, or kk*M + r
                # both operands as X[outer, k]: A[m, k] (stored [k, m] if ta), B^T[n, k]
                _load_tile(t, tid, a_base, a_tile, ty, m0, k0, m, k, transposed=ta)
                _load_tile(t, tid, b_base, b_tile, ty, n0, k0, n, k, transposed=not tb)
            t.barrier()
            with t.threads() as tid:
                _multiply(t, tid, a_tile, b_tile, acc, ty)
            t.barrier()
        with t.threads() as tid:
            _store_tile(t, tid, c_base, acc, ty, m0, n0, m, n)
        t.barrier()


def _load_tile(t, tid, base, tile, ty, outer0, k0, outer_n, k, transposed):
    """tile[kk * TILE + r] = X[outer0 + r, k0 + kk] (0 outside), X stored [outer, k]
    (row-major, `transposed` False) or [k, outer]. Consecutive threads take consecutive
    addresses of X: the fastest index is k when X is [outer, k], r when [k, outer]."""
    b = t.b
    with grid_stride_loop(b, tid, t.ntid, _c(DEPTH * TILE), "e") as e:
        if transposed:   # X is [k, outer]: r fastest
            kk, r = b.udiv(e, _c(TILE)), b.urem(e, _c(TILE))
        else:            # X is [outer, k]: kk fastest
            r, kk = b.udiv(e, _c(DEPTH)), b.urem(e, _c(DEPTH))
        row, col = b.add(outer0, r), b.add(k0, kk)
        inside = b.and_(b.icmp_signed("<", row, outer_n), b.icmp_signed("<", col, k))
        position = b.add(b.mul(col, outer_n), row) if transposed else \
            b.add(b.mul(row, k), col)
        position = b.select(inside, position, _c(0))  # never read out of bounds
        value = b.load(b.gep(base, [position], source_etype=ty), typ=ty)
        value = b.select(inside, value, ir.Constant(ty, 0.0))
        b.store(value, b.gep(tile, [b.add(b.mul(kk, _c(TILE)), r)], source_etype=ty))


def _multiply(t, tid, a_tile, b_tile, acc, ty):
    b = t.b
    inside = b.icmp_signed("<", tid, _c(THREADS))
    fma = b.module.declare_intrinsic("llvm.fma", [ty], ir.FunctionType(ty, [ty] * 3))
    with b.if_then(inside):
        tyi, txi = b.udiv(tid, _c(16)), b.urem(tid, _c(16))
        with for_range(b, _c(DEPTH), name="kk") as kk:
            base = b.mul(kk, _c(TILE))
            a = [b.load(b.gep(a_tile, [b.add(base, b.add(tyi, _c(16 * i)))], source_etype=ty),
                        typ=ty) for i in range(MICRO)]
            bs = [b.load(b.gep(b_tile, [b.add(base, b.add(txi, _c(16 * j)))],
                               source_etype=ty), typ=ty) for j in range(MICRO)]
            for i in range(MICRO):
                for j in range(MICRO):
                    slot = acc[i][j].at(tid)
                    b.store(b.call(fma, [a[i], bs[j], b.load(slot, typ=ty)]), slot)


def _store_tile(t, tid, c_base, acc, ty, m0, n0, m, n):
    b = t.b
    with b.if_then(b.icmp_signed("<", tid, _c(THREADS))):
        tyi, txi = b.udiv(tid, _c(16)), b.urem(tid, _c(16))
        for i in range(MICRO):
            row = b.add(m0, b.add(tyi, _c(16 * i)))
            for j in range(MICRO):
                col = b.add(n0, b.add(txi, _c(16 * j)))
                inside = b.and_(b.icmp_signed("<", row, m), b.icmp_signed("<", col, n))
                with b.if_then(inside):
                    ptr = b.gep(c_base, [b.add(b.mul(row, n), col)], source_etype=ty)
                    b.store(b.load(acc[i][j].at(tid), typ=ty), ptr)
