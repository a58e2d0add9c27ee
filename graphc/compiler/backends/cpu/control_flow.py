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
    maximum_iterations is a loop variable the cond already tests (while_v2.py). At the end
    the current buffers are copied to the node's outputs.
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
from graphc.compiler.lower import LoweringError, RegionOnHost
from graphc.compiler.loops.program import Program
from graphc.framework.op_def import ROW_WRITE_OPS
from kernels.loops import I8, I32, I64, PTR

_ALIGN = 64  # bytes: every part of the scratch starts on a cache line
_TABLES = [("table", "var"), ("table", "const")]


def region_scratch_bytes(kernel):
    """The scratch bytes of a While or If kernel: the sum of its parts (_parts)."""
    return sum((size for _, size in _parts(kernel.main)), 0)


def lower_region_kernel(program, kernel, name, lower_kernels):
    """The LLVM function of a While or If kernel and its storage keys; lower_kernels: the
    backend's (program, prefix) -> ([(function, storage keys)], names), for the bodies."""
    node = kernel.main
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


def _emit_body(program, region, name, lower_kernels):
    """(entry function, its Program) of a body module, emitted into program's module."""
    body = Program(region, enclosing=program)
    calls, _ = lower_kernels(body, prefix=name + "_")
    return emit_entry(body, calls, name=name), body


def written_in_place(body, n):
    """The loop variables (indices < n) that a While's body module may write into the
    buffer it reads them from: a flow that the body's output takes from a row write
    (ROW_WRITE_OPS: their kernels copy the input only when handed another buffer) of that
    same flow while no kernel after the write's reads the old flow. Any other loop
    variable needs a second buffer: its new value is computed while its old one is still
    read. A [T, ...] flow copied every iteration would make a loop of T steps O(T^2)."""
    params = {p.attrs["index"]: p.outputs[0] for p in body.params}
    aliases = getattr(body, "aliases", None) or {}
    kernel_of = {node: t for t, k in enumerate(body.kernels) for node in k.nodes}
    out = set()
    for j, v in enumerate(body.outputs[:n]):
        p = params.get(j)
        node = v.node
        if p is None or node.type not in ROW_WRITE_OPS or node.inputs[v.index] is not p \
                or body.outputs.count(v) != 1 or p in body.outputs or node not in kernel_of:
            continue
        later = body.kernels[kernel_of[node] + 1:]
        if not any(_resolve(x, aliases) is p for k in later for x in k.inputs):
            out.add(j)
    return out


def _resolve(value, aliases):
    while value in aliases:
        value = aliases[value]
    return value


def _parts(node):
    """[(what, bytes)] of a region node's scratch, in order: each body's arena, then for a
    While two buffers per loop variable, for an If a slot per output."""
    parts = [(("arena", key), _aligned(region.memory_plan.arena_bytes))
             for key, region in node.regions.items()]
    if node.type == "While":
        n = node.attrs["num_loop_vars"]
        for side in ("a", "b"):
            parts += [((side, i), _aligned(_nbytes(v))) for i, v in enumerate(node.outputs[:n])]
        # a row for each stack no kernel reads (the body writes its saved value anyway)
        parts += [(("row", v.index), _aligned(_row_bytes(v))) for v in node.outputs[n + 1:]]
    else:
        parts += [(("slot", i), _aligned(_nbytes(v))) for i, v in enumerate(node.outputs)]
    return parts


def _branch_outputs(node):
    """{branch: [the If's output index of each of its module's outputs]}: the If's
    outputs, then its saved intermediates of that branch (cond_v2.py)."""
    saved = [pair[0] for pair in node.attrs.get("saved", ())]
    n_out = len(node.outputs) - len(saved)
    return {key: list(range(n_out)) + [n_out + k for k, b in enumerate(saved) if b == key]
            for key in ("then", "else")}


def _nbytes(value):
    size = np.dtype(value.dtype.name).itemsize
    for d in value.dims:
        size = size * d
    return size


def _row_bytes(stack):
    """The bytes of one iteration's value in a While's stack [rows, *dims]."""
    size = np.dtype(stack.dtype.name).itemsize
    for d in stack.dims[1:]:
        size = size * d
    return size


