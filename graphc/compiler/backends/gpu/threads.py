"""Thread programs: a GPU kernel body written once, emitted as PTX and as its CPU emulation.

A template builds its kernel through a ThreadProgram `t` (made by `thread_program`):

    t.b                         the IR builder; code outside threads() is *uniform*: it
                                computes the same values in every thread of a block
    t.ctaid, t.nctaid, t.ntid   block index, number of blocks, threads per block (i64)
    with t.threads() as tid:    per-thread code; tid = the thread's index in its block
    t.barrier()                 every thread of the block gets here before any goes on
    t.shared(ty, n)             a per-block array of n elements (a pointer)
    t.private(ty).at(tid)       a per-thread slot that keeps its value across barriers
    t.shuffle_down(src, k, dst) every thread's private slots dst := the slots src of the
                                thread k lanes down its warp (its own where that lane
                                is past its warp's last thread): shfl.sync.down
    t.shuffle_up(src, k, dst)   the same from the thread k lanes up (lane - k; its own
                                below lane k): shfl.sync.up
    t.warp_lanes(tid)           inside threads(): (lane, threads in this thread's warp)
    t.finish()                  closes the kernel (after reporting errors, see status)

PTX (`nvptx=True`): `void name(ptr args..., ptr syms, ptr status)`, marked a kernel;
uniform code runs in every thread, threads() is its body with tid = %tid.x, barrier() is
llvm.nvvm.barrier0, shared arrays are addrspace(3) globals, private slots are allocas.

Emulation: `void name.emulate(ptr args..., ptr syms, ptr status, i64 grid, i64 block)`
does what the launch <<<grid, block>>> does: uniform code runs once per block in a loop
over the blocks, each threads() region is a loop over the block's threads (MCUDA's and
PoCL's work-item loops: the barrier between two regions is where one loop ends and the
next begins), shared arrays are allocas (blocks run one after another), private slots
are allocas of `block` elements indexed by tid.

Warp shuffles: in PTX, one llvm.nvvm.shfl.sync.down (or .up) per 32 bits of each slot (f64 and
i64 as two halves), with the mask of the warp's threads and the clamp at its last lane,
so a block of any size works (its last warp partial): a lane whose source is past the
clamp keeps its own value, as shfl.down does. In the emulation a shuffle is what it
means: every thread has written its slot (the private slot is a per-block array), the
region ends (a split, as at a barrier), and each thread copies the slot of lane + k of
its warp, or its own where that lane does not exist: first thing in the next region's
thread loop (or in a loop of its own when a barrier or another shuffle comes first).
A shuffle up reads lane - k, a thread that the next region's loop has already run: its
copy is a loop of its own, right away, over the threads in descending order (each reads
a lower thread, whose slots are not yet overwritten when source and received are one).

Rules a template keeps (checked where cheap): barriers and shared-memory allocation only
in uniform code; a value made inside a threads() region is used only inside it (carry
it in a private slot or a shared array); consecutive regions are separated by a barrier
(else the emulation would synchronize where the GPU does not). A shuffle also separates
two regions, but on the GPU it synchronizes a warp only: the regions around it exchange
nothing but the shuffled slots (anything else, through shared memory, needs a barrier).
Shuffles are uniform code, so every thread of the block reaches them (shfl.sync's rule).
"""
from contextlib import ExitStack, contextmanager

from llvmlite import ir

from kernels.loops import I32, I64, PTR, for_range

_SREG = "llvm.nvvm.read.ptx.sreg.{}.x"
SHARED_ADDRSPACE = 3
WARP = 32


