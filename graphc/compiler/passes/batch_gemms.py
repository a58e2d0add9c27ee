"""batch_gemms: many small GEMMs of an unrolled recurrence become one big GEMM.

1. Sums of products. Rewrites a sum (AddN, or a tree of Adds whose inner sums have no other use) of
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

2. Products of one weight. MatMuls A_t . B of the same B (and flags, A not transposed)
whose left operands are all computed before the first of them runs cannot depend on
each other's results: they become one MatMul of the rows concatenated, split back into
per-step row blocks (Split: the blocks are row ranges, which the readers index into).
A left operand [x_t, h_t] (ConcatV2 along the columns, static widths) whose leading part
x_t is ready that early but whose rest is not (static_rnn: h_t is the previous step's
output) is cut: x_t . B[:w] for all steps as one MatMul, plus h_t . B[w:] per step.
Fires for two or more products of at most SMALL_ROWS rows each (the GEMM's rate grows
with the rows up to about there; bigger products gain little and pay the copies).
Left alone: products that are fetched, have control dependencies, or whose left operands
are not all ready before the first product (by node order: a conservative test, linear
in the module). Guarantees: the same values up to summation order (x.B[:w] + h.B[w:] sums
the inner dimension in two parts); the new nodes are placed after every left operand and
B, and before every product they replace.
"""
import numpy as np

from graphc.compiler.ir import Value
from graphc.framework.symbolic import SymDim

SUMS = ("AddN", "Add")
SMALL_ROWS = 256


def run(module):
    batched = products_removed = 0
    absorbed = set()  # inner sums of a tree already rewritten: dead, left for remove_dead
    interface = _Interface(module)
    for node in reversed(list(module.nodes)):  # outermost sums first: their trees hold
        if (node.type not in SUMS or node in absorbed  # the inner ones
                or not _used(interface, node) or node.control_deps):
            continue
        inner = []
        groups, others = _split_terms(interface, _terms(interface, node, node, inner))
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
        interface = _Interface(module)
        absorbed.update(inner)
    rows_batched, row_products = _batch_shared_weights(module)
    return {"gemms_batched": batched, "gemms_removed": products_removed,
            "row_batches": rows_batched, "row_products_merged": row_products,
            "nodes_removed": module.remove_dead()}


class _Interface:
    """The module's fetched values and kept nodes (its roots) as sets: the checks ask of
    every product and summand whether it is one of them, and a training step's roots (an
    update per variable) grow with the model, so asking the module's lists made the pass
    quadratic in depth. Made again after each rewrite (replacing a sum may replace a
    fetched value or a root)."""

    def __init__(self, module):
        self.outputs = frozenset(module.outputs)
        self.roots = frozenset(module.roots)


# ----------------------------------------------------------------- products of one weight
def _batch_shared_weights(module):
    position = {n: i for i, n in enumerate(module.nodes)}
    interface = _Interface(module)
    groups = {}
    for p in module.nodes:
        lead = _row_operand(interface, p)
        if lead is not None:
            key = (id(p.inputs[1]), bool(p.attrs.get("transpose_b")), lead[1])
            groups.setdefault(key, []).append((p, lead[0]))
    batches = merged = 0
    for (_, _, width), members in groups.items():
        if len(members) < 2 or not _ready_before(members, position):
            continue
        _merge_rows(module, members, width, position)
        batches += 1
        merged += len(members)
    return batches, merged


def _row_operand(interface, p):
    """(operand to batch by rows, its width if a leading part of a column concatenation
    else None) of a product that may be batched, else None."""
    if (p.type != "MatMul" or p.attrs.get("transpose_a") or p.control_deps
            or p.control_users or p in interface.roots or p.outputs[0] in interface.outputs
            or not all(isinstance(x, Value) for x in p.inputs)
            or _hint(p.inputs[0].dims[0]) > SMALL_ROWS):
        return None
    a = p.inputs[0]
    if a.node.type == "ConcatV2" and len(a.node.inputs) > 2 and _const_int(
            a.node.inputs[-1]) in (1, -1) and isinstance(a.dims[1], int):
        lead = a.node.inputs[0]
        b = p.inputs[1]
        if isinstance(lead.dims[1], int) and all(isinstance(d, int) for d in b.dims):
            return lead, lead.dims[1]
    return a, None


def _ready_before(members, position):
    """Every left operand (and the weight) is computed before the first product."""
    first = min(position[p] for p, _ in members)
    weight = members[0][0].inputs[1]
    return all(position.get(x.node, -1) < first for x in [weight] + [a for _, a in members])


def _merge_rows(module, members, width, position):
    """One product of the members' operands (their leading `width` columns, when not
    None) stacked by rows; each member reads its row block."""
    products = [p for p, _ in members]
    first = min(products, key=position.get)
    b, transpose_b = first.inputs[1], bool(first.attrs.get("transpose_b"))
    where = dict(location=first.location, before=first)
    b_lead = b if width is None else _weight_rows(module, b, transpose_b, 0, width, where)
    rows = _concat(module, first, [a for _, a in members], 0, "rows")
    out_cols = first.outputs[0].dims[1]
    batched = module.add_node("MatMul", [rows, b_lead], dict(first.attrs),
                              [(b.dtype, (rows.dims[0], out_cols))],
                              first.name + "/rows_batched", first.location,
                              first.gradient_of, before=first)
    blocks = _split_rows(module, batched.outputs[0], [a for _, a in members], first)
    if width is None:
        for p, block in zip(products, blocks):
            module.replace_all_uses(p.outputs[0], block)
        return
    k = b.dims[0] if not transpose_b else b.dims[1]
    b_rest = _weight_rows(module, b, transpose_b, width, k - width, where)
    for p, block in zip(products, blocks):
        _cut_product(module, p, b_rest, block)


