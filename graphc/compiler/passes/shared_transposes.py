"""shared_transposes: products of one transposed operand read it transposed once.

Rewrites MatMuls op(A_i) . B^T (transpose_b) that share one 2-D B, at least MIN_PRODUCTS
of them, into op(A_i) . Bt with Bt = Transpose(B) computed once, before the first of
them. The BLAS packs B for every call (all of it when A has few rows), and packing a
transposed B was 50% slower than an untransposed one: static_rnn's backward input
gradient dG_t . W_h^T, [32, 1024] . [1024, 256] 31 times a step, took 0.279 CPU-ms per
step against 0.186 with W_h^T stored (OpenBLAS 0.3.31, SkylakeX, one thread). The
Transpose kernel costs about as much as four products' slower packs (0.36 CPU-ms for
that W_h^T), so it is made for MIN_PRODUCTS, twice that, or more.

Runs after cse: the gradient's products each slice the weight anew until cse merges the
slices, and only then do they share one B.
Left alone: BatchMatMulV2 (its operands are views already), products run for their
effect (roots), products whose B is a variable reference or not 2-D, and groups of fewer
than MIN_PRODUCTS.
Guarantees: the same values (the products multiply the same numbers; the GEMM reads B
in another layout); the Transpose is placed after B is defined and before every product
that reads it; control dependencies of the products are kept.
"""
import numpy as np

from graphc.compiler.ir import Value

MIN_PRODUCTS = 8


def run(module):
    groups = {}
    for node in module.nodes:
        if _reads_transposed(module, node):
            groups.setdefault(node.inputs[1], []).append(node)
    transposed = products = 0
    for b, readers in groups.items():
        if len(readers) < MIN_PRODUCTS:
            continue
        bt = _transpose(module, b, readers[0])
        for p in readers:
            _read_untransposed(module, p, bt)
        transposed += 1
        products += len(readers)
    return {"operands_transposed": transposed, "products_untransposed": products,
            "nodes_removed": module.remove_dead() if transposed else 0}


def _reads_transposed(module, node):
    if node.type != "MatMul" or not node.attrs.get("transpose_b") or node in module.roots:
        return False
    b = node.inputs[1]
    return isinstance(b, Value) and b.dims is not None and len(b.dims) == 2


def _transpose(module, b, first):
    """Transpose(b), placed just before `first` (the products are in node order, so
    that is before all of them and after b's definition)."""
    perm = module.add_constant(np.array([1, 0], np.int32), before=first,
                               name=f"{b.node.name}/transpose_perm", location=first.location)
    node = module.add_node("Transpose", [b, perm], {}, [(b.dtype, (b.dims[1], b.dims[0]))],
                           f"{b.node.name}/transposed", first.location, before=first)
    return node.outputs[0]


def _read_untransposed(module, p, bt):
    out = p.outputs[0]
    attrs = dict(p.attrs, transpose_b=False)
    new = module.add_node("MatMul", [p.inputs[0], bt], attrs, [(out.dtype, out.dims)], p.name,
                          p.location, p.gradient_of, p.control_deps, before=p)
    module.replace_node(p, new.outputs)
