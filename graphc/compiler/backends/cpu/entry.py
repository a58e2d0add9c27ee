"""The CPU executable: the entry `graphc_main` that calls the kernel functions, and the spec.

The entry loads each kernel's pointers (and computes arena offsets) from the storage keys
the Program (loops/program.py) gave out and calls the kernels in schedule order,
returning the first nonzero status (1 + error site). The values whose rows are a loop's
trip count (compiler/regions.py: the stacks a loop grows, the arrays it appends to, and
what kernels after it compute of them) live on the heap, found through a header in the
arena, and are the entry's (a body's own entry's for those of a loop in a body: the
values after a loop whose loop variables change shape): their headers empty before the
first call, their rows freed before it returns, failing or not. A While grows its stacks itself (it is handed their
headers); the entry allocates any other such value before the first kernel writing it,
its size known by then (the loop has set its trip count), and hands every other kernel
the rows, which it reads and writes as any buffer. A long entry makes its calls through
segment functions of at most SEGMENT_CALLS calls each, which it calls in order (a
segment allocates a heap value again only if no segment before it did: the header says).
"""
from llvmlite import ir

from graphc.compiler.backends.cpu.parallel import libc
from graphc.compiler.regions import growable, value_bytes
from kernels import parallel as kp
from kernels.loops import I32, I64, PTR
from runtime import jit

ENTRY = "graphc_main"
PROFILE_GLOBAL = "graphc_profile_cycles"  # i64 per kernel call: cycles spent in it, summed


def cpu_spec(program, llvm_ir, target):
    """The CPU executable spec: the common fields, the entry's name and the LLVM IR."""
    return program.spec(target, {"entry": ENTRY, "llvm_ir": llvm_ir})


def emit_entry(program, calls, profile=False, name=ENTRY):
    """calls: [(function, [storage keys])] in schedule order. profile: count the
    cycles (the CPU's time-stamp counter) each call takes into PROFILE_GLOBAL, an i64
    per call summed over runs (runtime.Executable.kernel_profile reads it). name: the
    function's; a body of a native While or If (control_flow.py) has an entry of its
    own, of the same signature, which pins no BLAS threads (its caller's entry does).
    A storage key ("table", "var" | "const") is the entry's table itself; ("shifted",
    key, bytes) is key's pointer moved by bytes (kernel_reuse.py's row reads).

    An entry of more than SEGMENT_CALLS calls calls them through segment functions of
    SEGMENT_CALLS calls each (same signature as the entry, called with its arguments)."""
    counters = _profile_counters(program, len(calls)) if profile else None
    if len(calls) > SEGMENT_CALLS:
        segments = []
        for first in range(0, len(calls), SEGMENT_CALLS):
            segment = _entry_function(program, f"{name}.segment{first // SEGMENT_CALLS}")
            segment.linkage = "internal"
            _emit_calls(program, segment, calls[first:first + SEGMENT_CALLS], counters,
                        first, owns_run=False, owns_heap=False)
            segments.append((segment, None))
        calls, counters = segments, None
    fn = _entry_function(program, name)
    _emit_calls(program, fn, calls, counters, 0, owns_run=name == ENTRY, owns_heap=True)
    return fn


# An entry's code is a block and a phi edge per call (900 calls in a ResNet-50 step,
# 1.5k in an MLP of depth 256), and LLVM's time to emit one grows faster than its
# length: the depth-256 MLP's module took 0.70 CPU s whole, 0.51 / 0.44 / 0.37 with
# segments of 1024 / 384 / 128 calls (64: no better). Segments are also what
# runtime/jit.py can compile in parallel parts (module_split.py). A segment's call
# costs nanoseconds per run.
SEGMENT_CALLS = 128


def _entry_function(program, name):
    fn = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * 6), name)
    # the entry is a straight run of calls (one block and one phi edge per kernel, 900 in
    # a ResNet-50 step) with nothing to gain from O3, whose passes took a second of LLVM
    # time over it; a run spends nanoseconds per call in it
    fn.attributes.add("optnone")
    fn.attributes.add("noinline")
    return fn


