"""Large loop nests run on all cores: the outermost loop of a nest split across a team.

A loop kernel's nest (loop_kernel.py) whose outermost loop is safe to split becomes

    body(ptr noalias buf..., ptr syms, i64 lo, i64 hi, ptr details, values...) -> i32
        the nest's loops with the outermost one running over [lo, hi) only
    task(ptr data)
        claims chunks of range(n) from a shared counter (atomic add) until none are left
        and runs body(...) on each; keeps its first failure (status, chunk start)
    kernel: ... fills `data` (the buffers, syms, n, chunk size, the values hoisted above
        the loop); team = the module's thread setting (kernels/parallel.py
        THREADS_GLOBAL) when the nest's work (elements x expression cost, from the
        run-time dims) is at least MIN_WORK, else 1; runs task on the team (PARALLEL_FN)
        or calls it directly (one chunk: the whole loop); folds the threads' failures.

The body and the task stay two functions: LLVM's work follows the code, not the count of
functions. With each body made internal and alwaysinline (LLVM then inlines it into its
task and drops it: one function per split loop), resnet_train's graph module took 1.3%
more instructions in LLVM (callgrind: 4.88e9 vs 4.82e9, issue 11), not the ~6 ms per loop
that a task compiled alone in a module (tools/compile_time.py --llvm-functions) suggests.

Chunks are claimed, not assigned: CHUNKS_PER_THREAD per thread, so a thread that the OS
descheduled (other processes on the cores) holds up the team by one chunk, not by a
static half of the loop.

So every element is computed by the same code whatever the team size: results are
bit-identical with 1 or N threads. Reductions stay inside one thread: those hoisted to a
level inside the split loop (a softmax row max) are per iteration; those hoisted above it
(a full sum whose result every element uses) are computed once before the team starts and
passed in. Errors stay exact: a thread claims chunks in increasing order and records its
first failure with the chunk's start; the kernel takes the failure of the lowest chunk
(the body reports the first failure inside it), which is the first in the serial order.

Safe to split (else the nest is emitted as before, serial): every target stored inside
the loop has an index that depends on the split variable (no two threads write one
element), and a buffer the nest both stores and loads is only loaded at the positions it
stores (an in-place update: `v = v - lr * g`), not elsewhere (a scan reading its previous
row), and no target is a scatter (its element is read from memory: two iterations may
name one element). The one exception is a *fold*: accumulating targets whose index does
not depend on the split variable (a column sum such as a bias gradient folds every row into the same
elements), when nothing else in the nest stores or loads their buffer. A nest with folds
is cut into a number of chunks fixed by its size alone (at most FOLD_CHUNKS, and at most
FOLD_BYTES of partial results), never by the team: chunk c folds into its own partial
buffer (filled with the reduction's identity), and after the team the partials are folded
into the target in chunk order. So folds too give the same bits with 1 or N threads (not
the bits of the serial loop: the summation order is by chunk).
A scatter (its targets' positions read memory) whose one target names the row of each
element (StoreTarget.row: a row scatter, a gather's gradient along axis 0) is split by
*windows of rows* instead: chunk c owns the rows [lo, hi) of the target, runs the whole
loop over the updates, checks every index as the serial loop does, and stores only the
updates whose row it owns, skipping the rest of their row at once. Each element then
receives its updates in the serial order, from one thread: the serial loop's bits, with
repeated indices too, whatever the team; a chunk costs one more pass over the indices,
so there is one chunk per thread.
Only emit_loop_function's nests are split (its kernel runs the nests at top level); the
BLAS call of a gemm kernel runs before its epilogue's team starts, never inside one, so
our threads and OpenBLAS's never compete for the cores.

GRAPHC_PARALLEL=0 in the environment turns the splitting off at codegen time;
GRAPHC_PARALLEL_MIN_WORK=0 splits every safe loop, however small (to test the splitting).
"""
import os

from llvmlite import ir

from graphc.compiler.loops.emitter import Emitter
from graphc.compiler.loops.expr import loaded_storages, walk
from kernels import dtypes as kd
from kernels import parallel as kp
from kernels.loops import (I32, I64, PTR, combine_reduction, entry_alloca, for_range,
                           reduction_identity)