class ThreadProgram:
    """Base of the two emitters; see the module doc."""

    nvptx = False

    def __init__(self, llvm_module, name, n_args):
        self.module = llvm_module
        self.name = name
        self.fn = self._declare(n_args)
        self.fn.attributes.add("nounwind")
        self.args = list(self.fn.args[:n_args])
        for arg in self.args:
            arg.add_attribute("noalias")
        self.syms, self.status = self.fn.args[n_args:n_args + 2]
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self._in_threads = False
        self._after_region = False  # a region ended and no barrier came since
        self._shared = 0

    def _check_uniform(self, what):
        if self._in_threads:
            raise AssertionError(f"{what} inside threads() in {self.name}: it must be "
                                 f"uniform code")

    @contextmanager
    def threads(self):
        self._check_uniform("a nested threads() region")
        if self._after_region:
            raise AssertionError(f"two threads() regions without a barrier in {self.name}")
        self._in_threads = True
        with self._thread_index() as tid:
            yield tid
        self._in_threads = False
        self._after_region = True

    def barrier(self):
        self._check_uniform("a barrier")
        self._after_region = False
        self._emit_barrier()

    def shared(self, ty, count, name="shared"):
        self._check_uniform("shared memory")
        self._shared += 1
        return self._shared_array(ir.ArrayType(ty, count), f"{name}.{self._shared}")

    def finish(self):
        self._check_uniform("finish()")
        self._close()
        self.b.ret_void()
        return self.fn

    def report_status(self, mine, details=(), detail_base=0):
        """Inside threads(): when `mine` (i32) is nonzero and no thread failed before,
        status := mine and the details go to the syms slots (atomic, first one wins)."""
        b = self.b
        with b.if_then(b.icmp_signed("!=", mine, ir.Constant(I32, 0))):
            old = b.cmpxchg(self.status, ir.Constant(I32, 0), mine, "monotonic", "monotonic")
            with b.if_then(b.extract_value(old, 1)):
                for k, value in enumerate(details):
                    ptr = b.gep(self.syms, [ir.Constant(I64, detail_base + k)],
                                source_etype=I64)
                    b.store(value, ptr)

    def private(self, ty, name="private"):
        self._check_uniform("a private slot")
        return _Private(self, ty, name)

    def warp_lanes(self, tid):
        """Inside threads() (or a shuffle): (this thread's lane, the number of threads of
        its warp: 32, or fewer in the last warp of a block that is not a multiple of 32),
        both i64."""
        b = self.b
        lane = b.and_(tid, ir.Constant(I64, WARP - 1), name="lane")
        left = b.sub(self.ntid, b.sub(tid, lane))
        warp = ir.Constant(I64, WARP)
        return lane, b.select(b.icmp_unsigned("<", left, warp), left, warp, name="warp")

    def shuffle_down(self, sources, offset, received):
        """Uniform code: for each pair of private slots, every thread's received slot :=
        the source slot of the thread `offset` lanes down its warp, or its own source
        where that lane is past the warp's last thread (see the module doc)."""
        self._shuffle(sources, offset, received, self._emit_shuffle)

    def shuffle_up(self, sources, offset, received):
        """Uniform code: as shuffle_down, from the thread `offset` lanes up its warp
        (lane - offset), or its own source in lanes below `offset`."""
        self._shuffle(sources, offset, received, self._emit_shuffle_up)

    def _shuffle(self, sources, offset, received, emit):
        self._check_uniform("a shuffle")
        if not 0 < offset < WARP or len(sources) != len(received):
            raise AssertionError(f"bad shuffle in {self.name}: offset {offset}")
        for src, dst in zip(sources, received):
            if src.ty != dst.ty:
                raise AssertionError(f"shuffle of {src.ty} into {dst.ty} in {self.name}")
        self._after_region = False
        emit(list(sources), offset, list(received))


class _Private:
    """A per-thread slot; `at(tid)` is this thread's pointer (inside threads())."""

    def __init__(self, program, ty, name):
        self.program = program
        self.ty = ty
        count = None if program.nvptx else program.ntid
        b = program.b
        saved = b.block
        fn_entry = b.function.entry_basic_block
        b.position_at_start(fn_entry)
        self.slot = b.alloca(ty, size=count, name=name)
        b.position_at_end(saved)

    def at(self, tid):
        if self.program.nvptx:
            return self.slot
        return self.program.b.gep(self.slot, [tid], source_etype=self.ty)


