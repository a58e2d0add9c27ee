"""A "gemm" kernel -> one LLVM function: BLAS ?gemm call(s), then the epilogue loop.

The BLAS calls of a large product are split across the thread team (gemm_team.py).

The product is written into a buffer C: the MatMul's own buffer when it is needed
outside the kernel, else the buffer of an epilogue output of the same dims and dtype,
which the epilogue (elementwise: bias add, activation) then overwrites in place, element
by element. BatchMatMulV2 is a loop of gemm calls over the (broadcast) batch dims; entries
of small static matrices with B untransposed run on register tiles instead
(batch_tiles.py).
A MatMul's bias add, when the product itself is not needed outside, is not an epilogue
pass: each BLAS call's block of C is filled with the bias rows first and the call adds
the product into it (beta = 1), while the block is in cache; a pass over C after the
product read and wrote all of C again (a transformer step's dense layers: 26 MB each way).
Integer products have no BLAS: such kernels are lowered as loop kernels (a reduction).
"""
from graphc.compiler.backends.cpu import batch_tiles, gemm_team, small_gemm
from graphc.compiler.backends.cpu.loop_kernel import emit_loop_function
from graphc.compiler.loops.emitter import kernel_targets, group_nests, storages_used
from graphc.compiler.loops.expr import dims_key
from graphc.compiler.loops.products import (ProductViews, batch_positions, product_buffer,
                                            product_node)
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
    views = ProductViews(kernel, mm)
    epilogue = [n for n in kernel.nodes if n is not mm and n not in views.nodes]
    if views.result is not None:  # the product is written as its transpose: views.result
        c_key, extra = product_buffer(program, views.result[0], [])
        held = {views.result[0]}
        bias_add = bias = None
    else:
        c_key, extra = product_buffer(program, product, epilogue)
        bias_add, bias = _bias_in_c(program, kernel, mm, epilogue, c_key)
        held = {product} if bias_add is None else {product, bias_add.outputs[0]}
    epilogue = [n for n in epilogue if n is not bias_add]
    computed = {v for n in epilogue for v in n.outputs}

    def storage_of(value):
        return c_key if value in held else program.storage_of(value)

    loop_views = KernelViews(computed, storage_of, program.error_site, rules)
    outputs = [v for v in kernel.outputs if v not in held]
    nests = group_nests(loop_views, kernel_targets(program, loop_views, outputs, epilogue,
                                                   extra))
    a_key, b_key = (program.storage_of(v) for v, _ in views.operands)
    bias_key = None if bias is None else program.storage_of(bias)
    storages = list(dict.fromkeys([c_key, a_key, b_key] + [bias_key] * (bias is not None) +
                                  storages_used(nests)))
    small = small_gemm.applies(mm, views)
    entry = batch_tiles.entry_function(program.llvm, mm, _strides(views)) \
        if not small and batch_tiles.applies(mm) else None
    gemm_fn = None if small or entry is not None else gemm.declare_gemm(
        program.llvm, jit.blas_symbol(routine), dtype, jit.blas_int_bits())

    def prologue(builder, buffers, syms):
        if small:
            small_gemm.emit_product(builder, mm, buffers[a_key], buffers[b_key],
                                    buffers[c_key],
                                    None if bias is None else buffers[bias_key],
                                    program.emit_dim(builder, product.dims[0], syms))
            return
        gemm_team.emit_product(builder, program, mm, gemm_fn, buffers[a_key], buffers[b_key],
                               buffers[c_key], syms, name, batch_positions,
                               bias_ptr=None if bias is None else buffers[bias_key],
                               strides=_strides(views), entry=entry)

    fn = emit_loop_function(program.llvm, name, loop_views, nests, storages,
                            program.emit_dim, scalar_ops, prologue)
    return fn, storages


def _strides(views):
    """(A's, B's, C's strides, each None when dense) of a product with views, else None."""
    strides = [s for _, s in views.operands] + [
        None if views.result is None else views.result[1]]
    return None if strides == [None] * 3 else strides


def _bias_in_c(program, kernel, mm, epilogue, c_key):
    """(the bias add, the bias vector) when C can start as the bias rows, else (None,
    None): a MatMul (not batched) whose first epilogue node adds a vector along C's rows,
    the product read by nothing else and stored nowhere, the sum stored in C or nowhere."""
    product = mm.outputs[0]
    if mm.type != "MatMul" or not epilogue or program.stores_of(product) or \
            product in kernel.outputs:
        return None, None
    node = epilogue[0]
    if node.type == "BiasAdd":
        if node.inputs[0] is not product:
            return None, None
        bias = node.inputs[1]
    elif node.type == "Add" and product in node.inputs and node.inputs[0] is not node.inputs[1]:
        bias = node.inputs[1] if node.inputs[0] is product else node.inputs[0]
    else:
        return None, None
    if any(product in n.inputs for n in epilogue[1:]):
        return None, None
    total = node.outputs[0]
    if bias.dtype != product.dtype or total.dims is None or len(total.dims) != 2 or \
            bias.dims is None or not 1 <= len(bias.dims) <= 2 or \
            dims_key(bias.dims[-1:]) != dims_key(total.dims[-1:]) or \
            any(dims_key([d]) != (1,) for d in bias.dims[:-1]) or \
            dims_key(total.dims) != dims_key(product.dims):
        return None, None
    if program.stores_of(total) not in ([], [c_key]):
        return None, None
    return node, bias