# Nest work (elements x expression nodes) below which the team is not worth starting.
# Measured on the 2-core VM (an elementwise kernel of 12 nodes, ~7 units per ns serial):
# starting a team whose threads already sleep costs ~130-160 us there when another
# process holds the other core (~3 us while they still spin after a loop), so a team
# only pays for loops of ~300 us serial: 176k elements (2.1M units) ran in 155 us on 2
# threads vs 297 us on 1; 44k elements ran in 157 vs 75.
MIN_WORK = 1 << 21
# When the split loop is also the innermost (a flat elementwise kernel), chunks are whole
# blocks of this many elements: 64 floats = 4 cache lines, so threads never share a line.
INNERMOST_BLOCK = 64
CHUNKS_PER_THREAD = 4
# A nest is split only when it could reach MIN_WORK: its work at compile time when every
# dim is known, else its work at the hints (the unknown dims' sizes when compiled) times
# GROWTH (a batch this much larger). Splitting a nest costs ~5 ms of LLVM time, which small
# nests (a bias gradient, a 10-class row) never win back.
GROWTH = 16
# A nest with folds (see the module doc) is cut into at most this many chunks, each with
# its own partial result, and at most FOLD_BYTES of partial results in all.
FOLD_CHUNKS = 16
FOLD_BYTES = 8 << 20
_DEBUG = bool(os.environ.get("GRAPHC_PARALLEL_DEBUG"))
_COUNTED_KINDS = ("load", "load_one_of", "op", "select", "reduce", "argreduce", "check")


def min_work():
    """MIN_WORK, or GRAPHC_PARALLEL_MIN_WORK (tests set 0: every safe loop splits)."""
    env = os.environ.get("GRAPHC_PARALLEL_MIN_WORK", "")
    return int(env) if env.isdigit() else MIN_WORK


def enabled():
    return os.environ.get("GRAPHC_PARALLEL", "1").lower() not in ("0", "off", "false", "no")


