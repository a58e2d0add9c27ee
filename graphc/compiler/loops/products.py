"""A product kernel's facts, the same on every target: its product node, the buffer the
product is written into (the epilogue then overwrites it in place), the operands'
transposition, and where a batched product's operands are in their batch.
"""
from llvmlite import ir

from graphc.compiler.loops.expr import dims_key
from graphc.compiler.loops.views import LoweringError
from graphc.framework.op_def import OpTypes
from kernels.loops import I64

GEMM_TYPES = OpTypes(lambda d: d.kind == "gemm")


def product_node(kernel):
    for node in kernel.nodes:
        if node.type in GEMM_TYPES:
            return node
    raise LoweringError(f"gemm kernel without a MatMul: {kernel.nodes}")


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


def transposes(node):
    if node.type == "MatMul":
        return node.attrs["transpose_a"], node.attrs["transpose_b"]
    return node.attrs["adj_x"], node.attrs["adj_y"]


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