def _aligned(nbytes):
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class _RegionEmitter:
    """The body of a region kernel's function: pointers to its storages and scratch."""

    def __init__(self, program, builder, buffers, syms, scratch_key):
        self.program, self.b, self.buffers, self.syms = program, builder, buffers, syms
        self.scratch_key = scratch_key
        self.fail = None

    def dim(self, d):
        return self.program.emit_dim(self.b, d, self.syms)

    def scratch(self, node):
        """{part: pointer} into the kernel's scratch (_parts)."""
        if self.scratch_key is not None:
            base = self.buffers[self.scratch_key]
        else:  # no scratch: every part is empty (zero-size loop variables, no arenas)
            base = self.b.alloca(ir.ArrayType(I8, _ALIGN))
        out, offset = {}, 0
        for what, size in _parts(node):
            out[what] = self.b.gep(base, [self.dim(offset)], source_etype=I8)
            offset = offset + size
        return out

    def copy(self, dst, src, value):
        memcpy = self.program.llvm.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
            self.program.llvm, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)]),
            "llvm.memcpy.p0.p0.i64")
        self.b.call(memcpy, [dst, src, self.dim(_nbytes(value)), ir.Constant(ir.IntType(1), 0)])

    def zero(self, dst, value):
        memset = self.program.llvm.globals.get("llvm.memset.p0.i64") or ir.Function(
            self.program.llvm, ir.FunctionType(ir.VoidType(), [PTR, I8, I64, ir.IntType(1)]),
            "llvm.memset.p0.i64")
        self.b.call(memset, [dst, ir.Constant(I8, 0), self.dim(_nbytes(value)),
                             ir.Constant(ir.IntType(1), 0)])

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
        if self.fail is None:
            self.fail = self.b.function.append_basic_block("failed")
            self.failures = []
        self.b.cbranch(self.b.icmp_signed("!=", status, ir.Constant(I32, 0)), self.fail, ok)
        self.failures.append((status, self.b.block))
        self.b.position_at_end(ok)
        for j, v in enumerate(body.module.outputs):
            self.copy_fetch(body, j, v, feeds, fetches)

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

    def finish(self):
        self.b.ret(ir.Constant(I32, 0))
        if self.fail is not None:
            self.b.position_at_end(self.fail)
            status = self.b.phi(I32)
            for value, block in self.failures:
                status.add_incoming(value, block)
            self.b.ret(status)

    # ------------------------------------------------------------------ While
    def while_loop(self, node, entries, stores):
        b = self.b
        n = node.attrs["num_loop_vars"]
        cond_entry, body_entry = entries["cond"], entries["body"]
        n_cond = len(cond_entry[1].module.params)
        n_body = len(body_entry[1].module.params)
        parts = self.scratch(node)
        inputs = [self.buffers[self.program.storage_of(v)] for v in node.value_inputs]
        first = [parts[("a", i)] for i in range(n)]
        for i in range(n):
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
        in_place = written_in_place(body_entry[1].module, n)
        # a variable written in place keeps its one buffer; the others swap two
        current = {i: first[i] if i in in_place else b.phi(PTR) for i in range(n)}
        spare = {i: b.phi(PTR) for i in range(n) if i not in in_place}
        trips = b.phi(I32)
        for i in range(n):
            if i in spare:
                current[i].add_incoming(first[i], start)
                spare[i].add_incoming(parts[("b", i)], start)
            self.set_pointer(cond_feeds, i, current[i])
        trips.add_incoming(ir.Constant(I32, 0), start)
        self.call(cond_entry, cond_feeds, cond_fetches, parts[("arena", "cond")])
        run_body = b.append_basic_block("loop_body")
        done = b.append_basic_block("loop_done")
        b.cbranch(b.icmp_unsigned("!=", b.load(pred, typ=I8), ir.Constant(I8, 0)),
                  run_body, done)
        b.position_at_end(run_body)
        for i in range(n):
            self.set_pointer(body_feeds, i, current[i])
            self.set_pointer(body_fetches, i, spare.get(i, current[i]))
        for k, v in enumerate(stacks):  # this iteration's row of each stack
            self.set_pointer(body_fetches, n + k, self.stack_row(v, stores, parts, trips))
        self.call(body_entry, body_feeds, body_fetches, parts[("arena", "body")])
        next_trips = b.add(trips, ir.Constant(I32, 1))
        for i in spare:  # the buffers just written are the current ones next time
            current[i].add_incoming(spare[i], b.block)
            spare[i].add_incoming(current[i], b.block)
        trips.add_incoming(next_trips, b.block)
        b.branch(test)
        b.position_at_end(done)
        for v, keys in stores.items():
            for key in keys:
                if v.index < n:
                    self.copy(self.buffers[key], current[v.index], v)
                elif v.index == n:  # the trip count
                    b.store(trips, self.buffers[key])
                elif key != keys[0]:  # a stack's other storages
                    self.copy(self.buffers[key], self.buffers[keys[0]], v)
        self.finish()

    def stack_row(self, stack, stores, parts, trips):
        """Where iteration `trips` writes its value saved in `stack`: that row of the
        stack's storage (lowering sized its rows by maximum_iterations, which the trip
        count never reaches inside the body), or the scratch row of a stack no kernel
        reads."""
        keys = stores.get(stack)
        if not keys:
            return parts[("row", stack.index)]
        offset = self.b.mul(self.b.zext(trips, I64), self.dim(_row_bytes(stack)))
        return self.b.gep(self.buffers[keys[0]], [offset], source_etype=I8)

    # --------------------------------------------------------------------- If
    def branch(self, node, entries, stores):
        b = self.b
        parts = self.scratch(node)
        inputs = [self.buffers[self.program.storage_of(v)] for v in node.value_inputs]
        outputs = [self.buffers[stores[v][0]] if stores.get(v) else parts[("slot", v.index)]
                   for v in node.outputs]
        mine = _branch_outputs(node)
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