class ParallelLoops:
    """Splits the outermost loops of one kernel function's nests (see module doc)."""

    def __init__(self, llvm_module, kernel_name):
        self.module = llvm_module
        self.kernel_name = kernel_name
        self.count = 0

    def emit_loop(self, em, nest, level, by_level, deepest):
        """Emits loop `level` of `nest` (its outermost loop) split across a team; returns
        False, emitting nothing, when the nest is not safe to split."""
        var = nest.vars[level]
        inside = [t for lv, ts in by_level.items() if lv >= level for t in ts]
        window = _row_window(em, nest, level, deepest, inside)
        reason = "no stores inside" if not inside else \
            None if window else _unsafe(nest, var, inside)
        terms = None
        if not reason:
            roots = [e for t in inside for e in (t.expr, t.position)]
            terms = _work_terms(em, nest, level, roots)
            at_hints, symbolic = _work_at_hints(em, terms)
            if at_hints * (GROWTH if symbolic else 1) < min_work():
                reason = f"too small ({at_hints} units{' at the hints' if symbolic else ''})"
        if _DEBUG:
            print(f"[graphc parallel] {self.kernel_name} nest {nest.key}: "
                  f"{reason or 'split'}")
        if reason:
            return False
        passed = [(e, v) for e, v in em.scopes[-1].items() if not isinstance(v, ir.Constant)]
        base = f"{self.kernel_name}.par{self.count}"
        self.count += 1
        storages = list(em.buffers)
        folds = [] if window else _folds(var, inside)
        body, has_errors = self._emit_body(em, nest, level, by_level, deepest, storages,
                                           passed, base, window)
        # data: buffers (a fold's: its partials), syms, n, chunk, next chunk (shared
        # counter), status, failures, the values hoisted above the loop, then the bytes
        # between two chunks' partials of each fold
        fields = [PTR] * len(storages) + [PTR, I64, I64, I64, PTR, PTR] + \
            [v.type for _, v in passed] + [I64] * len(folds)
        layout = Layout(ir.LiteralStructType(fields), len(storages), len(passed))
        fold_slots = [storages.index(f.storage) for f in folds]
        task = self._emit_task(body, has_errors, layout, base, fold_slots)
        self._emit_call(em, nest, level, var, terms, storages, passed, layout, task,
                        has_errors, folds, window)
        return True

    # ----------------------------------------------------------------- body
    def _emit_body(self, em, nest, level, by_level, deepest, storages, passed, base,
                   window=None):
        types = [PTR] * len(storages) + [PTR, I64, I64, PTR] + [v.type for _, v in passed]
        fn = ir.Function(self.module, ir.FunctionType(I32, types), base + ".body")
        fn.attributes.add("nounwind")
        for arg in fn.args[:len(storages)]:
            arg.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        n_buf = len(storages)
        syms, lo, hi, details = fn.args[n_buf:n_buf + 4]
        buffers = dict(zip(storages, fn.args[:n_buf]))
        if window:  # the whole loop, storing only into the rows [lo, hi)
            child = RowWindowEmitter(em, b, buffers, syms, window, lo, hi)
        else:
            child = em.fork(b, buffers, syms)
        for (e, _), arg in zip(passed, fn.args[n_buf + 4:]):
            child.scopes[0][e] = arg
        if window:
            child.emit_loop(nest, level, by_level, deepest)
        else:  # the chunk [lo, hi) of the loop, cut at a concatenation's pieces as a
            # loop run by one thread would be
            child.emit_loop(nest, level, by_level, deepest, lo, hi)
        if child.error_slot is None:
            b.ret(ir.Constant(I32, 0))
            return fn, False
        for k, slot in enumerate(child.detail_slots or ()):
            b.store(b.load(slot, typ=I64), b.gep(details, [ir.Constant(I64, k)],
                                                 source_etype=I64))
        b.ret(b.load(child.error_slot, typ=I32))
        return fn, True

    # ----------------------------------------------------------------- task
    def _emit_task(self, body, has_errors, layout, base, fold_slots=()):
        fn = ir.Function(self.module, kp.TASK_TYPE, base + ".task")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        data = fn.args[0]
        field = lambda k: layout.load(b, data, k)  # noqa: E731
        n_buf = layout.n_buf
        buffers = [field(k) for k in range(n_buf)]
        syms, n, chunk = field(n_buf), field(n_buf + 1), field(n_buf + 2)
        counter = layout.address(b, data, n_buf + 3, opaque=True)
        status, failures = field(n_buf + 4), field(n_buf + 5)
        values = [field(k) for k in range(n_buf + 6, n_buf + 6 + layout.n_passed)]
        fold_strides = [field(n_buf + 6 + layout.n_passed + k) for k in range(len(fold_slots))]
        tid = b.sext(b.call(kp.thread_num_fn(self.module), []), I64)
        scratch = my_status = None
        if has_errors:
            scratch = _entry_array(b, I64, _DETAILS, "par.scratch")
            my_status = entry_alloca(b, I32, "par.mystatus")
            b.store(ir.Constant(I32, 0), my_status)
            mine = b.gep(failures, [b.mul(tid, ir.Constant(I64, _FAILURE_SLOTS))],
                         source_etype=I64)
        chunks = b.udiv(b.add(n, b.sub(chunk, ir.Constant(I64, 1))), chunk)
        loop = b.append_basic_block("claim")
        work = b.append_basic_block("chunk")
        done = b.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        c = b.atomic_rmw("add", counter, ir.Constant(I64, 1), "monotonic")
        b.cbranch(b.icmp_signed("<", c, chunks), work, done)
        b.position_at_end(work)
        lo = b.mul(c, chunk)
        hi = b.add(lo, chunk)
        hi = b.select(b.icmp_signed("<", hi, n), hi, n)
        mine_now = list(buffers)
        for slot, stride in zip(fold_slots, fold_strides):  # chunk c's partials
            mine_now[slot] = b.gep(buffers[slot], [b.mul(c, stride)],
                                   source_etype=ir.IntType(8))
        rc = b.call(body, mine_now + [syms, lo, hi, scratch or ir.Constant(PTR, None)] +
                    values)
        if has_errors:  # keep this thread's first failure: its lowest failing chunk
            first = b.and_(b.icmp_signed("!=", rc, ir.Constant(I32, 0)),
                           b.icmp_signed("==", b.load(my_status, typ=I32),
                                         ir.Constant(I32, 0)))
            with b.if_then(first):
                b.store(rc, my_status)
                b.store(lo, mine)
                for k in range(_DETAILS):
                    got = b.load(b.gep(scratch, [ir.Constant(I64, k)]), typ=I64)
                    b.store(got, b.gep(mine, [ir.Constant(I64, k + 1)], source_etype=I64))
        b.branch(loop)
        b.position_at_end(done)
        if has_errors:
            b.store(b.load(my_status, typ=I32), b.gep(status, [tid], source_etype=I32))
        kp.count_task(b)
        b.ret_void()
        return fn

    # ----------------------------------------------------------------- call
    def _emit_call(self, em, nest, level, var, terms, storages, passed, layout, task,
                   has_errors, folds=(), window=None):
        b = em.b
        # windows of a variable of 0 rows: still one, which checks (and rejects) every index
        n = at_least_one(b, em.value(window.rows)) if window else em.value(var.extent)
        work = _work(em, terms)
        block = INNERMOST_BLOCK if all(v is None for v in nest.vars[level + 1:]) and \
            not window else 1
        size = ir.Constant(I64, block)
        blocks = b.udiv(b.add(n, ir.Constant(I64, block - 1)), size)
        want = b.load(kp.threads_global(self.module), typ=I32)
        team = kp.emit_team_size(b, want, blocks)
        big = b.icmp_signed(">=", work, ir.Constant(I64, min_work()))
        team = b.select(big, team, ir.Constant(I32, 1))
        # chunk: whole blocks, CHUNKS_PER_THREAD per thread; one chunk when serial
        per_thread = 1 if window else CHUNKS_PER_THREAD
        parts = b.mul(b.zext(team, I64), ir.Constant(I64, per_thread))
        parts = b.select(b.icmp_signed(">", team, ir.Constant(I32, 1)), parts,
                         ir.Constant(I64, 1))
        partials = []
        if folds:  # chunks fixed by the size alone (module doc), each with its partials
            partials = [FoldPartials(em, f) for f in folds]
            parts = fold_chunks(b, blocks, partials)
        chunk = b.mul(b.udiv(b.add(blocks, b.sub(parts, ir.Constant(I64, 1))), parts), size)
        chunk = b.select(b.icmp_signed(">", chunk, ir.Constant(I64, 0)), chunk, size)
        n_chunks = b.udiv(b.add(n, b.sub(chunk, ir.Constant(I64, 1))), chunk)
        for p in partials:
            p.allocate(n_chunks)

        data = entry_alloca(b, layout.type, "par.data")
        status = failures = ir.Constant(PTR, None)
        if has_errors:
            status = _entry_array(b, I32, kp.MAX_THREADS, "par.status")
            failures = _entry_array(b, I64, kp.MAX_THREADS * _FAILURE_SLOTS, "par.failures")
            with for_range(b, b.zext(team, I64), name="par.clear") as t:
                b.store(ir.Constant(I32, 0), b.gep(status, [t]))
        buffers = {p.fold.storage: p.base for p in partials}
        values = [buffers.get(s, em.buffers[s]) for s in storages] + \
            [em.syms, n, chunk, ir.Constant(I64, 0), status, failures] + \
            [v for _, v in passed] + [p.stride for p in partials]
        for k, v in enumerate(values):
            b.store(v, layout.address(b, data, k))
        parallel = b.append_basic_block(f"{task.name}.team")
        serial = b.append_basic_block(f"{task.name}.serial")
        joined = b.append_basic_block(f"{task.name}.joined")
        b.cbranch(b.icmp_signed(">", team, ir.Constant(I32, 1)), parallel, serial)
        b.position_at_end(parallel)
        b.call(kp.parallel_fn(self.module), [task, data, team])
        b.branch(joined)
        b.position_at_end(serial)
        b.call(task, [data])
        b.branch(joined)
        b.position_at_end(joined)
        for p in partials:
            p.fold_into_target(n_chunks)
        if has_errors:
            _fold_failures(em, status, failures, team)


