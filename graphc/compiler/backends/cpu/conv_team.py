"""The chunk loop of an im2col + gemm conv kernel (conv_kernel.py) on the thread team.

Each chunk of images is independent work: im2col into scratch, one gemm, the chunk's
epilogue (or, for the input gradient, gemm then col2im). Run serially, only the gemm used
both cores (OpenBLAS's threads) while im2col, col2im and the epilogue ran on one; with a
team, each thread takes whole chunks, each with its own scratch and a single-threaded
gemm, so all of the work is shared out (tools/bench.py's conv_train workload measures it).

    body(ptr buffer..., ptr syms, i64 lo, i64 hi, ptr scratch) -> i32
        chunks lo .. hi-1, in order (the serial kernel's chunk work, unchanged)
    task(ptr data)
        allocates its scratch (cache-line aligned), claims units (runs of chunks) from a
        shared counter and runs body on each; the first failure reaches `status`
    kernel: the team = the module's thread setting, limited to the units, and 1 when the
        conv is small (MIN_WORK). OpenBLAS runs single-threaded during our runs (entry.py),
        so its threads and ours never compete for the cores.

The filter gradient sums over every chunk: its units are runs of chunks fixed by the
batch alone (parallel.FOLD_CHUNKS of them at most), each summing into its own partial
filter, folded into the result in unit order after the team. So every kernel gives the
same bits with 1 or N threads. Used when the BLAS library lets us set its thread count
(runtime.jit.blas_thread_symbols) and parallel splitting is on (GRAPHC_PARALLEL).
A direct conv whose chunks do nothing but its images' calls has no body or task of its
own: its task is conv_images.py's library function of its shape (emit_images).
"""
from llvmlite import ir

from graphc.compiler.backends.cpu import parallel
from kernels import parallel as kp
from kernels.loops import I32, I64, PTR, entry_alloca
from runtime import jit

def available():
    return parallel.enabled() and jit.blas_thread_symbols() is not None


def emit(conv, emit_chunks):
    """The chunk loop of `conv` (a _ConvLowering in its _emit) on a team.

    emit_chunks(builder, emitter, syms, lo, hi, scratch) emits chunks lo..hi-1 into a body
    function (the conv's geometry recomputed there, its buffers the body's arguments)."""
    b, em = conv.b, conv.em
    storages = conv.storages
    body = _emit_body(conv, storages, emit_chunks)
    units = _Units(conv)
    layout = _layout(len(storages))
    task = _emit_task(conv, body, layout, storages, units.fold is not None)
    status = entry_alloca(b, I32, "conv.team.status")
    b.store(ir.Constant(I32, 0), status)
    buffers = [units.fold.base if units.fold is not None and s == conv.c_key
               else em.buffers[s] for s in storages]
    _start(conv, task, layout, buffers + [
        em.syms, units.n_chunks, units.unit, units.n_units, ir.Constant(I64, 0), status,
        conv.scratch_bytes_value(), units.stride()], units)
    if units.fold is not None:
        units.fold.fold_into_target(units.n_units)
    failed = b.load(status, typ=I32)
    with b.if_then(b.icmp_signed("!=", failed, ir.Constant(I32, 0))):
        b.ret(failed)  # the failing thread left its details in syms


def emit_images(conv, task, layout, src, w, out, fold_fn=None):
    """The chunk loop of `conv` on a team whose task is conv_images.py's library function
    `task` (data: `layout`; it cannot fail, so no status), given the buffers the images
    are read from and written to (`out` the product's). The filter gradient's units sum
    into partial filters that the task zeroes, and fold_fn (conv_images.fold_function)
    sets `out` to their sum."""
    b = conv.b
    units = _Units(conv, fill=False)
    result = out
    if units.fold is not None:
        out = units.fold.base
    _start(conv, task, layout, [
        src, w, out, kp.tasks_global(b.module), units.n_chunks, units.unit, units.n_units,
        ir.Constant(I64, 0), conv.scratch_bytes_value(), units.stride()], units)
    if units.fold is not None:
        fold = units.fold
        b.call(fold_fn, [fold.base, units.n_units, fold.stride, result, fold.elems])
        b.call(parallel.libc(b.module, "free"), [fold.raw])


