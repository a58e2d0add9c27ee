"""Thread programs: a GPU kernel body written once, emitted as PTX and as its CPU emulation.

A template builds its kernel through a ThreadProgram `t` (made by `thread_program`):

    t.b                         the IR builder; code outside threads() is *uniform*: it
                                computes the same values in every thread of a block
    t.ctaid, t.nctaid, t.ntid   block index, number of blocks, threads per block (i64)
    with t.threads() as tid:    per-thread code; tid = the thread's index in its block
    t.barrier()                 every thread of the block gets here before any goes on
    t.shared(ty, n)             a per-block array of n elements (a pointer)
    t.private(ty).at(tid)       a per-thread slot that keeps its value across barriers
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

Rules a template keeps (checked where cheap): barriers and shared-memory allocation only
in uniform code; a value made inside a threads() region is used only inside it (carry
it in a private slot or a shared array); consecutive regions are separated by a barrier
(else the emulation would synchronize where the GPU does not).
"""
from contextlib import ExitStack, contextmanager

from llvmlite import ir

from kernels.loops import I32, I64, PTR, for_range

_SREG = "llvm.nvvm.read.ptx.sreg.{}.x"
SHARED_ADDRSPACE = 3


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
        self._blocks = ExitStack()
        self.ctaid = self._blocks.enter_context(for_range(self.b, self.nctaid, name="ctaid"))

    @contextmanager
    def _thread_index(self):
        with for_range(self.b, self.ntid, name="tid") as tid:
            yield tid

    def _emit_barrier(self):
        pass  # the thread loops of the regions before and after are the barrier

    def _shared_array(self, ty, name):
        b = self.b
        saved = b.block
        b.position_at_start(b.function.entry_basic_block)
        array = b.alloca(ty.element, size=ir.Constant(I64, ty.count), name=name)
        b.position_at_end(saved)
        return array

    def _close(self):
        self._blocks.close()


def thread_program(llvm_module, name, n_args, nvptx):
    """The ThreadProgram of kernel `name` with n_args pointer arguments."""
    return (PtxThreads if nvptx else EmulatedThreads)(llvm_module, name, n_args)