_DETAILS = 8  # = loops.program.MAX_ERROR_DETAILS (a test checks)
_FAILURE_SLOTS = 1 + _DETAILS  # per thread: first failing chunk's start, its details


class Layout:
    """The data struct a task reads: field k's address and value (split loops here, and
    the conv and gemm teams)."""

    def __init__(self, type_, n_buf=0, n_passed=0):
        self.type = type_
        self.n_buf = n_buf
        self.n_passed = n_passed

    def address(self, b, data, k, opaque=False):
        indices = [ir.Constant(I32, 0), ir.Constant(I32, k)]
        if isinstance(data, ir.AllocaInstr) and not opaque:
            return b.gep(data, indices)  # a typed pointer in llvmlite: no source_etype
        return b.gep(data, indices, source_etype=self.type)

    def load(self, b, data, k):
        return b.load(self.address(b, data, k), typ=self.type.elements[k])


def _fold_failures(em, status, failures, team):
    """The kernel's status := the failure of the lowest failing chunk, unless the kernel
    failed before this loop (the first failure is the one reported)."""
    b = em.b
    slot = em.ensure_error_slot()
    detail_slots = em.ensure_detail_slots()
    clean = b.icmp_signed("==", b.load(slot, typ=I32), ir.Constant(I32, 0))
    best = entry_alloca(b, I64, "par.best")
    b.store(ir.Constant(I64, -1), best)
    with for_range(b, b.zext(team, I64), name="par.fold") as t:
        st = b.load(b.gep(status, [t]), typ=I32)
        at = b.mul(t, ir.Constant(I64, _FAILURE_SLOTS))
        lo = b.load(b.gep(failures, [at]), typ=I64)
        old = b.load(best, typ=I64)
        lower = b.or_(b.icmp_signed("<", old, ir.Constant(I64, 0)),
                      b.icmp_signed("<", lo, old))
        take = b.and_(b.and_(b.icmp_signed("!=", st, ir.Constant(I32, 0)), lower), clean)
        with b.if_then(take):
            b.store(lo, best)
            b.store(st, slot)
            for k, dslot in enumerate(detail_slots):
                got = b.load(b.gep(failures, [b.add(at, ir.Constant(I64, k + 1))]), typ=I64)
                b.store(got, dslot)