class _Units:
    """How the chunks are shared out: runs of `unit` chunks, `n_units` of them; the filter
    gradient's (`fold`) fixed by the batch alone, each summing into a partial filter."""

    def __init__(self, conv, fill=True):
        """fill: the partial filters filled with zeros here (else by the task)."""
        b, em = conv.b, conv.em
        self.n_chunks = conv.chunk_count()
        self.fold = None
        if conv.node.type == "Conv2DBackpropFilter":
            self.fold = parallel.FoldPartials(em, parallel.Fold(
                conv.c_key, "sum", conv.dtype, list(conv.product.dims)))
            n_units = parallel.fold_chunks(b, self.n_chunks, [self.fold])
        else:
            n_units = self.n_chunks
        # An empty batch has no chunks: a unit of at least one chunk keeps both divisions
        # defined (x86 traps on a division by 0) and leaves 0 units, so no chunk runs.
        self.unit = parallel.at_least_one(b, parallel.ceil_div(
            b, self.n_chunks, parallel.at_least_one(b, n_units)))
        self.n_units = parallel.ceil_div(b, self.n_chunks, self.unit)
        if self.fold is not None and fill:
            self.fold.allocate(self.n_units)
        elif self.fold is not None:
            self.fold.raw, self.fold.base = parallel.aligned_malloc(
                b, b.mul(self.n_units, self.fold.stride))

    def stride(self):
        return self.fold.stride if self.fold is not None else ir.Constant(I64, 0)


def _start(conv, task, layout, fields, units):
    """Fills the task's data and runs the task on the team (or alone: one thread, or too
    little work)."""
    b = conv.b
    data = entry_alloca(b, layout.type, "conv.team.data")
    for k, v in enumerate(fields):
        b.store(v, layout.address(b, data, k))
    team = kp.emit_team_size(b, b.load(kp.threads_global(b.module), typ=I32), units.n_units)
    big = b.icmp_signed(">=", conv.work_value(), ir.Constant(I64, parallel.min_work()))
    team = b.select(big, team, ir.Constant(I32, 1))
    with b.if_else(b.icmp_signed(">", team, ir.Constant(I32, 1))) as (on_team, alone):
        with on_team:
            b.call(kp.parallel_fn(b.module), [task, data, team])
        with alone:
            b.call(task, [data])


def _emit_body(conv, storages, emit_chunks):
    module = conv.b.module
    fnty = ir.FunctionType(I32, [PTR] * len(storages) + [PTR, I64, I64, PTR])
    fn = ir.Function(module, fnty, conv.name + ".chunks")
    fn.attributes.add("nounwind")
    for arg in fn.args[:len(storages)]:
        arg.add_attribute("noalias")
    syms, lo, hi, scratch = fn.args[len(storages):]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    child = conv.em.fork(b, dict(zip(storages, fn.args)), syms)
    emit_chunks(b, child, syms, lo, hi, scratch)
    b.ret(child.status())
    return fn


def _layout(n_buf):
    # buffers, syms, chunks, chunks per unit, units, next unit (shared counter), status,
    # scratch bytes, bytes between two units' partial filters
    return parallel.Layout(
        ir.LiteralStructType([PTR] * n_buf + [PTR, I64, I64, I64, I64, PTR, I64, I64]), n_buf)


def _emit_task(conv, body, layout, storages, folds):
    module = conv.b.module
    fn = ir.Function(module, kp.TASK_TYPE, conv.name + ".chunks.task")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = fn.args[0]
    n_buf = len(storages)
    load = lambda k: layout.load(b, data, k)  # noqa: E731
    buffers = [load(k) for k in range(n_buf)]
    syms, n_chunks, unit, n_units = (load(n_buf + k) for k in range(4))
    counter = layout.address(b, data, n_buf + 4)
    status, scratch_bytes, stride = load(n_buf + 5), load(n_buf + 6), load(n_buf + 7)
    raw, scratch = parallel.aligned_malloc(b, scratch_bytes)
    c_slot = storages.index(conv.c_key)
    with claim_loop(b, counter, n_units) as u:
        lo = b.mul(u, unit)
        hi = b.add(lo, unit)
        hi = b.select(b.icmp_signed("<", hi, n_chunks), hi, n_chunks)
        mine = list(buffers)
        if folds:  # unit u sums into its own partial filter
            mine[c_slot] = b.gep(buffers[c_slot], [b.mul(u, stride)],
                                 source_etype=ir.IntType(8))
        rc = b.call(body, mine + [syms, lo, hi, scratch])
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0))):
            b.cmpxchg(status, ir.Constant(I32, 0), rc, "monotonic", "monotonic")
    b.call(parallel.libc(module, "free"), [raw])
    kp.count_task(b)
    b.ret_void()
    return fn


class claim_loop:
    """`while ((u = counter++) < n) { body }` (an atomic shared counter); yields u."""

    def __init__(self, b, counter, n):
        self.b, self.counter, self.n = b, counter, n

    def __enter__(self):
        b = self.b
        self.claim = b.append_basic_block("claim")
        work = b.append_basic_block("unit")
        self.done = b.append_basic_block("claimed")
        b.branch(self.claim)
        b.position_at_end(self.claim)
        u = b.atomic_rmw("add", self.counter, ir.Constant(I64, 1), "monotonic")
        b.cbranch(b.icmp_signed("<", u, self.n), work, self.done)
        b.position_at_end(work)
        return u

    def __exit__(self, *exc):
        if exc[0] is None:
            self.b.branch(self.claim)
            self.b.position_at_end(self.done)
        return False
