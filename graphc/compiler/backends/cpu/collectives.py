"""graphc.distribute's MpiAllreduce and MpiBroadcast as calls from compiled code into MPI.

A collective compiles into the CPU's code only where graphc.distribute says so (the op's
`native_on_cpu` fact: a job of several ranks whose MPI library runtime/mpi_library.py
bound, static dims); elsewhere it stays a host op between native stages. Its kernel does
what the host kernel (graphc/distribute/collective_ops.py) does, with the same calls, so
the results are the same bits:

  MpiAllreduce  MPI_Allreduce(in, out, SUM); an Average then divides `out` by the job's
                size in the tensor's dtype (NumPy's np.divide(out, size, out=out))
  MpiBroadcast  out = in, then MPI_Bcast(out, root)

The handles (communicator, datatype, op) and the job's size are read at run time from
runtime.mpi_library.WORDS (its docstring says why they are words, passed as i64); the
kernel marks the wait it starts there for graphc.distribute's watchdog. A nonzero MPI
status is an InternalError naming the op. Which collectives run, in which order, is
agreed among the ranks before the entry is called (graphc.distribute.native).
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.loops.views import LoweringError
from kernels.loops import I32, I64, PTR, for_range
from runtime import mpi_library

_FLOATS = {"float32": ir.FloatType(), "float64": ir.DoubleType()}
_MAX_COUNT = 2**31 - 1


def lower_allreduce(program, kernel, name, scalar_ops, rules):
    node, out, count, ins, outs, (fn, b, ptrs, syms) = _collective(program, kernel, name)
    words = _Words(program, b)
    status = words.call_marked(node, "MPI_Allreduce", [PTR, PTR, I32, I64, I64, I64], [
        ptrs[ins[0]], ptrs[outs[0]], ir.Constant(I32, count), words.datatype(out),
        words.load(mpi_library.SUM), words.load(mpi_library.COMM)])
    fail = _fail_on(program, b, syms, node, "MPI_Allreduce", status)
    if node.attrs["reduction"] == "average":
        _divide(b, ptrs[outs[0]], count, words.load(mpi_library.SIZE), out.dtype.name)
    _copy_to_the_others(program, b, ptrs, outs, count * out.dtype.size)
    b.ret(ir.Constant(I32, 0))
    fail()
    return fn, list(dict.fromkeys(ins + outs))


def lower_broadcast(program, kernel, name, scalar_ops, rules):
    node, out, count, ins, outs, (fn, b, ptrs, syms) = _collective(program, kernel, name)
    nbytes = count * out.dtype.size
    _memcpy(program, b, ptrs[outs[0]], ptrs[ins[0]], nbytes)
    words = _Words(program, b)
    status = words.call_marked(node, "MPI_Bcast", [PTR, I32, I64, I32, I64], [
        ptrs[outs[0]], ir.Constant(I32, count), words.datatype(out),
        ir.Constant(I32, node.attrs["root_rank"]), words.load(mpi_library.COMM)])
    fail = _fail_on(program, b, syms, node, "MPI_Bcast", status)
    _copy_to_the_others(program, b, ptrs, outs, nbytes)
    b.ret(ir.Constant(I32, 0))
    fail()
    return fn, list(dict.fromkeys(ins + outs))


COLLECTIVE_LOWERINGS = {"MpiAllreduce": lower_allreduce, "MpiBroadcast": lower_broadcast}


def scratch_bytes(kernel):
    """A collective whose result nothing reads (a gradient's allreduce whose users read
    only its dims) still runs, since the other ranks wait for it: into scratch memory."""
    out = kernel.main.outputs[0]
    return 0 if out.uses else _count(kernel.main) * out.dtype.size


def _count(node):
    dims = node.outputs[0].dims
    if not all(isinstance(d, int) for d in dims):
        raise LoweringError(f"{node.describe()}: a native collective needs static dims, "
                            f"got {dims}")
    count = int(np.prod(dims, dtype=np.int64))
    if count > _MAX_COUNT:
        raise LoweringError(f"{node.describe()}: {count} elements exceed MPI's int count")
    return count


def _collective(program, kernel, name):
    """The node, its output, the element count (MPI's int), the storage keys and the
    kernel function (a pointer per key, then the syms)."""
    node = kernel.main
    src, out = node.inputs[0], node.outputs[0]
    count = _count(node)
    ins = [program.storage_of(src)]
    outs = program.stores_of(out) or [program.scratch_of(kernel)]
    if outs == [None]:
        raise LoweringError(f"{node.describe()} has no buffer")
    if ins[0] in outs:  # MPI forbids aliased send and receive buffers
        raise LoweringError(f"{node.describe()} was planned in place of its input")
    keys = list(dict.fromkeys(ins + outs))
    fn = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * (len(keys) + 1)), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    return node, out, count, ins, outs, (fn, b, dict(zip(keys, fn.args)), fn.args[-1])


class _Words:
    """Loads and stores of runtime.mpi_library.WORDS (the global it exports)."""

    def __init__(self, program, b):
        self.program, self.b = program, b
        t = ir.ArrayType(I64, mpi_library.SLOTS)
        self.words = program.llvm.globals.get(mpi_library.GLOBAL) or \
            ir.GlobalVariable(program.llvm, t, mpi_library.GLOBAL)
        self.words.linkage = "external"

    def slot(self, k):
        return self.b.gep(self.words, [ir.Constant(I64, 0), ir.Constant(I64, k)])

    def load(self, k):
        return self.b.load(self.slot(k), typ=I64)

    def datatype(self, value):
        return self.load(mpi_library.DATATYPE[value.dtype.name])

    def call_marked(self, node, function, arg_types, args):
        """Calls MPI `function`, with IN_COLLECTIVE holding the node's tag meanwhile and
        CALLS counting the call (the watchdog tells two calls of one op apart by it)."""
        b = self.b
        calls = self.slot(mpi_library.CALLS)
        b.store(b.add(b.load(calls, typ=I64), ir.Constant(I64, 1)), calls)
        b.store(ir.Constant(I64, mpi_library.tag(node.name)), self.slot(mpi_library.IN_COLLECTIVE))
        callee = self.program.llvm.globals.get(function) or ir.Function(
            self.program.llvm, ir.FunctionType(I32, arg_types), function)
        status = b.call(callee, args)
        b.store(ir.Constant(I64, 0), self.slot(mpi_library.IN_COLLECTIVE))
        return status


def _fail_on(program, b, syms, node, function, status):
    """Branches to a return of the error site when `status` is nonzero; returns what
    emits that block (after the function's own return)."""
    site = program.error_site(node, f"{function} failed with MPI error code {{0}}",
                              class_name="InternalError", args=["int"])
    failed = b.function.append_basic_block("failed")
    ok = b.append_basic_block("ok")
    b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), failed, ok)
    b.position_at_end(ok)

    def emit():
        b.position_at_end(failed)
        slot = b.gep(syms, [ir.Constant(I64, program.error_detail_base)], source_etype=I64)
        b.store(b.sext(status, I64), slot)
        b.ret(ir.Constant(I32, site + 1))
    return emit


def _divide(b, data, count, size, dtype):
    t = _FLOATS[dtype]
    divisor = b.sitofp(size, t)
    with for_range(b, ir.Constant(I64, count), name="i") as i:
        p = b.gep(data, [i], source_etype=t)
        b.store(b.fdiv(b.load(p, typ=t), divisor), p)


def _copy_to_the_others(program, b, ptrs, outs, nbytes):
    for key in outs[1:]:
        _memcpy(program, b, ptrs[key], ptrs[outs[0]], nbytes)


def _memcpy(program, b, dst, src, nbytes):
    if nbytes == 0:
        return
    i1 = ir.IntType(1)
    memcpy = program.llvm.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        program.llvm, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, i1]),
        "llvm.memcpy.p0.p0.i64")
    b.call(memcpy, [dst, src, ir.Constant(I64, nbytes), ir.Constant(i1, 0)])