class FoldPartials:
    """The partial results of one fold: a heap buffer of n_chunks slots of the target's
    size (padded to cache lines), filled with the identity, folded in chunk order."""

    def __init__(self, em, fold):
        self.em, self.fold = em, fold
        b = em.b
        elems = ir.Constant(I64, 1)
        for d in fold.dims:
            elems = b.mul(elems, em.dim_emitter(b, d, em.syms))
        self.elems = elems
        nbytes = b.mul(elems, ir.Constant(I64, kd.itemsize(fold.dtype)))
        self.stride = b.and_(b.add(nbytes, ir.Constant(I64, 63)), ir.Constant(I64, -64))
        self.base = self.raw = None

    def allocate(self, n_chunks):
        b, f = self.em.b, self.fold
        self.raw, self.base = aligned_malloc(b, b.mul(n_chunks, self.stride))
        identity = reduction_identity(f.kind, kd.llvm_type(f.dtype), kd.is_float(f.dtype),
                                      not kd.is_unsigned(f.dtype))
        with for_range(b, n_chunks, name="fold.chunk") as c:
            slot = self._slot(c)
            with for_range(b, self.elems, name="fold.fill") as i:
                kd.store_scalar(b, identity, kd.element_pointer(b, slot, i, f.dtype), f.dtype)

    def _slot(self, c):
        b = self.em.b
        return b.gep(self.base, [b.mul(c, self.stride)], source_etype=ir.IntType(8))

    def fold_into_target(self, n_chunks):
        b, f = self.em.b, self.fold
        target = self.em.buffers[f.storage]
        is_float = kd.is_float(f.dtype)
        with for_range(b, n_chunks, name="fold.chunk") as c:
            slot = self._slot(c)
            with for_range(b, self.elems, name="fold.sum") as i:
                ptr = kd.element_pointer(b, target, i, f.dtype)
                part = kd.load_scalar(b, kd.element_pointer(b, slot, i, f.dtype), f.dtype)
                total = combine_reduction(b, f.kind, kd.load_scalar(b, ptr, f.dtype), part,
                                          is_float, not kd.is_unsigned(f.dtype))
                kd.store_scalar(b, total, ptr, f.dtype)
        b.call(libc(b.module, "free"), [self.raw])


