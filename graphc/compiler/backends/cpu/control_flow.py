"""While and If kernels on the CPU: loops and branches in the generated code.

The bodies of a native While or If (graphc/compiler/regions.py) are modules scheduled and
planned by the driver like any other. Each body becomes an entry function of its own in
the one LLVM module, of graphc_main's signature (feeds, fetches, variables, constants,
arena, syms): its kernels are emitted by the same code (lower_kernels, emit_entry), with
the enclosing Program's symbols, variables, constants and error sites. The region node's
kernel calls those entries:

  While: the loop variables live in two buffers per variable that swap roles each
    iteration (the body reads one and writes the other); the cond runs on the current
    ones, the loop leaves when it gives false, the trip count is a run-time value, and
    maximum_iterations is a loop variable the cond already tests (while_v2.py). Iteration
    k writes row k of each stack saved for the gradient, rows lowering sized by the
    bound the cond gives; one past them is an error naming the While. A stack without
    such a bound grows (regions.py): its buffer is a header (heap pointer, rows of room)
    and iteration k, finding no room for row k, reallocates the rows doubled (the C
    heap: nothing planned before the run knows the trip count); a failed allocation is
    an error naming the While. The loop sets its trip count's dim when it leaves, the
    rows its backward loops read, and those pass its heap pointer to their bodies. The
    arrays a loop appends to (regions.appended_arrays) are such stacks too: the body's
    element is its saved value. At the end the current buffers are copied to the node's
    outputs, and the rows past the trip count of the stacks a product after the loop
    reads (regions.zeroed_past_trips) are zeroed. A loop variable whose dims change
    between iterations (regions.carried_axes) has its dims in syms slots, set from the
    dims it enters with and, after each body call, from the body's output dims; its two
    buffers, and the arena of a body whose size reads those dims, are the kernel's own
    on the heap (_LoopHeap); its value after the loop goes to the rows of its header
    (the entry's heap value), its dims to the run dims readers after the loop use.
  If: the predicate picks one branch entry, which writes the node's outputs and its own
    intermediates saved for the gradient; the other branch's saved ones are zeroed.

The kernel's scratch memory (memory planning asks scratch_bytes) holds each body's arena,
the two buffers per loop variable, and a slot per If output no other kernel reads. A
failing check inside a body returns its error site's status through the calls, so the
error names the op and the user's line as anywhere else. A body output the body does not
compute (one of its inputs, a constant, a variable read) is copied from where it is, as
the runtime copies such fetches of a whole run.
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.backends.cpu.entry import emit_entry
from graphc.compiler.backends.cpu.parallel import libc
from graphc.compiler.lower import LoweringError, RegionOnHost
from graphc.compiler.regions import FORWARD_DIM_SLOTS, GROWABLE_FIRST_ROWS, branch_outputs, \
    carried_axes, carried_symbol, growable, heap_loop_vars, leaving_symbol, ragged_symbol, \
    reads_carried_dims, row_bytes, scratch_parts, trips_symbol, value_bytes, \
    written_in_place, zeroed_past_trips
from graphc.framework.op_def import RAGGED_SAVED
from graphc.compiler.loops.program import Program
from kernels.loops import I8, I32, I64, PTR

_ALIGN = 64  # bytes: every part of the scratch starts on a cache line
_TABLES = [("table", "var"), ("table", "const")]


def region_scratch_bytes(kernel):
    """The scratch bytes of a While or If kernel: the sum of its parts (regions.scratch_parts)."""
    return sum((size for _, size in scratch_parts(kernel.main, _ALIGN)), 0)


def lower_region_kernel(program, kernel, name, lower_kernels):
    """The LLVM function of a While or If kernel and its storage keys; lower_kernels: the
    backend's (program, prefix) -> ([(function, storage keys)], names), for the bodies."""
    node = kernel.main
    _check_growable_stacks(program, node)
    try:
        entries = {key: _emit_body(program, region, f"{name}_{key}", lower_kernels)
                   for key, region in node.regions.items()}
    except LoweringError as e:  # a body's op without native code: the node runs on the host
        raise RegionOnHost(str(e), node.name) from None
    inputs = list(dict.fromkeys(program.storage_of(v) for v in node.value_inputs))
    stores = {v: program.stores_of(v) for v in kernel.outputs}
    scratch = program.scratch_of(kernel)
    keys = list(dict.fromkeys(inputs + [k for ks in stores.values() for k in ks] +
                              ([scratch] if scratch is not None else []) + _TABLES))
    fn = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * (len(keys) + 1)), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    emit = _RegionEmitter(program, b, dict(zip(keys, fn.args)), fn.args[-1], scratch)
    if node.type == "While":
        emit.while_loop(node, entries, stores)
    else:
        emit.branch(node, entries, stores)
    return fn, keys


