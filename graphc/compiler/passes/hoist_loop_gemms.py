"""hoist_loop_gemms: a loop's product of a row of a loop-invariant array by a loop-invariant
weight becomes one product over all the rows before the loop.

Rewrites, in the body of a native While (regions.py),
    p = matmul(x_t, W)               x_t = row idx of X (X and W the same every iteration)
into a read of row idx of P = X . W, computed once before the loop as one GEMM over the
rows of X flattened ([R * K, D] . W) and read by the body as one more loop-invariant
input. A left operand [x_t, h, ...] (ConcatV2 along the columns, static widths: the LSTM
cell's input and state) is cut first:
    p = row idx of (X . W[:w]) + [h, ...] . W[w:]
so the input projection of every time step is one big GEMM and the body keeps the
recurrent part (what batch_gemms.py does for static_rnn's unrolled steps, and cuDNN and
XLA do for RNNs). The rows of a dynamic_rnn's input are the case that pays: per step, a
GEMM of the batch's 32 rows is far from the GEMM's peak.

A row of X is GatherV2(X, idx) along axis 0 with a scalar idx, or a TensorArray read
(TensorArrayGatherV3 of one index, reshaped to the element) whose element shape is fully
known (a row never written then reads zeros, which the product keeps) or which the body
still reads after the rewrite (its error for such a row stays). The body's read of P is a
GatherV2 at the same index: an index out of range is still an error.
Left alone: products with control dependencies, transposed left operands, an X or W that
the body computes or that is a loop variable, rows of more than two dims, and left
operands of other ops.
Guarantees: the same values up to the order of summation (x.W[:w] + h.W[w:] sums the
inner dimension in two parts); P is computed for every row of X, read or not.
"""
import numpy as np

from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.regions import add_loop_input, loop_input_of
from graphc.framework.symbolic import SymDim


def run(module):
    hoisted = 0
    for node in list(module.nodes):
        if node.type != "While" or not node.regions:
            continue
        body = node.regions["body"]
        here = 0
        for p in list(body.nodes):
            found = _hoistable(node, body, p)
            if found is not None:
                _hoist(module, node, body, p, *found)
                here += 1
        if here:
            body.remove_dead()
            body.verify()
        hoisted += here
    return {"loop_gemms_hoisted": hoisted}


# ------------------------------------------------------------------------- matching
def _hoistable(node, body, p):
    """(row read, its width or None when the whole left operand is the row) of a product
    that may leave the loop, else None."""
    if (p.type != "MatMul" or p.attrs.get("transpose_a") or p.control_deps
            or p.control_users or not all(isinstance(x, Value) for x in p.inputs)
            or not _invariant(node, p.inputs[1])
            or not all(isinstance(d, int) for d in p.inputs[1].dims)):
        return None
    a = p.inputs[0]
    row = _row_read(node, body, a, p)
    if row is not None:
        return row, None
    concat = a.node
    if concat.type != "ConcatV2" or len(concat.inputs) < 3 or \
            _const(concat.inputs[-1]) not in (1, -1) or \
            not all(isinstance(v.dims[1], int) for v in concat.inputs[:-1]):
        return None
    lead = concat.inputs[0]
    row = _row_read(node, body, lead, p)
    return (row, lead.dims[1]) if row is not None else None


def _row_read(node, body, v, p):
    """(X, index, whether the read gives a leading dim of 1) when v is row `index` of the
    loop-invariant array X, else None."""
    g = v.node
    if g.type == "GatherV2" and g.attrs.get("batch_dims", 0) == 0 and len(g.inputs) == 3:
        array, index, axis = g.inputs
        if _const(axis) == 0 and index.dims == () and _invariant(node, array) and \
                _rows_of(array):
            return array, index, False
        return None
    if g.type != "Reshape" or len(v.dims) != 2:
        return None
    read = g.inputs[0].node
    if read.type != "TensorArrayGatherV3" or len(read.inputs) != 3:
        return None
    array, _, index = read.inputs
    if (index.dims != (1,) or not _invariant(node, array) or not _rows_of(array)
            or read.outputs[0].dims != (1,) + v.dims or not _errors_kept(body, read, p)):
        return None
    return array, index, True


def _rows_of(array):
    """Whether array is [R, K, D] with D static and at most one of R, K symbolic (the
    reshapes to [R * K, D] and back name their one unknown dim by -1)."""
    return len(array.dims) == 3 and isinstance(array.dims[2], int) and \
        sum(isinstance(d, SymDim) for d in array.dims[:2]) <= 1


def _errors_kept(body, read, p):
    """Whether the rewrite keeps the TensorArray read's errors: it gives none for a row
    never written when its element shape is fully known; else the product's left
    operand (which reads it) must stay read after the product goes (the LSTM's [x_t, h],
    saved for the gradient)."""
    shape = read.attrs.get("element_shape")
    if shape is not None and shape.is_fully_defined():
        return True
    a = p.inputs[0]
    return a in body.outputs or any(u is not p for u in a.uses)