def aligned_malloc(b, nbytes, align=64):
    """(the malloc'd pointer to free, its first `align`-aligned byte): vector accesses
    that straddle two cache lines cost double."""
    raw = b.call(libc(b.module, "malloc"), [b.add(nbytes, ir.Constant(I64, align))])
    address = b.ptrtoint(raw, I64)
    up = b.and_(b.add(address, ir.Constant(I64, align - 1)), ir.Constant(I64, -align))
    return raw, b.gep(raw, [b.sub(up, address)], source_etype=ir.IntType(8))


def fold_chunks(b, blocks, partials):
    """How many chunks a nest with folds is cut into: min(blocks, FOLD_CHUNKS, as many as
    FOLD_BYTES of partials allow), at least 1; a function of the sizes alone."""
    per_chunk = ir.Constant(I64, 0)
    for p in partials:
        per_chunk = b.add(per_chunk, p.stride)
    by_bytes = b.udiv(ir.Constant(I64, FOLD_BYTES), b.add(per_chunk, ir.Constant(I64, 1)))
    parts = b.select(b.icmp_signed("<", blocks, by_bytes), blocks, by_bytes)
    cap = ir.Constant(I64, FOLD_CHUNKS)
    parts = b.select(b.icmp_signed("<", parts, cap), parts, cap)
    one = ir.Constant(I64, 1)
    return b.select(b.icmp_signed("<", parts, one), one, parts)


def at_least_one(b, x):
    """max(x, 1) of an i64: a divisor or chunk size that a zero size must not make 0."""
    one = ir.Constant(I64, 1)
    return b.select(b.icmp_signed("<", x, one), one, x)


def ceil_div(b, n, d):
    """ceil(n / d) of i64 values, n >= 0 and d >= 1."""
    return b.udiv(b.add(n, b.sub(d, ir.Constant(I64, 1))), d)


_LIBC_TYPES = {"malloc": ir.FunctionType(PTR, [I64]),
               "realloc": ir.FunctionType(PTR, [PTR, I64]),
               "free": ir.FunctionType(ir.VoidType(), [PTR])}


def libc(module, name):
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, _LIBC_TYPES[name], name)
    return fn


def _entry_array(builder, type_, count, name):
    """A stack array of `count` elements in the function's entry block."""
    fn_entry = builder.function.entry_basic_block
    saved = builder.block
    builder.position_before(fn_entry.instructions[0])
    slot = builder.alloca(type_, size=count, name=name)
    builder.position_at_end(saved)
    return slot


class Fold:
    """The accumulating targets of one buffer that every chunk folds into (module doc)."""

    def __init__(self, storage, kind, dtype, dims):
        self.storage, self.kind, self.dtype, self.dims = storage, kind, dtype, dims


def _folds(var, inside):
    """The folds among the targets inside the split loop, one per buffer."""
    out = {}
    for t in inside:
        if t.accumulate and var.id not in t.position.free:
            out.setdefault(t.storage, Fold(t.storage, t.accumulate, t.dtype, t.dims))
    return list(out.values())


class RowWindow:
    """A scatter nest split by rows (module doc): its target's row Expr, the level where
    that row is known (its innermost loop) and the number of rows."""

    def __init__(self, row, level, rows):
        self.row, self.level, self.rows = row, level, rows


def _row_window(em, nest, level, deepest, inside):
    """The RowWindow of a nest whose loop from `level` down is one scatter's, or None.
    Only where every loop below the row's level surely runs: the window then checks
    each index where the serial loop would (Emitter._loops_run)."""
    if len(inside) != 1 or len(nest.targets) != 1:
        return None
    t = inside[0]
    if t.row is None or t.place is None or not _reads_memory(t.position):
        return None
    if any(t.storage in loaded_storages(e) for e in walk([t.expr, t.position])):
        return None  # a chunk would read rows that another one writes
    levels = {v.id: i for i, v in enumerate(nest.vars) if v is not None}
    if not t.row.free or not t.row.free <= set(levels):
        return None
    at = max(levels[v] for v in t.row.free)
    if at < level or not em._loops_run(nest, at, deepest):
        return None
    return RowWindow(t.row, at, em.x.dim(t.dims[0]))


