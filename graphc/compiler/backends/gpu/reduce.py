"""The row template: one block per row, its threads sharing the row's reductions.

For a nest whose rows (the loops down to launches.flat_depth) need reductions over long
rows (a softmax's max and sum, a layer norm's moments, a row sum or argmax, a filter
gradient's sum over the batch), each block takes rows ctaid, ctaid + nctaid, ... and,
per row:

    for each row reduction R (innermost first: a softmax's sum needs its max):
        threads: partial = fold of R's body at j = tid, tid + ntid, ...   (coalesced)
        warp: for k = 16, 8, 4, 2, 1: shuffle down by k (shfl.sync.down; t.shuffle_down)
                 threads: lane + k < lanes of the warp: partial (+)= shuffled partial
        threads: lane 0 of warp w: shared[w] = partial; barrier      (blocks > 32 only)
        threads: partial = shared[tid] for tid < the block's warps
        warp: the same shuffles over the block's warps (k below their number): every
              warp runs them (shuffles are uniform code), the first one's lane 0 has R
        threads: thread 0 copies its partial to the row's results[R]; barrier
    threads: the row's elements j = tid, tid + ntid, ... are stored, every thread
             reading the row's results (or, for a row result alone, thread 0 stores it)
    barrier (the next row reuses the shared arrays)

So a row reduction costs two barriers whatever the block size (the shared-memory tree
took one per halving). Blocks that are not a multiple of 32 threads (and blocks below
32: the emulation runs any launch) need no fallback: the shuffle's mask and clamp are
those of the warp's threads (threads.py), a lane whose source lane does not exist keeps
its own value and does not combine it (the `lane + k < lanes` test), so lane 0 folds
exactly the lanes that exist. An argmax/argmin carries (value, position) through the
shuffles (i64 and f64 as two 32-bit halves).

Values are computed by the loop layer's emitter (the same views and scalar ops); a region
starts a fresh emitter whose cache holds the results known so far, loaded from shared
memory. Folds use kernels.loops' combine_reduction and arg_better, so NaN propagates as
on the CPU (max/min through llvm.maximum/minimum; argmax/argmin: the first NaN wins,
ties go to the smallest index, whatever thread saw it).
"""
from llvmlite import ir

from graphc.compiler.backends.gpu.loop import grid_stride_loop, make_emitter, report_errors
from graphc.compiler.backends.gpu.launches import flat_depth, loaded_elsewhere, nest_roots
from graphc.compiler.backends.gpu.threads import WARP
from graphc.compiler.loops.emitter import targets_by_level
from kernels import dtypes as kd
from kernels.loops import (I32, I64, arg_better, combine_reduction, entry_alloca,
                           reduction_identity)

MIN_ROW = 64   # shorter reductions stay in one thread (the grid-stride loop template)


def row_reductions(nest, views):
    """The reductions computed once per row of `nest`, innermost first, or None when the
    nest is not a row nest (see the module doc)."""
    if loaded_elsewhere(nest) or any(t.accumulate for t in nest.targets):
        return None
    depth = flat_depth(nest)
    row_ids = {v.id for v in nest.vars[:depth + 1] if v is not None}
    found = [e for e in _post_order(nest_roots(nest))
             if e.kind in ("reduce", "argreduce") and e.free <= row_ids]
    if not found or not any(_length(e, views) is None or _length(e, views) >= MIN_ROW
                            for e in found):
        return None
    by_level = targets_by_level(nest)
    if any(depth < lv < max(by_level) for lv in by_level):
        return None
    return found


def _post_order(roots):
    order, seen, stack = [], set(), [(e, False) for e in roots]
    while stack:
        e, done = stack.pop()
        if done:
            order.append(e)
        elif id(e) not in seen:
            seen.add(id(e))
            stack.append((e, True))
            stack.extend((a, False) for a in e.args)
    return order


def _reduce_ids(e):
    return e.data[1] if e.kind == "reduce" else (e.data[1],)


def _length(e, views):
    """The constant number of elements a reduction folds, or None (a run-time dim)."""
    n = 1
    for var_id in _reduce_ids(e):
        extent = views.x.vars[var_id].extent
        if not extent.is_const:
            return None
        n *= views.x.const_value(extent)
    return n