def _invariant(node, v):
    """Whether body value v is one of the loop's inputs that is not a loop variable."""
    return v.node.type == PARAMETER and v.node.attrs["index"] >= node.attrs["num_loop_vars"]


def _const(v):
    if not isinstance(v, Value) or v.node.type != "Const":
        return None
    value = np.asarray(v.node.attrs["value"])
    return int(value) if value.ndim == 0 and value.dtype.kind in "iu" else None


# ------------------------------------------------------------------------ rewriting
def _hoist(module, node, body, p, row, width):
    array, index, unit_row = row
    w = p.inputs[1]
    transpose_b = bool(p.attrs.get("transpose_b"))
    outer_w = loop_input_of(node, w)
    outer_x = loop_input_of(node, array)
    where = dict(location=p.location, before=node)
    if width is not None:
        outer_w = _weight_part(module, outer_w, transpose_b, 0, width, where)
    projected = _projected(module, outer_x, outer_w, p, where)
    inside = add_loop_input(node, projected, "hoisted")
    out = p.outputs[0]
    read = _read_row(body, inside, index, unit_row, out, p)
    if width is None:
        body.replace_all_uses(out, read)
        return
    rest_w = _weight_part(module, loop_input_of(node, w), transpose_b, width,
                          _inner(w, transpose_b) - width, where)
    rest_w = add_loop_input(node, rest_w, "hoisted")
    body_where = dict(location=p.location, before=p)
    left = _rest_columns(body, p.inputs[0].node, body_where)
    narrow = body.add_node("MatMul", [left, rest_w], dict(p.attrs), [(out.dtype, out.dims)],
                           p.name + "/recurrent", p.location, p.gradient_of, before=p)
    total = body.add_node("Add", [read, narrow.outputs[0]], {}, [(out.dtype, out.dims)],
                          p.name + "/parts", p.location, p.gradient_of, before=p)
    body.replace_all_uses(out, total.outputs[0])


def _inner(w, transpose_b):
    return w.dims[1] if transpose_b else w.dims[0]


def _weight_part(module, w, transpose_b, start, count, where):
    """Rows [start, start + count) of op(w)'s inner dimension: a Slice of w."""
    begin, size = ([0, start], [w.dims[0], count]) if transpose_b else \
        ([start, 0], [count, w.dims[1]])
    consts = [module.add_constant(np.array(v, np.int64), name=f"{w.node.name}/{n}", **where)
              for v, n in ((begin, "begin"), (size, "size"))]
    return module.add_node("Slice", [w] + consts, {}, [(w.dtype, tuple(size))],
                           f"{w.node.name}/inner_{start}", where["location"],
                           before=where["before"]).outputs[0]


def _projected(module, x, w, p, where):
    """X [R, K, D] . op(w) as [R, K, N]: one GEMM over the R * K rows."""
    rows, k, d = x.dims
    n = p.outputs[0].dims[1]
    name = p.name + "/hoisted"
    flat = _reshape(module, x, (rows * k, d), name + "/rows", where)
    product = module.add_node("MatMul", [flat, w], dict(p.attrs), [(x.dtype, (rows * k, n))],
                              name, p.location, p.gradient_of,
                              before=where["before"]).outputs[0]
    return _reshape(module, product, (rows, k, n), name + "/by_row", where)


def _reshape(module, v, dims, name, where):
    shape = module.add_constant(np.array([_shape_entry(d) for d in dims], np.int64),
                                name=name + "/shape", **where)
    return module.add_node("Reshape", [v, shape], {}, [(v.dtype, dims)], name,
                           where["location"], before=where["before"]).outputs[0]


def _shape_entry(d):
    return -1 if isinstance(d, SymDim) else d  # one unknown at most: the rows


def _read_row(body, projected, index, unit_row, out, p):
    """Row `index` of the projected array, with the product's dims."""
    axis = body.add_constant(np.int32(0), name=p.name + "/row_axis", location=p.location,
                             before=p)
    dims = ((1,) if unit_row else ()) + out.dims
    read = body.add_node("GatherV2", [projected, index, axis], {"batch_dims": 0},
                         [(out.dtype, dims)], p.name + "/row", p.location, p.gradient_of,
                         before=p).outputs[0]
    if not unit_row:
        return read
    return _reshape(body, read, out.dims, p.name + "/row_reshaped",
                    dict(location=p.location, before=p))


def _rest_columns(body, concat, where):
    """The pieces of the concatenation after the first, as one value."""
    rest = concat.inputs[1:-1]
    if len(rest) == 1:
        return rest[0]
    widths = sum(v.dims[1] for v in rest)
    return body.add_node("ConcatV2", list(rest) + [concat.inputs[-1]], {"N": len(rest)},
                         [(rest[0].dtype, (rest[0].dims[0], widths))], concat.name + "/rest",
                         **where).outputs[0]