def _check_growable_stacks(program, node):
    """RegionOnHost unless each stack `node` grows (regions.py) is in the one buffer its
    header is in (the entry hands its readers the rows): a copy elsewhere (a fetch)
    would take the header for the rows."""
    for v in node.outputs:
        if not growable(v):
            continue
        keys = program.stores_of(v)
        if len(keys) > 1 or any(key[0] != "arena" for key in keys):
            raise RegionOnHost(f"{node.describe()} keeps values for its gradient or the "
                               "arrays it appends to where the runtime would read them: "
                               "it runs on the host", node.name)


def _emit_body(program, region, name, lower_kernels):
    """(entry function, its Program) of a body module, emitted into program's module."""
    body = Program(region, enclosing=program)
    calls, _ = lower_kernels(body, prefix=name + "_")
    return emit_entry(body, calls, name=name), body


class _RegionEmitter:
    """The body of a region kernel's function: pointers to its storages and scratch."""

    def __init__(self, program, builder, buffers, syms, scratch_key):
        self.program, self.b, self.buffers, self.syms = program, builder, buffers, syms
        self.scratch_key = scratch_key
        self.fail = None

    def dim(self, d):
        return self.program.emit_dim(self.b, d, self.syms)

    def input_pointer(self, value):
        """Where the kernel reads an input: its storage, or the rows a growable stack's
        header points to."""
        p = self.buffers[self.program.storage_of(value)]
        return self.b.load(p, typ=PTR) if growable(value) else p

    def scratch(self, node):
        """{part: pointer} into the kernel's scratch (regions.scratch_parts)."""
        if self.scratch_key is not None:
            base = self.buffers[self.scratch_key]
        else:  # no scratch: every part is empty (zero-size loop variables, no arenas)
            base = self.b.alloca(ir.ArrayType(I8, _ALIGN))
        out, offset = {}, 0
        for what, size in scratch_parts(node, _ALIGN):
            out[what] = self.b.gep(base, [self.dim(offset)], source_etype=I8)
            offset = offset + size
        return out

    def copy(self, dst, src, value):
        self.copy_bytes(dst, src, self.dim(value_bytes(value)))

    def copy_bytes(self, dst, src, nbytes):
        memcpy = self.program.llvm.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
            self.program.llvm, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)]),
            "llvm.memcpy.p0.p0.i64")
        self.b.call(memcpy, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])

    def zero(self, dst, value):
        self.zero_bytes(dst, self.dim(value_bytes(value)))

    def zero_bytes(self, dst, nbytes):
        memset = self.program.llvm.globals.get("llvm.memset.p0.i64") or ir.Function(
            self.program.llvm, ir.FunctionType(ir.VoidType(), [PTR, I8, I64, ir.IntType(1)]),
            "llvm.memset.p0.i64")
        self.b.call(memset, [dst, ir.Constant(I8, 0), nbytes, ir.Constant(ir.IntType(1), 0)])

    def zero_rows_past(self, rows, stack, trips):
        """Zeros the rows of `stack` (at `rows`) from row `trips` on: those the loop did
        not write (check_stack_room kept `trips` within them)."""
        written = self.b.mul(self.b.zext(trips, I64), self.dim(row_bytes(stack)))
        self.zero_bytes(self.b.gep(rows, [written], source_etype=I8),
                        self.b.sub(self.dim(value_bytes(stack)), written))

    def pointer_array(self, pointers):
        """An array of pointers on the stack, set to `pointers` (None: set later)."""
        array = self.b.alloca(ir.ArrayType(PTR, max(len(pointers), 1)))
        for i, p in enumerate(pointers):
            if p is not None:
                self.set_pointer(array, i, p)
        return array

    def set_pointer(self, array, i, p):
        self.b.store(p, self.b.gep(array, [ir.Constant(I64, 0), ir.Constant(I64, i)]))

    def load_pointer(self, array, i):
        return self.b.load(self.b.gep(array, [ir.Constant(I64, 0), ir.Constant(I64, i)]),
                           typ=PTR)

    def call(self, entry, feeds, fetches, arena):
        """Calls a body's entry; a nonzero status returns from the kernel at once. Then
        copies the body outputs its kernels do not write (module docstring)."""
        fn, body = entry
        status = self.b.call(fn, [feeds, fetches, self.buffers[_TABLES[0]],
                                  self.buffers[_TABLES[1]], arena, self.syms])
        ok = self.b.append_basic_block("ok")
        self.b.cbranch(self.b.icmp_signed("!=", status, ir.Constant(I32, 0)),
                       self.failure_exit(), ok)
        self.failures.append((status, self.b.block))
        self.b.position_at_end(ok)
        for j, v in enumerate(body.module.outputs):
            self.copy_fetch(body, j, v, feeds, fetches)

    def failure_exit(self):
        """The block every failure branches to (finish returns its status there)."""
        if self.fail is None:
            self.fail = self.b.function.append_basic_block("failed")
            self.failures = []
        return self.fail

    def fail_with(self, status):
        """Branches to the failure exit with `status`; the builder then continues in a
        block nothing reaches."""
        self.b.branch(self.failure_exit())
        self.failures.append((status, self.b.block))
        self.b.position_at_end(self.b.function.append_basic_block("unreachable"))

    def copy_fetch(self, body, j, value, feeds, fetches):
        source = body.fetch_source(value)
        kind, index = source["source"], source["index"]
        if kind == "kernel" and index == j:
            return  # its kernel wrote it
        if kind == "kernel":
            src = self.load_pointer(fetches, index)
        elif kind == "feed":
            src = self.load_pointer(feeds, index)
        else:
            table = self.buffers[_TABLES[0] if kind == "variable" else _TABLES[1]]
            src = self.b.load(self.b.gep(table, [ir.Constant(I64, index)], source_etype=PTR),
                              typ=PTR)
        self.copy(self.load_pointer(fetches, j), src, value)

    def finish(self, heap=None):
        """The returns: 0, or the status of the first failure; both free `heap`'s
        buffers."""
        if heap is not None:
            heap.free_all()
        self.b.ret(ir.Constant(I32, 0))
        if self.fail is not None:
            self.b.position_at_end(self.fail)
            status = self.b.phi(I32)
            for value, block in self.failures:
                status.add_incoming(value, block)
            if heap is not None:
                heap.free_all()
            self.b.ret(status)

    # ------------------------------------------------------------------ While
    def while_loop(self, node, entries, stores):
        b = self.b
        n = node.attrs["num_loop_vars"]
        cond_entry, body_entry = entries["cond"], entries["body"]
        n_cond = len(cond_entry[1].module.params)
        n_body = len(body_entry[1].module.params)
        parts = self.scratch(node)
        inputs = [self.input_pointer(v) for v in node.value_inputs]
        carried = carried_axes(node)
        ragged = [node.outputs[n + 1 + k] for k in node.attrs.get(RAGGED_SAVED, ())]
        heap = _LoopHeap(self, node, heap_loop_vars(node),
                         [("ragged", v.index) for v in ragged if not stores.get(v)])
        for i, axis in carried:  # the dims the loop variables enter with
            self.set_dim(carried_symbol(node.name, i, axis),
                         self.dim(node.value_inputs[i].dims[axis]))
        body_params = body_entry[1].module.params
        params = {p.attrs["index"]: p.outputs[0] for p in body_params}
        first = [heap.first(i, inputs[i], node.value_inputs[i]) if i in heap.vars
                 else parts[("a", i)] for i in range(n)]
        filled = {v: self.ragged_start() for v in ragged}
        for i in range(n):
            if i not in heap.vars:
                self.copy(first[i], inputs[i], node.outputs[i])
        pred = b.alloca(I8)
        cond_feeds = self.pointer_array([None] * n + inputs[n:n_cond])
        cond_fetches = self.pointer_array([pred])
        body_feeds = self.pointer_array([None] * n + inputs[n_cond:n_cond + n_body - n])
        stacks = node.outputs[n + 1:]
        body_fetches = self.pointer_array([None] * (n + len(stacks)))
        start = b.block
        test = b.append_basic_block("loop_test")
        b.branch(test)
        b.position_at_end(test)
        in_place = written_in_place(body_entry[1].module, n) - heap.vars
        # a variable written in place keeps its one buffer; the others swap two (on the
        # heap, where its dims change: _LoopHeap)
        current = {i: first[i] if i in in_place else b.phi(PTR) for i in range(n)
                   if i not in heap.vars}
        spare = {i: b.phi(PTR) for i in range(n) if i not in in_place and i not in heap.vars}
        trips = b.phi(I32)
        current.update((i, heap.current(i)) for i in sorted(heap.vars))  # after the phis
        for i in range(n):
            if i in spare:
                current[i].add_incoming(first[i], start)
                spare[i].add_incoming(parts[("b", i)], start)
            self.set_pointer(cond_feeds, i, current[i])
        trips.add_incoming(ir.Constant(I32, 0), start)
        self.call(cond_entry, cond_feeds, cond_fetches, heap.arena("cond", parts))
        run_body = b.append_basic_block("loop_body")
        done = b.append_basic_block("loop_done")
        b.cbranch(b.icmp_unsigned("!=", b.load(pred, typ=I8), ir.Constant(I8, 0)),
                  run_body, done)
        b.position_at_end(run_body)
        self.set_forward_dims(node, inputs, current[0])
        sized = [v for v in stacks if not growable(v)]
        if sized:
            self.check_stack_room(node, sized[0], trips)
        for i in range(n):
            self.set_pointer(body_feeds, i, current[i])
            self.set_pointer(body_fetches, i, heap.spare(i, body_entry[1].module.outputs[i])
                             if i in heap.vars else spare.get(i, current[i]))
        blocks = {}  # ragged stack -> the bytes of this iteration's block
        for k, v in enumerate(stacks):  # this iteration's row (or block) of each stack
            if v in filled:
                out = body_entry[1].module.outputs[n + k]
                blocks[v] = self.dim(value_bytes(out))  # of the dims before the call
                row = self.ragged_block(v, stores, heap, filled[v], blocks[v])
            else:
                row = self.stack_row(v, stores, parts, trips)
            self.set_pointer(body_fetches, n + k, row)
        self.call(body_entry, body_feeds, body_fetches, heap.arena("body", parts))
        for v, nbytes in blocks.items():
            b.store(b.add(b.load(filled[v], typ=I64), nbytes), filled[v])
        new_dims = [(carried_symbol(node.name, i, axis),
                     self.dim(body_entry[1].module.outputs[i].dims[axis])) for i, axis in carried]
        for symbol, d in new_dims:  # each computed from the old dims before any is set
            self.set_dim(symbol, d)
        heap.swap()
        next_trips = b.add(trips, ir.Constant(I32, 1))
        for i in spare:  # the buffers just written are the current ones next time
            current[i].add_incoming(spare[i], b.block)
            spare[i].add_incoming(current[i], b.block)
        trips.add_incoming(next_trips, b.block)
        b.branch(test)
        b.position_at_end(done)
        if len(sized) + len(ragged) < len(stacks):  # the rows of the stacks that grew
            b.store(b.zext(trips, I64), b.gep(self.syms, [self.dim_slot(trips_symbol(
                node.name))], source_etype=I64))
        for v in ragged:  # their elements
            itemsize = ir.Constant(I64, np.dtype(v.dtype.name).itemsize)
            self.set_dim(ragged_symbol(node.name, v.index - n - 1),
                         b.sdiv(b.load(filled[v], typ=I64), itemsize))
        for i, axis in carried:  # the dims the loop variables leave with
            self.set_dim(leaving_symbol(node.name, i, axis),
                         self.dim(params[i].dims[axis]))
        for v in zeroed_past_trips(node):  # before their copies to other storages
            if stores.get(v):
                self.zero_rows_past(self.buffers[stores[v][0]], v, trips)
        for v, keys in stores.items():
            for key in keys:
                if v.index in heap.vars and growable(v):
                    heap.leave(v, self.buffers[key], current[v.index])
                elif v.index < n:
                    self.copy(self.buffers[key], current[v.index], v)
                elif v.index == n:  # the trip count
                    b.store(trips, self.buffers[key])
                elif key != keys[0]:  # a stack's other storages
                    self.copy(self.buffers[key], self.buffers[keys[0]], v)
        self.finish(heap)

    def set_forward_dims(self, node, inputs, counter):
        """Sets the forward loop's dims of iteration k (counter - 1) that a backward
        loop's body reads (regions.FORWARD_DIM_SLOTS): row k of the stacks of the forward
        loop variables' shapes (int32)."""
        b = self.b
        slots = node.attrs.get(FORWARD_DIM_SLOTS, ())
        if not slots:
            return
        n = node.attrs["num_loop_vars"]
        k = b.sext(b.sub(b.load(counter, typ=I32), ir.Constant(I32, 1)), I64)
        for index, rank, axis, symbol in slots:
            at = b.add(b.mul(k, ir.Constant(I64, rank)), ir.Constant(I64, axis))
            row = b.gep(inputs[n + index], [at], source_etype=I32)
            self.set_dim(symbol, b.sext(b.load(row, typ=I32), I64))

    def ragged_start(self):
        """A ragged stack's bytes filled so far (a slot of the kernel's): none."""
        filled = self.b.alloca(I64)
        self.b.store(ir.Constant(I64, 0), filled)
        return filled

    def ragged_block(self, stack, stores, heap, filled, nbytes):
        """Where this iteration's block of a ragged stack goes (ops/while_v2.py
        RAGGED_SAVED: each iteration's elements after the last's): past the `filled`
        bytes of its rows on the heap (the entry's, through its header), reallocated
        to at least twice their room when the block does not fit; a stack no kernel
        reads takes each block in a buffer of the kernel's heap instead."""
        b = self.b
        keys = stores.get(stack)
        if not keys:
            return heap.ensure(("ragged", stack.index), nbytes)
        header = self.buffers[keys[0]]
        room_slot = b.gep(header, [ir.Constant(I64, 8)], source_etype=I8)
        room = b.load(room_slot, typ=I64)
        used = b.load(filled, typ=I64)
        wanted = b.add(used, nbytes)
        with b.if_then(b.icmp_signed(">", wanted, room), likely=False):
            doubled = b.mul(room, ir.Constant(I64, 2))
            size = b.select(b.icmp_signed(">", wanted, doubled), wanted, doubled)
            size = b.select(b.icmp_signed(">", size, ir.Constant(I64, 0)), size,
                            ir.Constant(I64, 1))  # realloc of 0 bytes may give NULL
            rows = b.call(libc(self.program.llvm, "realloc"), [b.load(header, typ=PTR), size])
            with b.if_then(b.icmp_unsigned("==", b.ptrtoint(rows, I64), ir.Constant(I64, 0)),
                           likely=False):
                heap.fail(size)  # the rows it had stay in the header, which the entry frees
            b.store(rows, header)
            b.store(size, room_slot)
        return b.gep(b.load(header, typ=PTR), [used], source_etype=I8)

    def set_dim(self, symbol, value):
        self.b.store(value, self.b.gep(self.syms, [self.dim_slot(symbol)], source_etype=I64))

    def check_stack_room(self, node, stack, trips):
        """Fails with an error naming the While, before its body runs, when iteration
        `trips` would write past the rows of its stacks (the bound on the trip count that
        lowering sized them by, lower.py _stack_rows, which the cond should never let the
        trip count reach)."""
        b = self.b
        rows = self.dim(stack.dims[0])
        site = self.program.error_site(
            node, "the loop ran iteration {0} but the values it keeps for its gradient "
                  "have rows for {1} iterations (the bound its cond gives)", args=["int"] * 2)
        overrun = b.function.append_basic_block("stack_overrun")
        ok = b.append_basic_block("stack_room")
        index = b.zext(trips, I64)
        b.cbranch(b.icmp_signed(">=", index, rows), overrun, ok)
        b.position_at_end(overrun)
        for k, value in enumerate((index, rows)):
            b.store(value, b.gep(self.syms, [ir.Constant(I64, self.program.error_detail_base
                                                         + k)], source_etype=I64))
        b.ret(ir.Constant(I32, site + 1))
        b.position_at_end(ok)

    def stack_row(self, stack, stores, parts, trips):
        """Where iteration `trips` writes its value saved in `stack`: that row of the
        stack's storage (check_stack_room has made sure it is one, grow_stack makes it
        one), or the scratch row of a stack no kernel reads."""
        keys = stores.get(stack)
        if not keys:
            return parts[("row", stack.index)]
        rows = self.buffers[keys[0]]
        if growable(stack):
            rows = self.grow_stack(stack, rows, trips)
        offset = self.b.mul(self.b.zext(trips, I64), self.dim(row_bytes(stack)))
        return self.b.gep(rows, [offset], source_etype=I8)

    def dim_slot(self, symbol):
        return ir.Constant(I64, self.program.symbol_index(symbol))

    def grow_stack(self, stack, header, trips):
        """The rows of a growable stack (regions.py) once they have room for row `trips`:
        when they have not, reallocated with twice the rows (GROWABLE_FIRST_ROWS the first
        time); a failed allocation returns the While's error (the rows it had stay in the
        header, which the entry frees)."""
        b = self.b
        room_slot = b.gep(header, [ir.Constant(I64, 8)], source_etype=I8)
        room = b.load(room_slot, typ=I64)
        grow = b.append_basic_block("stack_grow")
        ready = b.append_basic_block("stack_ready")
        b.cbranch(b.icmp_signed(">=", b.zext(trips, I64), room), grow, ready)
        b.position_at_end(grow)
        doubled = b.mul(room, ir.Constant(I64, 2))
        wanted = b.select(b.icmp_signed("==", room, ir.Constant(I64, 0)),
                          ir.Constant(I64, GROWABLE_FIRST_ROWS), doubled)
        nbytes = b.mul(wanted, self.dim(row_bytes(stack)))
        nbytes = b.select(b.icmp_signed(">", nbytes, ir.Constant(I64, 0)), nbytes,
                          ir.Constant(I64, 1))  # realloc of 0 bytes may give NULL
        rows = b.call(libc(self.program.llvm, "realloc"), [b.load(header, typ=PTR), nbytes])
        failed = b.function.append_basic_block("stack_alloc_failed")
        grown = b.append_basic_block("stack_grown")
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(rows, I64), ir.Constant(I64, 0)),
                  failed, grown)
        b.position_at_end(failed)
        site = self.program.error_site(
            stack.node, "could not allocate {0} bytes for the values the loop keeps for its "
                        "gradient ({1} iterations)", "ResourceExhaustedError",
            args=["int"] * 2)
        for k, value in enumerate((nbytes, wanted)):
            b.store(value, b.gep(self.syms, [ir.Constant(I64, self.program.error_detail_base
                                                         + k)], source_etype=I64))
        b.ret(ir.Constant(I32, site + 1))
        b.position_at_end(grown)
        b.store(rows, header)
        b.store(wanted, room_slot)
        b.branch(ready)
        b.position_at_end(ready)
        return b.load(header, typ=PTR)

    # --------------------------------------------------------------------- If
    def branch(self, node, entries, stores):
        b = self.b
        parts = self.scratch(node)
        inputs = [self.input_pointer(v) for v in node.value_inputs]
        outputs = [self.buffers[stores[v][0]] if stores.get(v) else parts[("slot", v.index)]
                   for v in node.outputs]
        mine = branch_outputs(node)
        n_then = len(entries["then"][1].module.params)
        then_feeds = self.pointer_array(inputs[1:1 + n_then])
        else_feeds = self.pointer_array(inputs[1 + n_then:])
        taken = b.icmp_unsigned("!=", b.load(inputs[0], typ=I8), ir.Constant(I8, 0))
        then_block = b.append_basic_block("then")
        else_block = b.append_basic_block("else")
        join = b.append_basic_block("join")
        b.cbranch(taken, then_block, else_block)
        for key, block, feeds in (("then", then_block, then_feeds),
                                  ("else", else_block, else_feeds)):
            b.position_at_end(block)
            fetches = self.pointer_array([outputs[i] for i in mine[key]])
            self.call(entries[key], feeds, fetches, parts[("arena", key)])
            for i in set(range(len(outputs))) - set(mine[key]):  # the other's saved values
                self.zero(outputs[i], node.outputs[i])
            b.branch(join)
        b.position_at_end(join)
        for v, keys in stores.items():
            for key in keys[1:]:
                self.copy(self.buffers[key], outputs[v.index], v)
        self.finish()


