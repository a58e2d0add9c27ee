"""A "gemm" kernel -> one LLVM function: BLAS ?gemm call(s), then the epilogue loop.

The BLAS calls of a large product are split across the thread team (gemm_team.py).

The product is written into a buffer C: the MatMul's own buffer when it is needed
outside the kernel, else the buffer of an epilogue output of the same dims and dtype,
which the epilogue (elementwise: bias add, activation) then overwrites in place, element
by element. BatchMatMulV2 is a loop of gemm calls over the (broadcast) batch dims.
Integer products have no BLAS: such kernels are lowered as loop kernels (a reduction).
"""
from graphc.compiler.backends.cpu import gemm_team
from graphc.compiler.backends.cpu.loop_kernel import emit_loop_function
from graphc.compiler.loops.emitter import kernel_targets, group_nests, storages_used
from graphc.compiler.loops.products import batch_positions, product_buffer, product_node
from graphc.compiler.loops.views import KernelViews
from kernels import gemm
from runtime import jit  # the JIT that loads the BLAS knows its exported names

BLAS_DTYPES = {"float32": "cblas_sgemm", "float64": "cblas_dgemm"}


def has_blas_gemm(kernel):
    mm = product_node(kernel)
    return mm.outputs[0].dtype.name in BLAS_DTYPES


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
    nests = group_nests(views, kernel_targets(program, views, outputs, epilogue, extra))
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