def row_block(nest, reductions, views, block):
    """Threads per block: the reductions' length rounded up to a warp multiple, at most
    `block` (short rows leave no threads idle)."""
    lengths = [_length(e, views) for e in reductions]
    if None in lengths:
        return block
    return max(32, min(block, (max(lengths) + 31) // 32 * 32))


def row_count(nest):
    depth = flat_depth(nest)
    rows = 1
    for v, d in zip(nest.vars[:depth + 1], nest.dims):
        if v is not None:
            rows = rows * d
    return rows


def emit_row_launch(t, program, layout, scalar_ops):
    (nest,) = layout.nests
    reductions = layout.details["reductions"]
    block = layout.block
    b = t.b
    buffers = dict(zip(layout.storages, t.args))
    depth = flat_depth(nest)
    row_vars = [v for v in nest.vars[:depth + 1] if v is not None]
    results = [t.shared(kd.llvm_type(e.dtype), 1, "result") for e in reductions]
    warps = (block + WARP - 1) // WARP
    values, slots = {}, {}
    for e in reductions:
        ty = kd.llvm_type(e.dtype if e.kind == "reduce" else e.args[0].dtype)
        if ty not in values:
            values[ty] = t.shared(ty, warps, "partials")
            slots[ty] = _Slots(t, ty, "partial")
    argreduce = any(e.kind == "argreduce" for e in reductions)
    where = t.shared(I64, warps, "where") if argreduce else None
    slots["position"] = _Slots(t, I64, "position") if argreduce else None

    def emitter(row_values, known):
        em = make_emitter(t, program, layout.views, buffers, scalar_ops)
        for v, value in row_values:
            em.var_values[v.id] = value
            em.defined.add(v.id)
        for k in range(known):
            em.scopes[0][reductions[k]] = b.load(_at(b, results[k], 0, _ty(reductions[k])),
                                                 typ=_ty(reductions[k]))
        return em

    extents = _row_extents(t, program, layout, row_vars)
    rows = ir.Constant(I64, 1)
    for e in extents:
        rows = b.mul(rows, e)
    with grid_stride_loop(b, t.ctaid, t.nctaid, rows, "row") as row:
        row_values = delinearize(b, row, row_vars, extents)
        for k, e in enumerate(reductions):
            ty = kd.llvm_type(e.dtype if e.kind == "reduce" else e.args[0].dtype)
            _emit_row_reduction(t, e, slots, values[ty], where, results[k], block,
                                lambda: emitter(row_values, k))
        with t.threads() as tid:
            em = emitter(row_values, len(reductions))
            _emit_row_elements(t, em, nest, depth, tid)
            report_errors(t, em)
        t.barrier()


def _ty(e):
    return kd.llvm_type(e.dtype)


def _at(b, array, index, ty):
    index = ir.Constant(I64, index) if isinstance(index, int) else index
    return b.gep(array, [index], source_etype=ty)


def _row_extents(t, program, layout, row_vars):
    em = make_emitter(t, program, layout.views, {}, None)
    return [em.value(v.extent) for v in row_vars]


def delinearize(b, index, loop_vars, extents):
    out, rest = [], index
    for k in range(len(loop_vars) - 1, -1, -1):
        out.append((loop_vars[k], b.urem(rest, extents[k]) if k else rest))
        rest = b.udiv(rest, extents[k])
    return out


def _emit_row_reduction(t, e, slots, partials, where, result, block, new_emitter):
    """One row reduction: thread partials, warp shuffles, per-warp partials in shared
    memory, one barrier, warp shuffles over those in every warp (the first one's count),
    thread 0 stores the result (see the module doc)."""
    b = t.b
    kind = e.data[0]
    body = e.args[0]
    arg = e.kind == "argreduce"
    ty = kd.llvm_type(body.dtype if arg else e.dtype)
    is_float, signed = kd.is_float(body.dtype), not kd.is_unsigned(body.dtype)
    value, position = slots[ty], slots["position"] if arg else None

    def store_result(tid):  # thread 0 (lane 0 of the first warp) holds R
        with b.if_then(b.icmp_signed("==", tid, _c(0))):
            final = position if arg else value
            b.store(b.load(final.mine.at(tid), typ=final.mine.ty), _at(b, result, 0, _ty(e)))

    with t.threads() as tid:
        em = new_emitter()
        v, i = _thread_partial(t, em, e, tid, ty, is_float, signed)
        b.store(v, value.mine.at(tid))
        if arg:
            b.store(i, position.mine.at(tid))
        report_errors(t, em)
        if block == 1:
            store_result(tid)
    if block == 1:
        t.barrier()
        return
    fold = _WarpFold(t, e, kind, ty, is_float, signed, value, position)
    if block <= WARP:
        fold.run(block, lambda tid: t.warp_lanes(tid)[1], store_result)
        t.barrier()
        return
    warps = (block + WARP - 1) // WARP

    def store_warp_partial(tid):
        with b.if_then(b.icmp_signed("==", t.warp_lanes(tid)[0], _c(0))):
            warp = b.lshr(tid, _c(5))
            b.store(b.load(value.mine.at(tid), typ=ty), _at(b, partials, warp, ty))
            if arg:
                b.store(b.load(position.mine.at(tid), typ=I64), _at(b, where, warp, I64))

    fold.run(WARP, lambda tid: t.warp_lanes(tid)[1], store_warp_partial)
    t.barrier()
    with t.threads() as tid:
        b.store(ir.Constant(ty, None) if arg else
                reduction_identity(kind, ty, is_float, signed), value.mine.at(tid))
        if arg:
            b.store(_c(-1), position.mine.at(tid))
        with b.if_then(b.icmp_signed("<", tid, block_warps(t))):
            b.store(b.load(_at(b, partials, tid, ty), typ=ty), value.mine.at(tid))
            if arg:
                b.store(b.load(_at(b, where, tid, I64), typ=I64), position.mine.at(tid))
    fold.run(warps, lambda tid: block_warps(t), store_result)
    t.barrier()


def _c(v):
    return ir.Constant(I64, v)


def block_warps(t):
    """The number of warps of the block (the last one maybe partial)."""
    return t.b.lshr(t.b.add(t.ntid, _c(WARP - 1)), _c(5))


class _Slots:
    """A private slot of a reduction's partial and the one a shuffle fills."""

    def __init__(self, t, ty, name):
        self.mine = t.private(ty, name)
        self.got = t.private(ty, name + ".shuffled")


class _WarpFold:
    """Folds each warp's first `count` lanes into its lane 0 with shuffles: at offsets
    16, 8, ..., 1, lane l combines lane l + offset when l + offset < count (the lanes
    beyond hold nothing: past a partial warp, or past the block's warps)."""

    def __init__(self, t, e, kind, ty, is_float, signed, value, position):
        self.t, self.e, self.kind, self.ty = t, e, kind, ty
        self.is_float, self.signed = is_float, signed
        self.value, self.position = value, position

    def run(self, lanes, count, then):
        """lanes: most lanes that can hold a partial (> 1); count(tid): how many do
        (i64); then(tid): emitted at the end of the last region (a thread reading its own
        slots only: no barrier needed before it)."""
        t, b, ty = self.t, self.t.b, self.ty
        pairs = [self.value] + ([self.position] if self.position else [])
        offsets = [k for k in (16, 8, 4, 2, 1) if k < lanes]
        assert offsets, lanes
        for offset in offsets:
            t.shuffle_down([p.mine for p in pairs], offset, [p.got for p in pairs])
            with t.threads() as tid:
                lane = b.trunc(t.warp_lanes(tid)[0], I32)  # (i32: fewer registers)
                present = b.icmp_unsigned("<", b.add(lane, ir.Constant(I32, offset)),
                                          b.trunc(count(tid), I32))
                with b.if_then(present):
                    va = b.load(self.value.mine.at(tid), typ=ty)
                    vb = b.load(self.value.got.at(tid), typ=ty)
                    if self.position is None:
                        b.store(combine_reduction(b, self.kind, va, vb, self.is_float,
                                                  self.signed), self.value.mine.at(tid))
                    else:
                        ia = b.load(self.position.mine.at(tid), typ=I64)
                        ib = b.load(self.position.got.at(tid), typ=I64)
                        v, i = _arg_combine(b, self.kind, va, ia, vb, ib, self.is_float,
                                            self.signed)
                        b.store(v, self.value.mine.at(tid))
                        b.store(i, self.position.mine.at(tid))
                if offset == offsets[-1]:
                    then(tid)


def _thread_partial(t, em, e, tid, ty, is_float, signed):
    """(this thread's fold over j = tid, tid + ntid, ... of e's body, its position or
    None); an argreduce's position is -1 when the thread saw no element."""
    b = t.b
    kind = e.data[0]
    ids = _reduce_ids(e)
    loop_vars = [em.x.vars[i] for i in ids]
    extents = [em.value(v.extent) for v in loop_vars]
    total = extents[0]
    for x in extents[1:]:
        total = b.mul(total, x)
    acc = entry_alloca(b, ty, "partial")
    pos = entry_alloca(b, I64, "position")
    arg = e.kind == "argreduce"
    b.store(ir.Constant(ty, None) if arg else reduction_identity(kind, ty, is_float, signed),
            acc)
    b.store(ir.Constant(I64, -1), pos)
    with grid_stride_loop(b, tid, t.ntid, total, "j") as j:
        for v, value in delinearize(b, j, loop_vars, extents):
            em.var_values[v.id] = value
            em.defined.add(v.id)
        em.scopes.append({})
        em.hoist([e.args[0]])
        x = em.value(e.args[0])
        em.scopes.pop()
        old = b.load(acc, typ=ty)
        if arg:
            take = b.or_(b.icmp_signed("<", b.load(pos, typ=I64), ir.Constant(I64, 0)),
                         arg_better(b, kind, x, old, is_float, signed))
            b.store(b.select(take, x, old), acc)
            b.store(b.select(take, j, b.load(pos, typ=I64)), pos)
        else:
            b.store(combine_reduction(b, kind, old, x, is_float, signed), acc)
        for v in loop_vars:
            em.defined.discard(v.id)
    return b.load(acc, typ=ty), (b.load(pos, typ=I64) if arg else None)


def _arg_combine(b, kind, va, ia, vb, ib, is_float, signed):
    """(value, position) of two argmax/argmin partials; a position < 0 is no element.
    b wins when it is better, or equal (neither better: also both NaN) at a smaller
    position: the first index wins ties, the first NaN wins, whichever order."""
    zero = _c(0)
    b_better = arg_better(b, kind, vb, va, is_float, signed)
    tie = b.and_(b.not_(arg_better(b, kind, va, vb, is_float, signed)),
                 b.icmp_signed("<", ib, ia))
    take = b.and_(b.icmp_signed(">=", ib, zero),
                  b.or_(b.icmp_signed("<", ia, zero), b.or_(b_better, tie)))
    return b.select(take, vb, va), b.select(take, ib, ia)


def _emit_row_elements(t, em, nest, depth, tid):
    """This thread's share of the row's stores (all vars of the row set in em)."""
    b = t.b
    by_level = targets_by_level(nest)
    deepest = max(by_level)
    if deepest == depth:
        with b.if_then(b.icmp_signed("==", tid, ir.Constant(I64, 0))):
            em.scopes.append({})
            _store_all(em, by_level[depth])
            em.scopes.pop()
        return
    inner = [v for v in nest.vars[depth + 1:deepest + 1] if v is not None]
    extents = [em.value(v.extent) for v in inner]
    total = extents[0]
    for x in extents[1:]:
        total = b.mul(total, x)
    with grid_stride_loop(b, tid, t.ntid, total, "e") as j:
        for v, value in delinearize(b, j, inner, extents):
            em.var_values[v.id] = value
            em.defined.add(v.id)
        em.scopes.append({})
        _store_all(em, by_level[deepest])
        em.scopes.pop()


def _store_all(em, targets):
    em.hoist([e for t in targets for e in (t.expr, t.position)])
    values = [(t, em.value(t.expr), em.value(t.position)) for t in targets]
    for t, value, position in values:
        em.store_target(t, value, position)