class _LoopHeap:
    """The buffers of a While kernel whose sizes read its loop variables' carried dims
    (regions.carried_axes), which no plan made before the run can size: two per such
    loop variable (the current value and the one the body writes, swapped each
    iteration), the arena of each body whose size reads them and `scratch` (the blocks
    of a ragged stack no kernel reads). Each is on the C heap,
    64-byte aligned as the scratch's parts are, made bigger (at least doubled) when an
    iteration needs more, and freed when the kernel returns, failing or not. The loop
    variables' values after the loop go to their headers (the entry's heap values)."""

    def __init__(self, emit, node, variables, scratch=()):
        self.emit, self.node, self.vars = emit, node, variables
        self.slots = {}  # what -> (the pointer malloc gave, its bytes)
        wanted = list(scratch) + [("cur", i) for i in sorted(variables)] + \
            [("spare", i) for i in sorted(variables)] + \
            [("arena", key) for key, region in node.regions.items()
             if reads_carried_dims(region.memory_plan.arena_bytes)]
        b = emit.b
        for what in wanted:
            raw, room = b.alloca(PTR), b.alloca(I64)
            b.store(ir.Constant(PTR, None), raw)
            b.store(ir.Constant(I64, 0), room)
            self.slots[what] = (raw, room)

    def aligned(self, what):
        """The buffer's first 64-byte boundary (a gep from what malloc gave: a loaded
        file's code may not make pointers of integers, runtime/verify.py)."""
        b = self.emit.b
        raw = b.load(self.slots[what][0], typ=PTR)
        address = b.ptrtoint(raw, I64)
        skip = b.and_(b.sub(ir.Constant(I64, 0), address), ir.Constant(I64, _ALIGN - 1))
        return b.gep(raw, [skip], source_etype=I8)

    def ensure(self, what, nbytes):
        """The buffer `what` with room for nbytes (its old contents not kept)."""
        b, emit = self.emit.b, self.emit
        raw_slot, room_slot = self.slots[what]
        room = b.load(room_slot, typ=I64)
        with b.if_then(b.icmp_signed(">", nbytes, room), likely=False):
            doubled = b.mul(room, ir.Constant(I64, 2))
            wanted = b.select(b.icmp_signed(">", nbytes, doubled), nbytes, doubled)
            b.call(libc(emit.program.llvm, "free"), [b.load(raw_slot, typ=PTR)])
            raw = b.call(libc(emit.program.llvm, "malloc"),
                         [b.add(wanted, ir.Constant(I64, _ALIGN))])
            b.store(raw, raw_slot)
            failed = b.icmp_unsigned("==", b.ptrtoint(raw, I64), ir.Constant(I64, 0))
            with b.if_then(failed, likely=False):
                b.store(ir.Constant(I64, 0), room_slot)
                self.fail(wanted)
            b.store(wanted, room_slot)
        return self.aligned(what)

    def fail(self, nbytes):
        """Returns (through the kernel's failure exit, which frees) the While's error."""
        b, emit = self.emit.b, self.emit
        site = emit.program.error_site(
            self.node, "could not allocate {0} bytes for a loop variable whose dims change "
                       "between iterations, or for what its body computes of it",
            "ResourceExhaustedError", args=["int"])
        b.store(nbytes, b.gep(emit.syms, [ir.Constant(I64, emit.program.error_detail_base)],
                              source_etype=I64))
        emit.fail_with(ir.Constant(I32, site + 1))

    def first(self, i, source, entering):
        """Loop variable i's buffer, holding the value it enters with (`entering`, the
        While's input: its dims, not the body's, which a backward loop sets only in the
        iteration)."""
        nbytes = self.emit.dim(value_bytes(entering))
        self.emit.copy_bytes(self.ensure(("cur", i), nbytes), source, nbytes)

    def current(self, i):
        return self.aligned(("cur", i))

    def spare(self, i, out):
        """Where the body writes loop variable i's next value, `out` (its body output)."""
        return self.ensure(("spare", i), self.emit.dim(value_bytes(out)))

    def swap(self):
        b = self.emit.b
        for i in sorted(self.vars):
            for cur, spare in zip(self.slots[("cur", i)], self.slots[("spare", i)]):
                kind = PTR if cur is self.slots[("cur", i)][0] else I64
                old = b.load(cur, typ=kind)
                b.store(b.load(spare, typ=kind), cur)
                b.store(old, spare)

    def arena(self, key, parts):
        """Body `key`'s arena: on the heap where its size reads the carried dims."""
        if ("arena", key) not in self.slots:
            return parts[("arena", key)]
        region = self.node.regions[key]
        return self.ensure(("arena", key), self.emit.dim(region.memory_plan.arena_bytes))

    def leave(self, value, header, current):
        """The loop variable's value after the loop into the rows of its header (an
        entry's heap value, regions.growable), sized now that its dims are set."""
        b, emit = self.emit.b, self.emit
        nbytes = emit.dim(value_bytes(value))
        alloc = b.select(b.icmp_signed(">", nbytes, ir.Constant(I64, 0)), nbytes,
                         ir.Constant(I64, 1))  # realloc of 0 bytes may give NULL
        rows = b.call(libc(emit.program.llvm, "realloc"), [b.load(header, typ=PTR), alloc])
        with b.if_then(b.icmp_unsigned("==", b.ptrtoint(rows, I64), ir.Constant(I64, 0)),
                       likely=False):
            self.fail(alloc)
        b.store(rows, header)
        b.store(ir.Constant(I64, 1), b.gep(header, [ir.Constant(I64, 8)], source_etype=I8))
        emit.copy_bytes(rows, current, nbytes)

    def free_all(self):
        b = self.emit.b
        for raw_slot, room_slot in self.slots.values():
            b.call(libc(self.emit.program.llvm, "free"), [b.load(raw_slot, typ=PTR)])
            b.store(ir.Constant(PTR, None), raw_slot)
            b.store(ir.Constant(I64, 0), room_slot)