def _emit_calls(program, fn, calls, counters, first, owns_run, owns_heap):
    """The body of an entry or of a segment: the calls in order, returning the first
    nonzero status. A call with keys None passes the function's own arguments (a
    segment's). owns_run: pins the BLAS threads (the module's entry); owns_heap: owns
    the values on the heap (an entry, a body's too: a loop in a body whose loop
    variables change shape leaves them on the heap, freed when the body returns)."""
    feeds, fetches, variables, constants, arena, syms = fn.args
    tables = {"feed": feeds, "fetch": fetches, "var": variables, "const": constants}
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    pointers = {}

    def pointer(key):
        p = pointers.get(key)
        if p is None:
            kind, what = key[:2]
            if kind == "shifted":
                p = b.gep(pointer(what), [ir.Constant(I64, key[2])], source_etype=ir.IntType(8))
            elif kind == "table":
                p = tables[what]
            elif kind == "arena":
                offset = program.emit_dim(b, program.arena_offset(what), syms)
                p = b.gep(arena, [offset], source_etype=ir.IntType(8))
            else:
                slot = program.variable_index(what) if kind == "var" else what
                p = b.load(b.gep(tables[kind], [ir.Constant(I64, slot)], source_etype=PTR),
                           typ=PTR)
            pointers[key] = p
        return p

    restore_blas = _pin_blas_threads(program, b) if owns_run else (lambda: None)
    end_team_run = _start_team_run(program, b) if owns_run else (lambda: None)
    free_stacks = _own_growable_stacks(program, b, pointer) if owns_heap else (lambda: None)
    # every failing call branches to one exit (its status through a phi): a return
    # block per call, each restoring the BLAS threads, was most of the entry's IR
    fail = fn.append_basic_block("failed") if calls else None
    failures = []
    heap = _HeapValues(program, b, pointer, syms)
    for k, (callee, keys) in enumerate(calls, first):
        if keys is None:  # a segment: the entry's own arguments
            args = list(fn.args)
        elif callee in program.header_readers:
            args = [pointer(key) for key in keys] + [syms]
        else:
            args = [heap.rows(key, fail, failures) for key in keys] + [syms]
        if counters is None:
            status = b.call(callee, args)
        else:
            status = _profiled_call(program, b, counters, k, callee, args)
        ok = b.append_basic_block("ok")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), fail, ok)
        failures.append((status, b.block))
        b.position_at_end(ok)
    free_stacks()
    restore_blas()
    end_team_run()
    b.ret(ir.Constant(I32, 0))
    if fail is not None:
        b.position_at_end(fail)
        status = b.phi(I32)
        for value, block in failures:
            status.add_incoming(value, block)
        free_stacks()
        restore_blas()
        end_team_run()
        b.ret(status)


class _HeapValues:
    """The rows of the values on the heap (module docstring) for the kernels not handed
    their headers: allocated at the first such kernel writing them."""

    def __init__(self, program, b, pointer, syms):
        self.program, self.b, self.pointer, self.syms = program, b, pointer, syms
        self.values = {}  # header storage key -> the values in it
        for v in program.buffers:
            if growable(v):
                self.values.setdefault(program.storage_of(v), []).append(v)
        self.ready = set()  # keys whose rows a kernel before this one has written

    def rows(self, key, fail, failures):
        """The pointer a kernel taking `key` gets: the key's own, or the rows of the
        value on the heap its header holds (after a shift of a row read)."""
        b = self.b
        base = key[1] if key[0] == "shifted" else key
        if base not in self.values:
            return self.pointer(key)
        if base not in self.ready:
            self.ready.add(base)
            self.allocate(base, fail, failures)
        rows = b.load(self.pointer(base), typ=PTR)
        if key[0] == "shifted":
            rows = b.gep(rows, [ir.Constant(I64, key[2])], source_etype=ir.IntType(8))
        return rows

    def allocate(self, key, fail, failures):
        """Sizes the header's rows for the biggest value in it, unless a While has grown
        them (its stack: room for at least its trip count's rows)."""
        b = self.b
        header = self.pointer(key)
        values = self.values[key]
        nbytes = ir.Constant(I64, 1)  # realloc of 0 bytes may give NULL
        for v in values:
            n = self.program.emit_dim(b, value_bytes(v), self.syms)
            nbytes = b.select(b.icmp_signed(">", n, nbytes), n, nbytes)
        room = b.gep(header, [ir.Constant(I64, 8)], source_etype=ir.IntType(8))
        with b.if_then(b.icmp_signed("==", b.load(room, typ=I64), ir.Constant(I64, 0))):
            rows = b.call(libc(self.program.llvm, "realloc"), [b.load(header, typ=PTR), nbytes])
            site = self.program.error_site(
                values[0].node, "could not allocate {0} bytes for a value sized by a loop's "
                                "trip count", "ResourceExhaustedError", args=["int"])
            failed = b.icmp_unsigned("==", b.ptrtoint(rows, I64), ir.Constant(I64, 0))
            with b.if_then(failed, likely=False):
                b.store(nbytes, b.gep(self.syms, [ir.Constant(
                    I64, self.program.error_detail_base)], source_etype=I64))
                failures.append((ir.Constant(I32, site + 1), b.block))
                b.branch(fail)
                b.position_at_end(b.function.append_basic_block("unreachable"))
            b.store(rows, header)
            b.store(ir.Constant(I64, 1), room)