class RowWindowEmitter(Emitter):
    """A split scatter's body: the whole nest, storing only the rows [lo, hi). The row
    (and with it the index check) is computed for every update, before the test, so every
    chunk records the serial loop's first failure; an update of another row skips its
    row's inner loops. A variable of 0 rows has one window, [0, 1), which stores nothing
    (a bad index is clamped to row 0, which it does not have: Emitter.store_target skips
    the stores into an empty buffer)."""

    def __init__(self, em, builder, buffers, syms, window, lo, hi):
        super().__init__(builder, em.views, buffers, syms, em.dim_emitter, em.scalar,
                         streamed=em.streamed)
        self.window, self.lo, self.hi = window, lo, hi

    def emit_level(self, nest, level, by_level, deepest):
        if level != self.window.level:
            super().emit_level(nest, level, by_level, deepest)
            return
        b = self.b
        row = self.value(self.window.row)
        mine = b.and_(b.icmp_signed(">=", row, self.lo), b.icmp_signed("<", row, self.hi))
        with b.if_then(mine):
            super().emit_level(nest, level, by_level, deepest)


def _reads_memory(expr):
    return any(loaded_storages(e) for e in walk([expr]))


def _unsafe(nest, var, inside):
    """Why the nest's outermost loop cannot be split, or None."""
    outside = [t for t in nest.targets if not any(t is u for u in inside)]
    if any(t.accumulate for t in outside):
        return "accumulating target outside the split loop"
    if any(t.place is not None and _reads_memory(t.position) for t in inside):
        return "a scatter: two iterations may store one element"
    folds = {f.storage: f for f in _folds(var, inside)}
    stored = {}
    for t in inside:
        fold = folds.get(t.storage)
        if fold is not None:
            if not t.accumulate or var.id in t.position.free or \
                    (t.accumulate, t.dtype) != (fold.kind, fold.dtype):
                return f"{t.storage} is folded and also stored"
            continue
        if var.id not in t.position.free:
            return f"a store to {t.storage} not indexed by the outer loop"
        stored.setdefault(t.storage, set()).add(id(t.position))
    seen, stack = set(), [e for t in inside for e in (t.expr, t.position)]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        for storage in loaded_storages(e):
            if storage in folds:
                return f"{storage} is folded and also loaded"
            if storage in stored and id(e.args[0]) not in stored[storage]:
                return f"{storage} is loaded where it is not stored"
        stack.extend(e.args)
    return None


def _work_terms(em, nest, level, roots):
    """What a nest's work is made of: (expression nodes, the split loop's and inner loops'
    extents, the extents of each reduction over loops outside the nest)."""
    nest_ids = {v.id for v in nest.vars if v is not None}
    cost, inner, seen, stack = 0, [], set(), list(roots)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        cost += e.kind in _COUNTED_KINDS
        if e.kind in ("reduce", "argreduce"):
            ids = e.data[1] if e.kind == "reduce" else (e.data[1],)
            extents = [em.x.vars[i].extent for i in ids if i not in nest_ids]
            if extents:
                inner.append(extents)
        stack.extend(e.args)
    return max(cost, 1), [v.extent for v in nest.vars[level:] if v is not None], inner


def _work(em, terms):
    """elements of the nest x its expression nodes (x the longest reduction's own extent
    when a reduction runs over loops outside the nest), as an i64 of the run-time dims."""
    b = em.b
    cost, extents, inner = terms

    def product(xs):
        p = ir.Constant(I64, 1)
        for x in xs:
            p = b.mul(p, em.value(x))
        return p
    factor = ir.Constant(I64, 1)
    for xs in inner:
        f = product(xs)
        factor = b.select(b.icmp_signed(">", f, factor), f, factor)
    return b.mul(b.mul(product(extents), factor), ir.Constant(I64, cost))


def _work_at_hints(em, terms):
    """(the work with each unknown dim at its hint (its size when compiled), whether
    any dim is unknown)."""
    cost, extents, inner = terms
    symbolic = False

    def size(x):
        nonlocal symbolic
        if x.kind == "const":
            return int(em.x.const_value(x))
        symbolic = True
        if x.kind == "dim":
            return max(int(em.x.dim_value(x).hint), 1)  # reading a hint records no guard
        return MIN_WORK  # an extent of another form: assume it is big

    def product(xs):
        p = 1
        for x in xs:
            p *= size(x)
        return p
    factor = max([product(xs) for xs in inner], default=1)
    return product(extents) * factor * cost, symbolic
