"""sink_loop_gemms: a loop's sum of products over its iterations becomes one GEMM after it.

Rewrites a native While (regions.py) whose body accumulates a product into a loop
variable that nothing else in the loop reads,
    acc <- acc + matmul(a_t, b_t, transpose_a=True)      (b_t not transposed)
into a loop that saves a_t and b_t in two stacks (row k in iteration k, as the stacks
kept for a gradient: the region kernel writes them, regions.py) and, after it, one
product over the rows of all iterations concatenated,
    acc_final = acc_0 + A_all^T . B_all     (A_all = the a_t stacked by rows, [R * K, M])
The accumulator leaves the loop (its buffers, and the add over them each iteration,
go). The weight gradient of a dynamic_rnn's backward loop is the case that pays: its
per-step product has an inner dimension of the batch (32), far from the GEMM's peak, and
adding the [inputs, 4 * units] product to the accumulator each step reads and writes
the whole weight twice; as one GEMM over batch * steps rows both costs go (what
batch_gemms.py does for static_rnn's unrolled steps).

The stacks need R rows, R a bound on the trip count known before the loop runs: the
rows of the loop's own stacks (their bound is checked each iteration), else those of a
loop-invariant array one of a_t, b_t is gathered from at a row that moves with a counter
(a loop variable stepped by a nonzero constant each iteration, plus a constant): such an
index differs in every iteration and a gather out of range stops the loop, so the loop
cannot run more iterations than the array has rows. The rows past the trip count hold
nothing written (an earlier run's values: the arena is reused): the While zeros them
when it leaves (its attr ZEROED_PAST_TRIPS, regions.py, read by the backends' loop
kernels), so a trip count of 0 gives acc_0. Zeroing there, not by a mask before the
product, costs nothing at the full trip count (dynamic_rnn's) instead of a pass reading
and writing both stacks.

Left alone: other transpose flags (the inner dimension would not be the rows of the
stacked operands), operands of more than two dims, whose columns are not static ints or
whose rows change between iterations,
an accumulator the cond or another body node reads, products or adds with control
dependencies, and loops with no such bound or whose bound is a trip count known only
during the run (stacks growing as a loop runs, regions.py: only a While may read those,
and the product after the loop would not be one, so the loops would leave native code).
Guarantees: the same values up to the order of summation (one GEMM over all rows instead
of iteration by iteration); the loop's other variables, outputs and stacks unchanged.
"""
import numpy as np

from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.regions import ZEROED_PAST_TRIPS, reads_carried_dims, set_during_run

ADDS = ("Add", "AddN")
STEPS = ("Add", "Sub")


def run(module):
    sunk = 0
    for node in list(module.nodes):
        if node.type != "While" or not node.regions:
            continue
        while True:
            found = _accumulation(node)
            if found is None:
                break
            _sink(module, node, *found)
            sunk += 1
    return {"loop_gemms_sunk": sunk}


# ------------------------------------------------------------------------- matching
def _accumulation(node):
    """(loop variable j, its product node, stack rows) of the first accumulation of a
    product in node's body that may leave the loop, else None."""
    body, cond = node.regions["body"], node.regions["cond"]
    n = node.attrs["num_loop_vars"]
    params = _params_by_index(body)
    cond_params = _params_by_index(cond)
    for j in range(n):
        product = _accumulated_product(body, j, params.get(j))
        if product is None or _read(cond, cond_params.get(j)):
            continue
        rows = _stack_rows(node, body, product, params, n)
        if rows is not None:
            return j, product, rows
    return None


def _accumulated_product(body, j, param):
    """The MatMul whose result the body adds to loop variable j (its only reader), or
    None."""
    out = body.outputs[j]
    add = out.node
    if (param is None or add.type not in ADDS or len(add.inputs) != 2 or add.control_deps
            or add.control_users or out.uses or body.outputs.count(out) != 1):
        return None
    acc = param.outputs[0]
    others = [v for v in add.inputs if v is not acc]
    if len(others) != 1 or acc.uses != [add] or acc in body.outputs:
        return None
    p = others[0].node
    if (p.type != "MatMul" or not p.attrs.get("transpose_a") or p.attrs.get("transpose_b")
            or p.control_deps or p.control_users or others[0].uses != [add]
            or others[0] in body.outputs or not _same_dims(out, acc, others[0])
            or out.dtype != acc.dtype):
        return None
    a, b = p.inputs
    # rows that change between iterations (a loop variable's carried dims, a backward
    # loop's forward dims: regions.py) fit no row of a stack
    if not all(isinstance(x, Value) and len(x.dims) == 2 and isinstance(x.dims[1], int)
               and not reads_carried_dims(x.dims[0]) for x in (a, b)):
        return None
    return p


def _read(module, param):
    return param is not None and (param.outputs[0].uses or param.outputs[0] in module.outputs)


def _stack_rows(node, body, product, params, n):
    """Rows for the stacks of the product's operands: those of the loop's stacks, else
    those of an array an operand is gathered from at a counter's row, else None."""
    stacks = node.outputs[n + 1:]
    if stacks:
        return _fixed(stacks[0].dims[0])
    for operand in product.inputs:
        rows = _gathered_rows(operand, params, body, n)
        if rows is not None:
            return _fixed(rows)
    return None


def _fixed(rows):
    """rows, or None when they are set during the run (module docstring)."""
    return None if set_during_run(rows) else rows