class PtxThreads(ThreadProgram):
    nvptx = True

    def _declare(self, n_args):
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR] * (n_args + 2)),
                         self.name)
        annotations = self.module.add_named_metadata("nvvm.annotations")
        annotations.add(self.module.add_metadata(
            [fn, ir.MetaDataString(self.module, "kernel"), ir.Constant(I32, 1)]))
        return fn

    def __init__(self, llvm_module, name, n_args):
        super().__init__(llvm_module, name, n_args)
        self.ctaid, self.nctaid, self.ntid = (self._sreg(r) for r in ("ctaid", "nctaid",
                                                                       "ntid"))

    def _sreg(self, reg):
        name = _SREG.format(reg)
        callee = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(I32, []), name)
        return self.b.zext(self.b.call(callee, []), I64, name=reg)

    @contextmanager
    def _thread_index(self):
        yield self._sreg("tid")

    def _emit_barrier(self):
        name = "llvm.nvvm.barrier0"
        callee = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), []), name)
        self.b.call(callee, [])

    def _emit_shuffle(self, sources, offset, received, mode="down"):
        b = self.b
        lane, warp = self.warp_lanes(self._sreg("tid"))
        warp = b.trunc(warp, I32)
        # the warp's threads, and the clamp (segment mask 0): its last lane shuffling
        # down, lane 0 shuffling up
        mask = b.lshr(ir.Constant(I32, 0xFFFFFFFF), b.sub(ir.Constant(I32, WARP), warp))
        clamp = b.sub(warp, ir.Constant(I32, 1)) if mode == "down" else ir.Constant(I32, 0)
        for src, dst in zip(sources, received):
            value = b.load(src.slot, typ=src.ty)
            b.store(self._shuffle_value(value, mask, ir.Constant(I32, offset), clamp, mode),
                    dst.slot)

    def _emit_shuffle_up(self, sources, offset, received):
        self._emit_shuffle(sources, offset, received, "up")

    def _shfl(self, value, mask, offset, clamp, mode):
        kind = "f32" if isinstance(value.type, ir.FloatType) else "i32"
        name = f"llvm.nvvm.shfl.sync.{mode}.{kind}"
        callee = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(value.type, [I32, value.type, I32, I32]), name)
        return self.b.call(callee, [mask, value, offset, clamp])

    def _shuffle_value(self, value, mask, offset, clamp, mode):
        """shfl.sync.down (or .up) of any register type: 32 bits at a time."""
        b, ty = self.b, value.type
        if isinstance(ty, ir.FloatType) or ty == I32:
            return self._shfl(value, mask, offset, clamp, mode)
        if isinstance(ty, ir.DoubleType) or ty == I64:
            bits = b.bitcast(value, I64) if isinstance(ty, ir.DoubleType) else value
            low = self._shfl(b.trunc(bits, I32), mask, offset, clamp, mode)
            high = self._shfl(b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), mask,
                              offset, clamp, mode)
            bits = b.or_(b.shl(b.zext(high, I64), ir.Constant(I64, 32)), b.zext(low, I64))
            return b.bitcast(bits, ty) if isinstance(ty, ir.DoubleType) else bits
        if isinstance(ty, ir.HalfType):
            narrow = ir.IntType(16)
            got = self._shfl(b.zext(b.bitcast(value, narrow), I32), mask, offset, clamp, mode)
            return b.bitcast(b.trunc(got, narrow), ty)
        if isinstance(ty, ir.IntType) and ty.width < 32:
            return b.trunc(self._shfl(b.zext(value, I32), mask, offset, clamp, mode), ty)
        raise AssertionError(f"no shuffle of {ty} in {self.name}")

    def _shared_array(self, ty, name):
        gv = ir.GlobalVariable(self.module, ty, f"{self.name}.{name}",
                               addrspace=SHARED_ADDRSPACE)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ty, ir.Undefined)
        gv.align = 16
        # generic pointers, as everything else; LLVM infers the shared address space back
        return self.b.addrspacecast(gv, PTR)

    def _close(self):
        pass


