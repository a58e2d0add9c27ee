"""batch_gemms: many small GEMMs of an unrolled recurrence become one big GEMM.

Rewrites a sum (AddN, or a tree of Add/AddV2 whose inner sums have no other use) of
products over one inner dimension each,
    sum_t op(A_t) . op(B_t)      (the same transpose flags, dtype and output dims)
into one product over the concatenated inner dimension,
    op(concat_t A_t) . op(concat_t B_t)
A_t is concatenated along its inner axis (rows when transpose_a, columns otherwise), B_t
likewise (rows unless transpose_b). The weight gradient of static_rnn is the case that
pays: its 32 per-step products dW_t = [x_t, h_t]^T . g_t have an inner dimension of the
batch (32), far from the GEMM's peak, and summing 32 copies of dW costs more than the
products' inputs; as one GEMM over batch * steps rows both costs go.

Fires only where the copies into the concatenations move fewer elements than the sum
reads: sum over t of |A_t| + |B_t| <= (terms + 1) * |out|. A big inner dimension is
already fast in the GEMM, and copying it would cost more than the sum saves. Unknown
dims are compared at their hints (the choice changes speed, never the result, so it is
recorded as no guard).

Left alone: a product that has another use (it is computed anyway), control
dependencies on or of a product or an inner sum, products of other ops than MatMul
(BatchMatMulV2), and sums with fewer than two products of one kind. Terms of the sum
that are not batched are added to the batched product by one AddN.
Guarantees: the same values up to the order of summation (the GEMM sums over all steps
in its own order instead of step by step); every product's inputs are computed before
the sum, so the new nodes, placed just before it, see all of them defined.
"""
import numpy as np

from graphc.compiler.ir import Value
from graphc.framework.symbolic import SymDim

SUMS = ("AddN", "Add", "AddV2")


def run(module):
    batched = products_removed = 0
    absorbed = set()  # inner sums of a tree already rewritten: dead, left for remove_dead
    for node in reversed(list(module.nodes)):  # outermost sums first: their trees hold
        if (node.type not in SUMS or node in absorbed  # the inner ones
                or not _used(module, node) or node.control_deps):
            continue
        inner = []
        groups, others = _split_terms(module, _terms(module, node, node, inner))
        chosen = [g for g in groups.values() if len(g) > 1 and _pays(g)]
        if not chosen:
            continue
        values = list(others)
        for products in groups.values():
            if products in chosen:
                values.append(_batch(module, node, products))
                batched += 1
                products_removed += len(products) - 1
            else:
                values.extend(p.outputs[0] for p in products)
        _replace_sum(module, node, values)
        absorbed.update(inner)
    return {"gemms_batched": batched, "gemms_removed": products_removed,
            "nodes_removed": module.remove_dead()}


def _used(module, node):
    return any(v.uses or v in module.outputs for v in node.outputs)


def _terms(module, node, root, inner_sums):
    """The summands of the tree of sums under `node`, in order; its inner sums are
    appended to `inner_sums`."""
    out = []
    for v in node.inputs:
        inner = v.node
        if (inner.type in SUMS and _only_used_by(module, inner, node)
                and _same_type(inner.outputs[0], root.outputs[0])):
            inner_sums.append(inner)
            out.extend(_terms(module, inner, root, inner_sums))
        else:
            out.append(v)
    return out


def _only_used_by(module, node, user):
    out = node.outputs[0]
    return (len(node.outputs) == 1 and out.uses == [user] and out not in module.outputs
            and not node.control_deps and not node.control_users and node not in module.roots)


def _same_type(a, b):
    """Equal dtype and dims (no broadcasting in the sum)."""
    return a.dtype == b.dtype and len(a.dims) == len(b.dims) and all(
        _dim_key(x) == _dim_key(y) for x, y in zip(a.dims, b.dims))


def _dim_key(d):
    return d.key if isinstance(d, SymDim) else ("int", d)


def _split_terms(module, terms):
    """({(transpose flags, dtype, dims): [MatMul nodes]}, other summands)."""
    groups, others = {}, []
    for v in terms:
        p = v.node
        if _batchable(module, p, v, terms):
            key = (bool(p.attrs.get("transpose_a")), bool(p.attrs.get("transpose_b")),
                   v.dtype, tuple(_dim_key(d) for d in v.dims))
            groups.setdefault(key, []).append(p)
        else:
            others.append(v)
    return groups, others


def _batchable(module, p, v, terms):
    return (p.type == "MatMul" and len(v.uses) == 1 and terms.count(v) == 1
            and v not in module.outputs and p not in module.roots
            and not p.control_deps and not p.control_users
            and all(isinstance(x, Value) for x in p.inputs))


def _pays(products):
    moved = sum(_size(x) for p in products for x in p.inputs)
    summed = (len(products) + 1) * _size(products[0].outputs[0])
    return moved <= summed


def _size(v):
    n = 1
    for d in v.dims:
        n *= d.hint if isinstance(d, SymDim) else d
    return n


def _batch(module, sum_node, products):
    first = products[0]
    transpose_a = bool(first.attrs.get("transpose_a"))
    transpose_b = bool(first.attrs.get("transpose_b"))
    a = _concat(module, sum_node, [p.inputs[0] for p in products], 0 if transpose_a else 1,
                "concat_a")
    b = _concat(module, sum_node, [p.inputs[1] for p in products], 1 if transpose_b else 0,
                "concat_b")
    out = first.outputs[0]
    node = module.add_node("MatMul", [a, b], dict(first.attrs), [(out.dtype, out.dims)],
                           sum_node.name + "/batched_MatMul", sum_node.location,
                           sum_node.gradient_of, before=sum_node)
    return node.outputs[0]


def _concat(module, sum_node, values, axis, name):
    dims = list(values[0].dims)
    dims[axis] = sum((v.dims[axis] for v in values[1:]), values[0].dims[axis])
    axis_value = module.add_constant(np.int32(axis), before=sum_node, name=sum_node.name + "/axis",
                                     location=sum_node.location)
    node = module.add_node("ConcatV2", values + [axis_value], {"N": len(values)},
                           [(values[0].dtype, tuple(dims))], f"{sum_node.name}/{name}",
                           sum_node.location, sum_node.gradient_of, before=sum_node)
    return node.outputs[0]


def _replace_sum(module, node, values):
    if len(values) == 1:
        module.replace_node(node, values)
        return
    out = node.outputs[0]
    new = module.add_node("AddN", values, {}, [(out.dtype, out.dims)], node.name,
                          node.location, node.gradient_of, before=node)
    module.replace_node(node, new.outputs)