def _gathered_rows(v, params, body, n):
    """The rows of the loop-invariant array v is row `counter + c` of, or None."""
    g = v.node
    if g.type != "GatherV2" or g.attrs.get("batch_dims", 0) != 0 or len(g.inputs) != 3:
        return None
    array, index, axis = g.inputs
    if _const(axis) != 0 or index.dims != () or array.node.type != PARAMETER or \
            array.node.attrs["index"] < n:
        return None
    counter = _counter_of(index, params, body, n)
    return array.dims[0] if counter is not None else None


def _counter_of(index, params, body, n):
    """The loop variable i of which `index` is i + c (i's value before or after this
    iteration's step), when the body steps i by a nonzero constant; else None."""
    for i in range(n):
        param = params.get(i)
        if param is None or not _steps(body.outputs[i], param.outputs[0]):
            continue
        if _offset_of(index, param.outputs[0]) or _offset_of(index, body.outputs[i]):
            return i
    return None


def _steps(new, old):
    """Whether new = old + c or old - c for a nonzero constant c."""
    return _offset_of(new, old, nonzero=True)


def _offset_of(v, base, nonzero=False):
    """Whether v is base + c (c a constant integer scalar; c != 0 when nonzero)."""
    if v is base:
        return not nonzero
    node = v.node
    if node.type not in STEPS or len(node.inputs) != 2 or not v.dtype.is_integer:
        return False
    x, y = node.inputs
    sides = ((x, y), (y, x)) if node.type != "Sub" else ((x, y),)
    for var, step in sides:
        c = _const(step)
        if var is base and c is not None and (c != 0 or not nonzero):
            return True
    return False


def _const(v):
    if not isinstance(v, Value) or v.node.type != "Const":
        return None
    value = np.asarray(v.node.attrs["value"])
    return int(value) if value.size == 1 and value.ndim == 0 and \
        value.dtype.kind in "iu" else None


def _same_dims(*values):
    keys = {tuple(_dim_key(d) for d in v.dims) for v in values}
    return len(keys) == 1


def _dim_key(d):
    return d.key if hasattr(d, "key") else ("int", d)


def _params_by_index(module):
    return {p.attrs["index"]: p for p in module.params}


# ------------------------------------------------------------------------ rewriting
def _sink(module, node, j, product, rows):
    """Takes loop variable j out of `node`: its body saves the product's operands in two
    new stacks, and its final value is computed after the loop."""
    after = _next_node(module, node)
    body = node.regions["body"]
    a, b = product.inputs
    init, old_out = node.inputs[j], node.outputs[j]
    body.outputs = body.outputs + [a, b]  # before the product goes: they stay computed
    _drop_loop_variable(node, j)
    stack_a, stack_b = (_add_output(node, (rows,) + v.dims, v.dtype) for v in (a, b))
    _zero_past_trips(node, stack_a, stack_b)
    where = dict(location=product.location, before=after)
    left = _rows_flattened(module, stack_a, where)
    right = _rows_flattened(module, stack_b, where)
    out = old_out
    gemm = module.add_node("MatMul", [left, right], dict(product.attrs),
                           [(out.dtype, out.dims)], product.name + "/after_loop",
                           product.location, product.gradient_of, before=after)
    total = module.add_node("Add", [init, gemm.outputs[0]], {}, [(out.dtype, out.dims)],
                            product.name + "/accumulated", product.location,
                            product.gradient_of, before=after)
    module.replace_all_uses(old_out, total.outputs[0])
    body.verify()


def _next_node(module, node):
    nodes = module.nodes
    i = nodes.index(node)
    return nodes[i + 1] if i + 1 < len(nodes) else None


def _drop_loop_variable(node, j):
    """Removes loop variable j (no body or cond node reads it) from the While and its
    bodies, renumbering the later inputs, outputs and Parameters."""
    node.inputs[j].uses.remove(node)
    del node.inputs[j]
    del node.outputs[j]
    for k, v in enumerate(node.outputs):
        v.index = k
    attrs = dict(node.attrs)
    attrs["num_loop_vars"] -= 1
    for key in ("output_dtypes", "output_shapes"):
        if key in attrs:
            attrs[key] = attrs[key][:j] + attrs[key][j + 1:]
    node.attrs = attrs
    body = node.regions["body"]
    del body.outputs[j]
    for region in node.regions.values():
        _drop_parameter(region, j)


def _drop_parameter(region, j):
    doomed = [p for p in region.params if p.attrs["index"] == j]
    if doomed:
        region.remove_dead()  # the accumulator's add and product, in the body
        region.remove_nodes(doomed)
    for p in region.params:
        if p.attrs["index"] > j:
            p.attrs = dict(p.attrs, index=p.attrs["index"] - 1)


def _add_output(node, dims, dtype):
    v = Value(node, len(node.outputs), dtype, dims)
    node.outputs.append(v)
    return v


def _zero_past_trips(node, *stacks):
    """Has the While zero the rows of `stacks` its iterations did not write (module
    docstring); the attr holds their places among its stacks, which dropping a loop
    variable does not move."""
    n = node.attrs["num_loop_vars"]
    places = tuple(v.index - n - 1 for v in stacks)
    node.attrs = dict(node.attrs, **{ZEROED_PAST_TRIPS: node.attrs.get(ZEROED_PAST_TRIPS, ())
                                     + places})


def _rows_flattened(module, stack, where):
    """[R, K, M] as [R * K, M]: the rows of every iteration, one after another."""
    rows, k, m = stack.dims
    shape = module.add_constant(np.array([-1, m], np.int64), name=f"{stack.node.name}/flat",
                                **where)
    return module.add_node("Reshape", [stack, shape], {}, [(stack.dtype, (rows * k, m))],
                           f"{stack.node.name}/flat", where["location"],
                           before=where["before"]).outputs[0]
