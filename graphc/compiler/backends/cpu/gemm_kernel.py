"""A "gemm" kernel -> one LLVM function: BLAS ?gemm call(s), then the epilogue loop.

The BLAS calls of a large product are split across the thread team (gemm_team.py).

The product is written into a buffer C: the MatMul's own buffer when it is needed
outside the kernel, else the buffer of an epilogue output of the same dims and dtype,
which the epilogue (elementwise: bias add, activation) then overwrites in place, element
by element. BatchMatMulV2 is a loop of gemm calls over the (broadcast) batch dims.
Integer products have no BLAS: such kernels are lowered as loop kernels (a reduction).
"""
from llvmlite import ir

from graphc.compiler.backends.cpu import gemm_team
from graphc.compiler.loops.expr import dims_key
from graphc.compiler.backends.cpu.loop_kernel import (emit_loop_function, kernel_targets,
                                                 plan_nests, storages_used)
from graphc.compiler.loops.views import KernelViews, LoweringError
from graphc.framework.op_def import OpTypes
from kernels import gemm
from kernels.loops import I64
from runtime import jit  # the JIT that loads the BLAS knows its exported names

GEMM_TYPES = OpTypes(lambda d: d.kind == "gemm")
BLAS_DTYPES = {"float32": "cblas_sgemm", "float64": "cblas_dgemm"}


def has_blas_gemm(kernel):
    mm = product_node(kernel)
    return mm.outputs[0].dtype.name in BLAS_DTYPES


def product_node(kernel):
    for node in kernel.nodes:
        if node.type in GEMM_TYPES:
            return node
    raise LoweringError(f"gemm kernel without a MatMul: {kernel.nodes}")


def lower_gemm_kernel(program, kernel, name, scalar_ops, rules):
    """The LLVM function of a "gemm" kernel and its storage keys (its pointer args)."""
    mm = product_node(kernel)
    product = mm.outputs[0]
    dtype = product.dtype.name
    routine = BLAS_DTYPES[dtype]
    epilogue = [n for n in kernel.nodes if n is not mm]
    c_key, extra = product_buffer(program, product, epilogue)
    computed = {v for n in epilogue for v in n.outputs}

    def storage_of(value):
        return c_key if value is product else program.storage_of(value)

    views = KernelViews(computed, storage_of, program.error_site, rules)
    outputs = [v for v in kernel.outputs if v is not product]
    nests = plan_nests(views, kernel_targets(program, views, outputs, epilogue, extra))
    a_key, b_key = (program.storage_of(v) for v in mm.inputs)
    storages = list(dict.fromkeys([c_key, a_key, b_key] + storages_used(nests)))
    gemm_fn = gemm.declare_gemm(program.llvm, jit.blas_symbol(routine), dtype,
                                jit.blas_int_bits())

    def prologue(builder, buffers, syms):
        gemm_team.emit_product(builder, program, mm, gemm_fn, buffers[a_key], buffers[b_key],
                               buffers[c_key], syms, name, batch_positions)

    fn = emit_loop_function(program.llvm, name, views, nests, storages, program.emit_dim,
                            scalar_ops, prologue)
    return fn, storages


def product_buffer(program, product, epilogue):
    """(C's storage key, [(storage, value)] other stores of the product)."""
    stores = program.stores_of(product)
    if stores:
        return stores[0], [(s, product) for s in stores[1:]]
    key = dims_key(product.dims)
    for node in reversed(epilogue):
        for v in node.outputs:
            stores = program.stores_of(v)
            if stores and v.dtype == product.dtype and dims_key(v.dims) == key:
                return stores[0], []
    raise LoweringError(f"no buffer to hold the product of {product.node.describe()}: it is "
                        f"not a kernel output and no epilogue output has its dims and dtype")


def batch_positions(builder, index, batch, a_batch, b_batch, dim):
    """The batch positions in a and b of output batch `index` (numpy broadcasting)."""
    coords = []
    rest = index
    for d in reversed(batch):
        size = dim(d)
        coords.append(builder.urem(rest, size))
        rest = builder.udiv(rest, size)
    coords = coords[::-1]
    positions = []
    for operand in (a_batch, b_batch):
        lead = len(batch) - len(operand)
        pos = ir.Constant(I64, 0)
        for i, d in enumerate(operand):
            c = ir.Constant(I64, 0) if dims_key([d]) == (1,) else coords[lead + i]
            pos = builder.add(builder.mul(pos, dim(d)), c)
        positions.append(pos)
    return positions
