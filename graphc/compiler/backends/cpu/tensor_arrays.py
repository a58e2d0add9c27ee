"""TensorArray ops on the CPU (graphc/ops/tensor_array_ops.py: an array is its two flows,
values [size, *element] and written [size] bool), each a function of row copies:

  TensorArrayV3        both flows zeroed
  TensorArrayGatherV3  out[r] = values[indices[r]]
  TensorArrayScatterV3 values' = values, written' = written (a copy, skipped when the
                       kernel writes in place: a native loop hands a loop variable's
                       scatter the buffer it reads, control_flow.py), then
                       values'[indices[r]] = x[r], written'[indices[r]] = true

with the reference kernels' checks, in their words, naming the op and the user's line:
an index outside [0, size), a write to an element written before (all indices checked
before any is written, as the reference does), a read of one never written when the
element shape is not fully known. Writes that grow an array (dynamic_size) stay on the
host (compiled_executor.is_host_op) but in a loop appending to it (regions.py
appended_arrays), which makes it a stack growing on the heap: the kernels here then get
its rows from the entry, as any kernel (entry.py), and its size is the loop's trip count.
Elements whose shape the lowering does not know stay on the host too.
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.loops.tensor_array_grads import gather_grad_operands, scatter_grad_operands
from graphc.compiler.loops.views import LoweringError
from graphc.compiler.schedule.kernel import dims_equal
from kernels.loops import I8, I32, I64, PTR, for_range

_I1 = ir.IntType(1)


def lower_create(program, kernel, name, scalar_ops, rules):
    node = kernel.main
    stores = [(v, key) for v in node.outputs for key in program.stores_of(v)]
    fn, b, ptrs, syms = _function(program, name, [key for _, key in stores])
    for v, key in stores:
        _memset_zero(program, b, ptrs[key], _bytes(program, b, syms, v.dims, v))
    b.ret(ir.Constant(I32, 0))
    return fn, list(dict.fromkeys(key for _, key in stores))


def lower_gather(program, kernel, name, scalar_ops, rules):
    node = kernel.main
    values, written, indices = node.inputs
    out = node.outputs[0]
    elem = out.dims[len(indices.dims):]
    if not dims_equal(elem, values.dims[1:]):
        raise LoweringError(f"{node.describe()} reads elements of dims {elem} from an array "
                            f"of dims {values.dims}")
    ins, outs, (fn, b, ptrs, syms) = _row_kernel(program, name, node,
                                                 (values, written, indices), out)
    rows = _count(program, b, syms, indices.dims)
    size = program.emit_dim(b, values.dims[0], syms)
    row_bytes = _bytes(program, b, syms, elem, out)
    check_written = not node.attrs["element_shape"].is_fully_defined()
    fail = _Failures(program, b, syms)
    with for_range(b, rows, name="r") as r:
        i = _load_index(b, ptrs[ins[2]], r)
        fail.check(b.or_(b.icmp_signed("<", i, ir.Constant(I64, 0)),
                         b.icmp_signed(">=", i, size)),
                   node, "Tried to read from index {0} but array size is: {1}", [i, size])
        if check_written:
            fail.check(_is_written(b, ptrs[ins[1]], i, invert=True), node,
                       "Could not read from TensorArray index {0} because it has not yet "
                       "been written to.", [i])
        _memcpy(program, b, _row(b, ptrs[outs[0]], r, row_bytes),
                _row(b, ptrs[ins[0]], i, row_bytes), row_bytes)
    for key in outs[1:]:
        _memcpy(program, b, ptrs[key], ptrs[outs[0]], b.mul(rows, row_bytes))
    b.ret(ir.Constant(I32, 0))
    fail.finish()
    return fn, list(dict.fromkeys(ins + outs))


def lower_scatter(program, kernel, name, scalar_ops, rules):
    node = kernel.main
    values, written, indices, x = node.inputs
    new_values, new_written = node.outputs
    rows = 1
    for d in indices.dims:
        rows = rows * d
    if not dims_equal(x.dims[:1], (rows,)) or not dims_equal(x.dims[1:], values.dims[1:]) \
            or not dims_equal(new_values.dims, values.dims):
        raise LoweringError(f"{node.describe()} writes {x.dims} into {values.dims} at "
                            f"{indices.dims} indices")
    ins = [program.storage_of(v) for v in (values, written, indices, x)]
    value_outs = program.stores_of(new_values)
    written_outs = program.stores_of(new_written)
    fn, b, ptrs, syms = _function(program, name, ins + value_outs + written_outs)
    n = program.emit_dim(b, rows, syms)
    size = program.emit_dim(b, values.dims[0], syms)
    row_bytes = _bytes(program, b, syms, values.dims[1:], values)
    values_out = ptrs[value_outs[0]] if value_outs else None
    written_out = ptrs[written_outs[0]] if written_outs else None
    fail = _Failures(program, b, syms)
    with for_range(b, n, name="r") as r:  # every index checked before any write
        i = _load_index(b, ptrs[ins[2]], r)
        fail.check(b.or_(b.icmp_signed("<", i, ir.Constant(I64, 0)),
                         b.icmp_signed(">=", i, size)), node,
                   "Tried to write to index {0} but array is not resizeable and size is: {1}",
                   [i, size])
        fail.check(_is_written(b, ptrs[ins[1]], i), node,
                   "Could not write to TensorArray index {0} because it has already been "
                   "written to.", [i])
    if values_out is not None:
        _copy_unless_same(program, b, values_out, ptrs[ins[0]],
                          _bytes(program, b, syms, values.dims, values))
    if written_out is not None:
        _copy_unless_same(program, b, written_out, ptrs[ins[1]], size)
    with for_range(b, n, name="w") as r:
        i = _load_index(b, ptrs[ins[2]], r)
        if written_out is not None:
            b.store(ir.Constant(I8, 1), b.gep(written_out, [i], source_etype=I8))
        if values_out is not None:
            _memcpy(program, b, _row(b, values_out, i, row_bytes),
                    _row(b, ptrs[ins[3]], r, row_bytes), row_bytes)
    for v, keys in ((new_values, value_outs), (new_written, written_outs)):
        for key in keys[1:]:
            _memcpy(program, b, ptrs[key], ptrs[keys[0]],
                    _bytes(program, b, syms, v.dims, v))
    b.ret(ir.Constant(I32, 0))
    fail.finish()
    return fn, list(dict.fromkeys(ins + value_outs + written_outs))


def lower_gather_grad(program, kernel, name, scalar_ops, rules):
    """out = zeros (or a copy of the fourth input, the sum it adds to: none when a loop
    hands the kernel that sum's own buffer, regions.written_in_place), then
    out[indices[r]] += g[r]: the rows a gather read get its gradient, summed where it
    read one twice."""
    node = kernel.main
    g, indices, into, out = gather_grad_operands(node)
    elem = out.dims[1:]
    scalar = _FLOATS[out.dtype.name]
    reads = (g, indices) if into is None else (g, indices, into)
    ins, outs, (fn, b, ptrs, syms) = _row_kernel(program, name, node, reads, out)
    rows = _count(program, b, syms, indices.dims)
    size = program.emit_dim(b, out.dims[0], syms)
    width = _count(program, b, syms, elem)
    dst = ptrs[outs[0]]
    total = _bytes(program, b, syms, out.dims, out)
    if into is None:
        _memset_zero(program, b, dst, total)
    else:
        _copy_unless_same(program, b, dst, ptrs[ins[2]], total)
    fail = _Failures(program, b, syms)
    with for_range(b, rows, name="r") as r:
        i = _load_index(b, ptrs[ins[1]], r)
        fail.check(b.or_(b.icmp_signed("<", i, ir.Constant(I64, 0)),
                         b.icmp_signed(">=", i, size)),
                   node, "Tried to read from index {0} but array size is: {1}", [i, size])
        with for_range(b, width, name="e") as e:
            at = b.gep(dst, [b.add(b.mul(i, width), e)], source_etype=scalar)
            add = b.gep(ptrs[ins[0]], [b.add(b.mul(r, width), e)], source_etype=scalar)
            b.store(b.fadd(b.load(at, typ=scalar), b.load(add, typ=scalar)), at)
    for key in outs[1:]:
        _memcpy(program, b, ptrs[key], dst, total)
    b.ret(ir.Constant(I32, 0))
    fail.finish()
    return fn, list(dict.fromkeys(ins + outs))


def lower_scatter_grad(program, kernel, name, scalar_ops, rules):
    """out = g's first rows, zeroed at the indices the scatter overwrote (which had no
    effect on its result)."""
    node = kernel.main
    g, indices, out = scatter_grad_operands(node)
    ins, outs, (fn, b, ptrs, syms) = _row_kernel(program, name, node, (g, indices), out)
    rows = _count(program, b, syms, indices.dims)
    size = program.emit_dim(b, out.dims[0], syms)
    row_bytes = _bytes(program, b, syms, out.dims[1:], out)
    total = _bytes(program, b, syms, out.dims, out)
    for key in outs:
        _copy_unless_same(program, b, ptrs[key], ptrs[ins[0]], total)
        with for_range(b, rows, name="r") as r:
            i = _load_index(b, ptrs[ins[1]], r)
            inside = b.and_(b.icmp_signed(">=", i, ir.Constant(I64, 0)),
                            b.icmp_signed("<", i, size))
            with b.if_then(inside):
                _memset_zero(program, b, _row(b, ptrs[key], i, row_bytes), row_bytes)
    b.ret(ir.Constant(I32, 0))
    return fn, list(dict.fromkeys(ins + outs))


_FLOATS = {"float32": ir.FloatType(), "float64": ir.DoubleType()}

TENSOR_ARRAY_LOWERINGS = {"TensorArrayV3": lower_create, "TensorArrayGatherV3": lower_gather,
                          "TensorArrayScatterV3": lower_scatter,
                          "TensorArrayGatherGrad": lower_gather_grad,
                          "TensorArrayScatterGrad": lower_scatter_grad}


# --------------------------------------------------------------------------- pieces
def _row_kernel(program, name, node, inputs, out):
    """The storage keys of `inputs` and of `out` (which must have a buffer) and a kernel
    function taking them: the start of every one-output array kernel here."""
    ins = [program.storage_of(v) for v in inputs]
    outs = program.stores_of(out)
    if not outs:
        raise LoweringError(f"{node.describe()} has no buffer")
    return ins, outs, _function(program, name, ins + outs)


def _function(program, name, keys):
    """A kernel function taking a pointer per storage key (no noalias: a scatter may be
    handed the same buffer to read and write) and the syms."""
    keys = list(dict.fromkeys(keys))
    fn = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * (len(keys) + 1)), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    return fn, b, dict(zip(keys, fn.args)), fn.args[-1]


def _count(program, b, syms, dims):
    n = 1
    for d in dims:
        n = n * d
    return program.emit_dim(b, n, syms)


def _bytes(program, b, syms, dims, value):
    n = np.dtype(value.dtype.name).itemsize
    for d in dims:
        n = n * d
    return program.emit_dim(b, n, syms)


def _load_index(b, indices, r):
    return b.sext(b.load(b.gep(indices, [r], source_etype=I32), typ=I32), I64)


def _is_written(b, written, i, invert=False):
    flag = b.load(b.gep(written, [i], source_etype=I8), typ=I8)
    return b.icmp_unsigned("==" if invert else "!=", flag, ir.Constant(I8, 0))


def _row(b, base, i, row_bytes):
    return b.gep(base, [b.mul(i, row_bytes)], source_etype=I8)


def _memcpy(program, b, dst, src, nbytes):
    b.call(_intrinsic(program, "llvm.memcpy.p0.p0.i64", [PTR, PTR, I64, _I1]),
           [dst, src, nbytes, ir.Constant(_I1, 0)])


def _memset_zero(program, b, dst, nbytes):
    b.call(_intrinsic(program, "llvm.memset.p0.i64", [PTR, I8, I64, _I1]),
           [dst, ir.Constant(I8, 0), nbytes, ir.Constant(_I1, 0)])


def _copy_unless_same(program, b, dst, src, nbytes):
    with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(dst, I64), b.ptrtoint(src, I64))):
        _memcpy(program, b, dst, src, nbytes)


def _intrinsic(program, name, args):
    return program.llvm.globals.get(name) or ir.Function(
        program.llvm, ir.FunctionType(ir.VoidType(), args), name)


class _Failures:
    """Checks that return 1 + their error site at once, with their values in the syms
    slots the runtime formats into the message."""

    def __init__(self, program, builder, syms):
        self.program, self.b, self.syms = program, builder, syms
        self.pending = []  # (block, site, values)

    def check(self, bad, node, message, values):
        site = self.program.error_site(node, message, args=["int"] * len(values))
        failed = self.b.function.append_basic_block("failed")
        ok = self.b.append_basic_block("ok")
        self.b.cbranch(bad, failed, ok)
        self.pending.append((failed, site, values))
        self.b.position_at_end(ok)

    def finish(self):
        """Emits the failure blocks (after the function's own return)."""
        for block, site, values in self.pending:
            self.b.position_at_end(block)
            for k, value in enumerate(values):
                slot = self.b.gep(self.syms, [ir.Constant(I64, self.program.error_detail_base
                                                          + k)], source_etype=I64)
                self.b.store(value, slot)
            self.b.ret(ir.Constant(I32, site + 1))