def _weight_rows(module, b, transpose_b, start, count, where):
    """Rows [start, start + count) of op(b)'s inner dimension: a Slice of b."""
    begin, size = ([0, start], [b.dims[0], count]) if transpose_b else \
        ([start, 0], [count, b.dims[1]])
    consts = [module.add_constant(np.array(v, np.int64), name=f"{b.node.name}/{n}", **where)
              for v, n in ((begin, "begin"), (size, "size"))]
    node = module.add_node("Slice", [b] + consts, {}, [(b.dtype, tuple(size))],
                           f"{b.node.name}/rows_{start}", where["location"],
                           before=where["before"])
    return node.outputs[0]


def _split_rows(module, value, operands, before):
    """value's row blocks, one per operand (as many rows each)."""
    axis = module.add_constant(np.int32(0), before=before,
                               name=before.name + "/rows_axis", location=before.location)
    keys = {_dim_key(a.dims[0]) for a in operands}
    out_types = [(value.dtype, (a.dims[0], value.dims[1])) for a in operands]
    if len(keys) == 1:
        node = module.add_node("Split", [axis, value], {"num_split": len(operands)},
                               out_types, before.name + "/rows_split", before.location,
                               before=before)
    else:
        sizes = module.add_constant(np.array([a.dims[0] for a in operands], np.int64),
                                    before=before, name=before.name + "/rows_sizes",
                                    location=before.location)
        node = module.add_node("SplitV", [value, sizes, axis], {"num_split": len(operands)},
                               out_types, before.name + "/rows_split", before.location,
                               before=before)
    return node.outputs


def _cut_product(module, p, b_rest, block):
    """p = [lead, rest...] . B becomes block + [rest...] . B[w:] (block = lead . B[:w])."""
    concat = p.inputs[0].node
    rest = concat.inputs[1:-1]
    where = dict(location=p.location, before=p)
    if len(rest) == 1:
        left = rest[0]
    else:
        widths = sum(v.dims[1] for v in rest)
        left = module.add_node("ConcatV2", list(rest) + [concat.inputs[-1]],
                               {"N": len(rest)}, [(rest[0].dtype, (rest[0].dims[0], widths))],
                               concat.name + "/rest", **where).outputs[0]
    out = p.outputs[0]
    narrow = module.add_node("MatMul", [left, b_rest], dict(p.attrs), [(out.dtype, out.dims)],
                             p.name + "/rest", p.location, p.gradient_of, before=p)
    total = module.add_node("Add", [narrow.outputs[0], block], {}, [(out.dtype, out.dims)],
                            p.name + "/parts", p.location, p.gradient_of, before=p)
    module.replace_all_uses(out, total.outputs[0])


def _const_int(v):
    node = v.node
    if node.type != "Const":
        return None
    value = np.asarray(node.attrs["value"]).reshape(-1)
    return int(value[0]) if value.size == 1 else None


def _hint(d):
    return d.hint if isinstance(d, SymDim) else d


def _used(interface, node):
    return any(v.uses or v in interface.outputs for v in node.outputs)


def _terms(interface, node, root, inner_sums):
    """The summands of the tree of sums under `node`, in order; its inner sums are
    appended to `inner_sums`."""
    out = []
    for v in node.inputs:
        inner = v.node
        if (inner.type in SUMS and _only_used_by(interface, inner, node)
                and _same_type(inner.outputs[0], root.outputs[0])):
            inner_sums.append(inner)
            out.extend(_terms(interface, inner, root, inner_sums))
        else:
            out.append(v)
    return out


def _only_used_by(interface, node, user):
    out = node.outputs[0]
    return (len(node.outputs) == 1 and out.uses == [user] and out not in interface.outputs
            and not node.control_deps and not node.control_users and node not in interface.roots)


def _same_type(a, b):
    """Equal dtype and dims (no broadcasting in the sum)."""
    return a.dtype == b.dtype and len(a.dims) == len(b.dims) and all(
        _dim_key(x) == _dim_key(y) for x, y in zip(a.dims, b.dims))


def _dim_key(d):
    return d.key if isinstance(d, SymDim) else ("int", d)


def _split_terms(interface, terms):
    """({(transpose flags, dtype, dims): [MatMul nodes]}, other summands)."""
    groups, others = {}, []
    for v in terms:
        p = v.node
        if _batchable(interface, p, v, terms):
            key = (bool(p.attrs.get("transpose_a")), bool(p.attrs.get("transpose_b")),
                   v.dtype, tuple(_dim_key(d) for d in v.dims))
            groups.setdefault(key, []).append(p)
        else:
            others.append(v)
    return groups, others


def _batchable(interface, p, v, terms):
    return (p.type == "MatMul" and len(v.uses) == 1 and terms.count(v) == 1
            and v not in interface.outputs and p not in interface.roots
            and not p.control_deps and not p.control_users
            and all(isinstance(x, Value) for x in p.inputs))


def _pays(products):
    moved = sum(_size(x) for p in products for x in p.inputs)
    summed = (len(products) + 1) * _size(products[0].outputs[0])
    return moved <= summed


def _size(v):
    n = 1
    for d in v.dims:
        n *= _hint(d)
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
