"""A product kernel's facts, the same on every target: its product node, the buffer the
product is written into (the epilogue then overwrites it in place), the operands'
transposition, where a batched product's operands are in their batch, and the strided
views a batched product reads or writes in place of a transposed copy (ProductViews).
"""
from llvmlite import ir

from graphc.compiler.loops.expr import dims_key
from graphc.compiler.loops.views import LoweringError
from graphc.compiler.op_kinds import row_major_strides, view_perm
from graphc.framework.op_def import OpTypes
from kernels.loops import I64

GEMM_TYPES = OpTypes(lambda d: d.kind == "gemm")
VIEW_RESHAPES = OpTypes("aliases_input")  # input 0's elements in row-major order


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


# ----------------------------------------------------------------- strided views
class ProductViews:
    """How a batched product kernel's product addresses memory. Fusion (strided products)
    puts into the kernel, besides the product:
    - an operand's view: a Transpose (view_perm) of reshapes of a stored value, the base;
      they are not computed, the product reads the base with the transpose's strides
      (attention's heads split: [B*S, D] -> [B, S, H, dh] -> [B, H, S, dh]);
    - the result's view: a Transpose (view_perm) of the product, the product's only user;
      the product is written straight into the transpose's buffer at the strides that put
      each element where the transpose moves it (the heads merge).
    operands: [(the value read, its strides or None: dense)] for A and B; result: (the
    transpose's output, the product's strides) or None; nodes: the view nodes (no loop
    computes them). Strides are in elements, one per dim of the operand or product."""

    def __init__(self, kernel, product):
        inside = set(kernel.nodes)
        self.nodes = set()
        self.operands = [self._operand(v, inside) for v in product.inputs[:2]]
        self.result = None
        users = [n for n in kernel.nodes if product.outputs[0] in n.inputs]
        if len(users) == 1 and view_perm(users[0]) is not None:
            t = users[0]
            self.nodes.add(t)
            perm = view_perm(t)
            out_strides = row_major_strides(t.outputs[0].dims)
            strides = [0] * len(perm)
            for j, p in enumerate(perm):  # the transpose's axis j is the product's axis p
                strides[p] = out_strides[j]
            self.result = (t.outputs[0], strides)

    def _operand(self, value, inside):
        node = value.node
        if node not in inside:
            return value, None
        perm = view_perm(node)
        if perm is None:
            raise LoweringError(f"a product operand computed in its kernel is not a "
                                f"transposed view: {node.describe()}")
        self.nodes.add(node)
        base = node.inputs[0]
        while base.node in inside and base.node.type in VIEW_RESHAPES:
            self.nodes.add(base.node)
            base = base.node.inputs[0]
        in_strides = row_major_strides(node.inputs[0].dims)
        return base, [in_strides[p] for p in perm]