class EmulatedThreads(ThreadProgram):
    def _declare(self, n_args):
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * (n_args + 2) + [I64, I64])
        return ir.Function(self.module, fnty, self.name + ".emulate")

    def __init__(self, llvm_module, name, n_args):
        super().__init__(llvm_module, name, n_args)
        self.nctaid, self.ntid = self.fn.args[-2:]
        self._pending = None  # a shuffle whose copy the next region's loop does
        self._blocks = ExitStack()
        self.ctaid = self._blocks.enter_context(for_range(self.b, self.nctaid, name="ctaid"))

    @contextmanager
    def _thread_index(self):
        pending = self._take_pending()
        with for_range(self.b, self.ntid, name="tid") as tid:
            if pending:
                self._copy_shuffled(tid, *pending)
            yield tid

    def _emit_barrier(self):
        self._flush()  # else the thread loops of the regions around it are the barrier

    def _emit_shuffle(self, sources, offset, received):
        # the sources were written by the region before (each slot is a per-block array);
        # the copy is done by the next region's thread loop, first thing (see _flush)
        self._flush()
        self._pending = (sources, offset, received, self.b.block)

    def _emit_shuffle_up(self, sources, offset, received):
        self._flush()
        b = self.b
        k = ir.Constant(I64, offset)
        with for_range(b, self.ntid, name="shfl.up") as i:
            tid = b.sub(b.sub(self.ntid, ir.Constant(I64, 1)), i)
            lane, _ = self.warp_lanes(tid)
            source = b.select(b.icmp_unsigned(">=", lane, k), b.sub(tid, k), tid)
            for src, dst in zip(sources, received):
                b.store(b.load(src.at(source), typ=src.ty), dst.at(tid))

    def _take_pending(self):
        if self._pending is None:
            return None
        *pending, where = self._pending
        self._pending = None
        if self.b.block is not where:
            raise AssertionError(f"a shuffle in {self.name} is not followed, in the same "
                                 f"uniform block, by a region, barrier, shuffle or finish()")
        return pending

    def _flush(self):
        """A pending shuffle with no region after it: a thread loop of its own."""
        pending = self._take_pending()
        if pending:
            with for_range(self.b, self.ntid, name="shfl") as tid:
                self._copy_shuffled(tid, *pending)

    def _copy_shuffled(self, tid, sources, offset, received):
        """Thread tid's part of a shuffle: received := the source slot of lane + offset
        of its warp, or its own. Done first in the loop of the region after the shuffle,
        this reads what the region before left: thread tid + offset (its source) has not
        run yet, threads run in ascending order, a thread writes only its own slots, and
        the shuffle reads down only."""
        b = self.b
        lane, warp = self.warp_lanes(tid)
        k = ir.Constant(I64, offset)
        exists = b.icmp_unsigned("<", b.add(lane, k), warp)
        source = b.select(exists, b.add(tid, k), tid)
        for src, dst in zip(sources, received):
            b.store(b.load(src.at(source), typ=src.ty), dst.at(tid))

    def _shared_array(self, ty, name):
        b = self.b
        saved = b.block
        b.position_at_start(b.function.entry_basic_block)
        array = b.alloca(ty.element, size=ir.Constant(I64, ty.count), name=name)
        b.position_at_end(saved)
        return array

    def _close(self):
        self._flush()
        self._blocks.close()


def thread_program(llvm_module, name, n_args, nvptx):
    """The ThreadProgram of kernel `name` with n_args pointer arguments."""
    return (PtxThreads if nvptx else EmulatedThreads)(llvm_module, name, n_args)