def _own_growable_stacks(program, b, pointer):
    """Empties the headers of the module's growable stacks (the arena holds what the last
    run left there); returns what emits freeing their rows, before each return."""
    headers = [pointer(program.storage_of(v)) for v in program.buffers if growable(v)]
    zero = ir.Constant(I64, 0)
    for header in headers:
        b.store(ir.Constant(PTR, None), header)
        b.store(zero, b.gep(header, [ir.Constant(I64, 8)], source_etype=ir.IntType(8)))

    def free():
        for header in headers:
            b.call(libc(program.llvm, "free"), [b.load(header, typ=PTR)])
            b.store(ir.Constant(PTR, None), header)
    return free


def _start_team_run(program, b):
    """When the kernels run regions on the thread team: tells the team a run started, so
    that its workers spin between the regions instead of falling asleep (each wake-up
    costs a region hundreds of microseconds: runtime/team.py). Returns what emits telling
    it the run ended, before each return of the entry."""
    if kp.PARALLEL_FN not in program.llvm.globals:
        return lambda: None
    b.call(kp.run_begin_fn(program.llvm), [])
    return lambda: b.call(kp.run_end_fn(program.llvm), [])


def _pin_blas_threads(program, b):
    """When the kernels call BLAS: the library runs single-threaded during the run
    (its calls are split across our own team: gemm_team.py, conv_team.py). The first
    of overlapping runs (a process-wide count, runtime.jit.BLAS_PIN_GLOBAL) saves the
    library's thread count and sets 1; the last one restores it. Returns what emits
    the restoring, before each return of the entry."""
    blas = jit.blas_names().values() if jit.blas_library() else ()
    names = jit.blas_thread_symbols() if any(n in program.llvm.globals for n in blas) \
        else None
    if names is None:
        return lambda: None
    set_fn = ir.Function(program.llvm, ir.FunctionType(ir.VoidType(), [I32]), names[0])
    get_fn = ir.Function(program.llvm, ir.FunctionType(I32, []), names[1])
    pin = ir.GlobalVariable(program.llvm, ir.ArrayType(I64, 2), jit.BLAS_PIN_GLOBAL)
    pin.linkage = "external"
    runs = b.gep(pin, [ir.Constant(I64, 0), ir.Constant(I64, 0)])
    saved = b.gep(pin, [ir.Constant(I64, 0), ir.Constant(I64, 1)])
    first = b.atomic_rmw("add", runs, ir.Constant(I64, 1), "seq_cst")
    with b.if_then(b.icmp_signed("==", first, ir.Constant(I64, 0))):
        b.store(b.sext(b.call(get_fn, []), I64), saved)
        b.call(set_fn, [ir.Constant(I32, 1)])

    def restore():
        last = b.atomic_rmw("sub", runs, ir.Constant(I64, 1), "seq_cst")
        with b.if_then(b.icmp_signed("==", last, ir.Constant(I64, 1))):
            b.call(set_fn, [b.trunc(b.load(saved, typ=I64), I32)])
    return restore


def _profile_counters(program, n):
    counters = ir.GlobalVariable(program.llvm, ir.ArrayType(I64, n), PROFILE_GLOBAL)
    counters.initializer = ir.Constant(ir.ArrayType(I64, n), [0] * n)
    return counters


def _profiled_call(program, b, counters, k, callee, args):
    clock = program.llvm.globals.get("llvm.readcyclecounter") or ir.Function(
        program.llvm, ir.FunctionType(I64, []), "llvm.readcyclecounter")
    start = b.call(clock, [])
    status = b.call(callee, args)
    spent = b.sub(b.call(clock, []), start)
    slot = b.gep(counters, [ir.Constant(I64, 0), ir.Constant(I64, k)])
    b.store(b.add(b.load(slot, typ=I64), spent), slot)
    return status
