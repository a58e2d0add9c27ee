"""How each op type becomes a view in a loop kernel: the table LOOP_RULES.

A rule is `rule(v, node, k, index) -> Expr`: output k of `node` at `index` (one index
Expr per output dim), built from views of the node's inputs (`v.view(value, index)`,
`v.view_broadcast(...)`), index arithmetic (`v.x.add/mul/floordiv/...`), elementwise
scalar ops (`v.x.op(op_type, args, out_dtype, attrs)`, emitted by
kernels.scalar_ops.emit_scalar) and reductions (`v.x.reduce(kind, loop_vars, body,
dtype)` with loop variables from `v.fresh_vars(dims)`). Inputs that say *how* an op
works (axes, perms, paddings, begin/size) must be compile-time constants (`v.constant`);
data-dependent indices (gather, labels) are clamped with `v.checked_index(...)` (or
`v.x.check`) and an error site whose message shows the bad value found at run time, so
nothing reads out of bounds.

To add an op: write its rule here and put it in LOOP_RULES (an elementwise type needs
only its scalar emitter in kernels/scalar_ops.py: LOOP_RULES gives every type with an
emitter the elementwise rule, broadcasting included). Ops with their own templates
(gemm, conv, opaque) are lowered elsewhere in this package (see __init__.py).
"""
import numpy as np

from graphc.compiler.loops.expr import dim_key, dims_key
from graphc.compiler.loops.views import LoweringError, normalize_axes
from graphc.framework.slicing import dense_spec
from kernels.scalar_ops import ELEMENTWISE_OP_TYPES, FALLIBLE_OP_TYPES

# What TF says when a fallible elementwise op fails (the reference kernels' messages).
_FAILURES = {"FloorDiv": "Integer division by zero", "FloorMod": "Integer division by zero",
             "Pow": "Integers to negative integer powers are not allowed"}


def _out(node, k=0):
    return node.outputs[k]


def _dtype(node, k=0):
    return node.outputs[k].dtype.name


# ----------------------------------------------------------------------- elementwise
def elementwise(v, node, k, index):
    out = _out(node)
    args = [v.view_broadcast(i, index, out.dims) for i in node.inputs]
    return v.x.op(node.type, args, out.dtype.name, node.attrs, _failure_site(v, node))


def _failure_site(v, node):
    if node.type not in FALLIBLE_OP_TYPES:
        return None
    if node.type == "CheckNumerics":
        return v.site(node, f"{node.attrs.get('message', '')} : Tensor had NaN or Inf values")
    return v.site(node, _FAILURES[node.type])


def add_n(v, node, k, index):
    out = _out(node)
    total = None
    for i in node.inputs:
        term = v.view_broadcast(i, index, out.dims)
        total = term if total is None else v.x.op("Add", [total, term], out.dtype.name)
    return total


def bias_add(v, node, k, index):
    value, bias = node.inputs
    axis = 1 if node.attrs.get("data_format") == "NCHW" else len(index) - 1
    return v.x.op("Add", [v.view(value, index), v.view(bias, [index[axis]])], _dtype(node))


def select(v, node, k, index):
    cond, a, b = node.inputs
    out = _out(node)
    if len(cond.dims) == 1 and len(out.dims) > 1:  # a vector picks whole rows
        c = v.view(cond, [index[0]])
    else:
        c = v.view_broadcast(cond, index, out.dims)
    return v.x.select(c, v.view_broadcast(a, index, out.dims), v.view_broadcast(b, index, out.dims))


def identity(v, node, k, index):
    return v.view(node.inputs[0], index)


def constant_of(value):
    def rule(v, node, k, index):
        return v.x.const(value, _dtype(node))
    return rule


def fill(v, node, k, index):
    return v.view(node.inputs[1], [])


def stored(v, node, k, index):
    """A value that lives in a buffer even when its node is in the kernel (a Const, a
    variable read, a feed)."""
    out = _out(node, k)
    if node.type == "Const" and np.size(node.attrs["value"]) == 1:
        return v.x.const(np.reshape(node.attrs["value"], -1)[0], out.dtype.name)
    # a variable read computed in a kernel is a snapshot copy: its own buffer is the copy
    # being written, so the data comes from the variable's storage
    storage = ("var", node.name) if node.type == "VariableV2" else v.storage_of(out)
    return v.load(storage, index, out.dims, out.dtype.name)


def shape(v, node, k, index):
    if not node.inputs[0].dims:
        raise LoweringError("Shape of a scalar has no elements")
    return shape_n(v, node, 0, index)


def shape_n(v, node, k, index):
    dims = v.dims(node.inputs[k])
    result = dims[-1]
    for i in range(len(dims) - 2, -1, -1):
        result = v.x.select(v.x.compare("eq", index[0], v.x.const(i)), dims[i], result)
    what = "Shape output type is {bits}-bit but a dim is {0}"
    return _narrowed(v, node, result, _dtype(node, k), what)


def size(v, node, k, index):
    n = v.x.const(1)
    for d in v.dims(node.inputs[0]):
        n = v.x.mul(n, d)
    what = "Number of elements was larger than representable by {bits}-bit output type"
    return _narrowed(v, node, n, _dtype(node), what)


def _narrowed(v, node, dim, dtype, message):
    """An int64 dim as `dtype`; an int32 one past 2**31 is the op's error (TF's), never
    its low 32 bits."""
    if dtype == "int32":
        text = message.replace("{bits}", "32")
        dim = v.checked_index(node, dim, v.x.const(2 ** 31), text, text.replace("{0}", "too big"))
    return v.x.cast(dim, dtype)


def rank(v, node, k, index):
    return v.x.const(len(node.inputs[0].dims), _dtype(node))


def range_(v, node, k, index):
    start, _, delta = (v.view(i, []) for i in node.inputs)
    dtype = _dtype(node)
    step = v.x.op("Mul", [v.x.cast(index[0], dtype), delta], dtype)
    return v.x.op("Add", [start, step], dtype)


# ------------------------------------------------------------------------- state
def assign(v, node, k, index):
    """The variable's new value at index (the store into the variable is a kernel target)."""
    ref, value = node.inputs
    new = v.view_broadcast(value, index, ref.dims)
    if node.type == "Assign":
        return new
    old = v.load(("var", ref.name), index, ref.dims, ref.dtype.name)
    return v.x.op("Add" if node.type == "AssignAdd" else "Sub", [old, new], ref.dtype.name)


# -------------------------------------------------------------------- reductions
def _accumulator(dtype):
    return "float32" if dtype == "float16" else dtype  # half sums in float, as TF does


def _reduce_over(v, x, axes, index, keep_dims):
    """(loop vars, input index) for reducing x over `axes`, output at `index`."""
    loop_vars, in_index, it = [], [], iter(index)
    for a, d in enumerate(x.dims):
        if a in axes:
            var, e = v.x.var(v.x.dim(d), "r")
            if var is not None:
                loop_vars.append(var)
            in_index.append(e)
            if keep_dims:
                next(it)
        else:
            in_index.append(next(it))
    return loop_vars, in_index


def reduce_rule(kind):
    def rule(v, node, k, index):
        x = node.inputs[0]
        axes = normalize_axes(v.constant(node.inputs[1]), len(x.dims))
        loop_vars, in_index = _reduce_over(v, x, axes, index, node.attrs["keep_dims"])
        return reduction(v, kind, loop_vars, v.view(x, in_index), _dtype(node),
                         [x.dims[a] for a in axes])
    return rule


def reduction(v, kind, loop_vars, body, dtype, reduced_dims=()):
    """kind in sum/mean/prod/max/min/any/all of `body` over loop_vars, as `dtype`."""
    acc = _accumulator(dtype)
    total = v.x.reduce("sum" if kind == "mean" else kind, loop_vars, v.x.cast(body, acc), acc)
    if kind == "mean":
        total = _mean_of(v, total, reduced_dims, acc)
    return v.x.cast(total, dtype)


def _mean_of(v, total, reduced_dims, dtype):
    count = v.x.const(1)
    for d in reduced_dims:
        count = v.x.mul(count, v.x.dim(d))
    if dtype.startswith(("float", "complex")):
        return v.x.op("RealDiv", [total, v.x.cast(count, dtype)], dtype)
    # C++ integer division (toward zero); an empty integer mean is 0
    c = v.x.cast(v.x.max(count, v.x.const(1)), dtype)
    zero = v.x.const(0, dtype)
    neg = v.x.op("Less", [total, zero], "bool")
    down = v.x.op("FloorDiv", [total, c], dtype)
    up = v.x.op("Neg", [v.x.op("FloorDiv", [v.x.op("Neg", [total], dtype), c], dtype)], dtype)
    return v.x.select(neg, up, down)


def arg_reduce(v, node, k, index):
    x = node.inputs[0]
    axis = int(np.reshape(v.constant(node.inputs[1]), -1)[0]) % len(x.dims)
    var, e = v.x.var(v.x.dim(x.dims[axis]), "r")
    in_index = list(index[:axis]) + [e] + list(index[axis:])
    pos = v.x.argreduce("argmax" if node.type == "ArgMax" else "argmin", var, v.view(x, in_index))
    if dim_key(x.dims[axis]) == 0 or not isinstance(dim_key(x.dims[axis]), int):
        # an empty axis is an error, as in TF; the message shows the run-time shape
        shape = ",".join(str(d) for d in x.dims)
        template = ",".join("{%d}" % (i + 2) for i in range(len(x.dims)))
        pos = v.checked_index(node, pos, v.x.dim(x.dims[axis]),
                              f"Reduction axis {axis} is empty in shape [{template}]",
                              f"Reduction axis {axis} is empty in shape [{shape}]",
                              [(v.x.dim(d), "int") for d in x.dims])
    return v.x.cast(pos, _dtype(node))


def bias_add_grad(v, node, k, index):
    g = node.inputs[0]
    axis = 1 if node.attrs.get("data_format") == "NCHW" else len(g.dims) - 1
    axes = [a for a in range(len(g.dims)) if a != axis]
    loop_vars, in_index = _reduce_over(v, g, axes, index, False)
    return reduction(v, "sum", loop_vars, v.view(g, in_index), _dtype(node))


def l2_loss(v, node, k, index):
    t = node.inputs[0]
    loop_vars, in_index = _reduce_over(v, t, range(len(t.dims)), index, False)
    dtype = _dtype(node)
    acc = _accumulator(dtype)
    x = v.x.cast(v.view(t, in_index), acc)
    total = v.x.reduce("sum", loop_vars, v.x.op("Mul", [x, x], acc), acc)
    return v.x.cast(v.x.op("Mul", [total, v.x.const(0.5, acc)], acc), dtype)


def sum_to_shape(v, node, k, index):
    x, out = node.inputs[0], _out(node)
    lead = len(x.dims) - len(out.dims)
    loop_vars, in_index = [], []
    for a, d in enumerate(x.dims):
        reduced = a < lead or (dim_key(out.dims[a - lead]) == 1 and dim_key(d) != 1)
        if reduced:
            var, e = v.x.var(v.x.dim(d), "r")
            loop_vars += [var] if var is not None else []
            in_index.append(e)
        else:
            in_index.append(index[a - lead])
    return reduction(v, "sum", loop_vars, v.view(x, in_index), out.dtype.name)


def _row_stats(v, x, axis, index):
    """(max, sum of exp(x - max)) over `axis` for the row of `index`, shared by every
    element of the row (memoized on the row's other indices)."""
    row_key = ("row", x, axis, tuple(id(i) for j, i in enumerate(index) if j != axis))
    cached = v.memo.get(row_key)
    if cached is not None:
        return cached
    dtype = x.dtype.name
    acc = _accumulator(dtype)

    def row_view(name):
        var, e = v.x.var(v.x.dim(x.dims[axis]), name)
        row = list(index)
        row[axis] = e
        return [var] if var is not None else [], v.x.cast(v.view(x, row), acc)

    loop_vars, body = row_view("r")
    row_max = v.x.reduce("max", loop_vars, body, acc)
    loop_vars, body = row_view("r")
    shifted = _exp_shifted(v, v.x.op("Sub", [body, row_max], acc), acc)
    row_sum = v.x.reduce("sum", loop_vars, shifted, acc)
    v.memo[row_key] = (row_max, row_sum)
    return row_max, row_sum


# op types whose rule computes an exp of each element of input 0 (_exp_shifted), though
# no Exp node stands for it: how much exp a kernel computes counts them
# (backends/cpu/math_library.py)
EXP_OF_EACH_INPUT = frozenset({"Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits"})


def _exp_shifted(v, x_minus_max, dtype):
    """exp(x - row max): the argument is <= 0 (or nan), which the scalar code exploits."""
    return v.x.op("Exp", [x_minus_max], dtype, {"nonpositive": True})


def softmax(v, node, k, index):
    x = node.inputs[0]
    axis = node.attrs.get("axis", -1) % len(x.dims)
    row_max, row_sum = _row_stats(v, x, axis, index)
    acc = row_max.dtype
    shifted = v.x.op("Sub", [v.x.cast(v.view(x, index), acc), row_max], acc)
    if node.type == "LogSoftmax":
        result = v.x.op("Sub", [shifted, v.x.op("Log", [row_sum], acc)], acc)
    else:
        result = v.x.op("Mul", [_exp_shifted(v, shifted, acc),
                                v.x.op("Reciprocal", [row_sum], acc)], acc)
    return v.x.cast(result, _dtype(node))


def sparse_xent(v, node, k, index):
    """Output 0: log(sum exp(l - max)) - (l[label] - max); output 1: softmax - onehot."""
    logits, labels = node.inputs
    axis = len(logits.dims) - 1
    row = list(index) if k == 0 else list(index[:-1])
    row_max, row_sum = _row_stats(v, logits, axis, row + [v.x.const(0)])
    acc = row_max.dtype
    classes = v.x.dim(logits.dims[axis])
    label = v.checked_index(
        node, v.x.cast(v.view(labels, row), "int64"), classes,
        "Received a label value of {0} which is outside the valid range of [0, {1}).",
        f"Received a label value which is outside the valid range of [0, {logits.dims[axis]}).")
    if k == 0:
        picked = v.x.cast(v.view(logits, row + [label]), acc)
        loss = v.x.op("Sub", [v.x.op("Log", [row_sum], acc),
                              v.x.op("Sub", [picked, row_max], acc)], acc)
        return v.x.cast(loss, _dtype(node, 0))
    x = v.x.cast(v.view(logits, index), acc)
    prob = v.x.op("Mul", [_exp_shifted(v, v.x.op("Sub", [x, row_max], acc), acc),
                          v.x.op("Reciprocal", [row_sum], acc)], acc)
    hot = v.x.select(v.x.compare("eq", index[-1], label), v.x.const(1.0, acc),
                     v.x.const(0.0, acc))
    return v.x.cast(v.x.op("Sub", [prob, hot], acc), _dtype(node, 1))


def matmul_loop(v, node, k, index):
    """MatMul/BatchMatMulV2 as a reduction (integer types; gemm kernels take floats)."""
    a, b = node.inputs
    ta, tb = (node.attrs["transpose_a"], node.attrs["transpose_b"]) if node.type == "MatMul" \
        else (node.attrs["adj_x"], node.attrs["adj_y"])
    out = _out(node)
    kdim = a.dims[-2] if ta else a.dims[-1]
    var, kk = v.x.var(v.x.dim(kdim), "k")
    i, j = index[-2], index[-1]
    batch = index[:-2]
    a_index = v.broadcast_index(batch, out.dims[:-2], a.dims[:-2]) + ([kk, i] if ta else [i, kk])
    b_index = v.broadcast_index(batch, out.dims[:-2], b.dims[:-2]) + ([j, kk] if tb else [kk, j])
    dtype = out.dtype.name
    acc = _accumulator(dtype)
    prod = v.x.op("Mul", [v.x.cast(v.view(a, a_index), acc), v.x.cast(v.view(b, b_index), acc)],
                  acc)
    return v.x.cast(v.x.reduce("sum", [var] if var is not None else [], prod, acc), dtype)


# -------------------------------------------------------------------- index ops
def reshape(v, node, k, index):
    """Reshape/ExpandDims/Squeeze: same elements in the same row-major order. Dims that
    match one to one keep their index (no div/mod in the emitted loops)."""
    x, out = node.inputs[0], _out(node)
    return v.view(x, reshape_index(v, index, out.dims, x.dims))


def reshape_index(v, index, out_dims, in_dims):
    in_index = [None] * len(in_dims)
    for out_group, in_group in _reshape_groups(out_dims, in_dims):
        if len(out_group) == 1 and len(in_group) == 1:
            in_index[in_group[0]] = index[out_group[0]]
            continue
        pos = v.x.linear([index[i] for i in out_group], [out_dims[i] for i in out_group])
        for i, e in zip(in_group, v.x.delinearize(pos, [in_dims[i] for i in in_group])):
            in_index[i] = e
    return [v.x.const(0) if e is None else e for e in in_index]


def _reshape_groups(out_dims, in_dims):
    """Pairs (out axes, in axes) of equal element count, from the right; size-1 axes are
    left out (their index is 0). One group for everything when sizes cannot be matched."""
    outs = [i for i, d in enumerate(out_dims) if dim_key(d) != 1]
    ins = [i for i, d in enumerate(in_dims) if dim_key(d) != 1]
    groups = []
    while outs and ins:
        go, gi = [outs.pop()], [ins.pop()]
        po, pi = _product(out_dims, go), _product(in_dims, gi)
        while dim_key(po) != dim_key(pi):
            if _hint(po) <= _hint(pi) and outs:
                go.insert(0, outs.pop())
                po = _product(out_dims, go)
            elif ins:
                gi.insert(0, ins.pop())
                pi = _product(in_dims, gi)
            else:
                return [(list(range(len(out_dims))), list(range(len(in_dims))))]
        groups.append((go, gi))
    if outs or ins:
        return [(list(range(len(out_dims))), list(range(len(in_dims))))]
    return groups


def _product(dims, axes):
    p = 1
    for a in axes:
        p = p * dims[a]
    return p


def _hint(d):
    return d if isinstance(d, int) else getattr(d, "hint", 2)


def broadcast_to(v, node, k, index):
    return v.view_broadcast(node.inputs[0], index, _out(node).dims)


def transpose(v, node, k, index):
    perm = [int(p) for p in np.reshape(v.constant(node.inputs[1]), -1)]
    in_index = [None] * len(perm)
    for i, p in enumerate(perm):
        in_index[p % len(perm)] = index[i]
    return v.view(node.inputs[0], in_index)


def slice_(v, node, k, index):
    begin = np.reshape(v.constant(node.inputs[1]), -1)
    return v.view(node.inputs[0], [v.x.add(i, v.x.const(int(b))) for i, b in zip(index, begin)])


def _strided_slice_spec(v, node, rank):
    """framework.slicing.dense_spec of a StridedSlice (or its gradient) over an input of
    `rank` dims: its begin, end and strides must be compile-time constants."""
    begin, end, strides = ([int(a) for a in np.reshape(v.constant(t), -1)]
                           for t in node.inputs[1:4])
    masks = {m: node.attrs.get(m, 0) for m in ("begin_mask", "end_mask", "ellipsis_mask",
                                               "new_axis_mask", "shrink_axis_mask")}

    def error(message):
        raise LoweringError(message)
    return dense_spec(rank, begin, end, strides, masks, error)


def strided_slice(v, node, k, index):
    x = node.inputs[0]
    in_index = [None] * len(x.dims)
    it = iter(index)
    for entry in _strided_slice_spec(v, node, len(x.dims)):
        if entry[0] == "new":
            next(it)
        elif entry[0] == "shrink":
            in_index[entry[1]] = _edge_index(v, x.dims[entry[1]], entry[2])
        else:
            dim, b, e, s = entry[1:]
            start = _slice_start(v, x.dims[dim], b, e, s)
            in_index[dim] = v.x.add(start, v.x.mul(next(it), v.x.const(s)))
    return v.view(x, in_index)


def strided_slice_grad(v, node, k, index):
    """dy scattered into zeros of the input's dims: element p of a sliced dim comes from
    dy[(p - start) / stride] when that is a whole number in range."""
    out = _out(node)
    dy = node.inputs[4]
    inside = v.x.const(True, "bool")
    dy_index = []
    for entry in _strided_slice_spec(v, node, len(out.dims)):
        if entry[0] == "new":
            dy_index.append(v.x.const(0))
            continue
        p = index[entry[1]]
        if entry[0] == "shrink":
            at = _edge_index(v, out.dims[entry[1]], entry[2])
            inside = v.x.logical("and", inside, v.x.compare("eq", p, at))
            continue
        dim, b, e, s = entry[1:]
        n = v.x.dim(dy.dims[len(dy_index)])
        ahead = v.x.sub(p, _slice_start(v, out.dims[dim], b, e, s))
        if s < 0:
            ahead = v.x.sub(v.x.const(0), ahead)
        q = v.x.floordiv(ahead, v.x.const(abs(s)))
        for cond in (v.x.compare("ge", ahead, v.x.const(0)),
                     v.x.compare("eq", v.x.mod(ahead, v.x.const(abs(s))), v.x.const(0)),
                     v.x.compare("lt", q, n)):
            inside = v.x.logical("and", inside, cond)
        dy_index.append(_clamp(v, q, n))
    return v.x.select(inside, v.view(dy, dy_index), v.x.const(0, out.dtype.name))


def _edge_index(v, d, b):
    return v.x.const(b) if b >= 0 else v.x.add(v.x.dim(d), v.x.const(b))


def _slice_start(v, d, b, e, s):
    """The first index a slice (b, e, s) reads in a dim of size d, clamped as Python
    clamps it (for a run-time d: min/max at run time, so no size is assumed)."""
    if isinstance(d, int):
        return v.x.const(range(d)[slice(b, e, s)].start if len(range(d)[slice(b, e, s)]) else 0)
    size = v.x.dim(d)
    last = v.x.sub(size, v.x.const(1))
    if b is None:
        return v.x.const(0) if s > 0 else last
    start = _edge_index(v, d, b)
    if s > 0:
        return v.x.max(v.x.min(start, size), v.x.const(0))
    return v.x.max(v.x.min(start, last), v.x.const(-1))


def pad(v, node, k, index):
    x = node.inputs[0]
    paddings = np.reshape(v.constant(node.inputs[1]), (-1, 2))
    if len(node.inputs) > 2:
        fill_value = v.view(node.inputs[2], [])
    else:
        fill_value = v.x.const(0, _dtype(node))
    inside = v.x.const(True, "bool")
    in_index = []
    for i, (before, after), d in zip(index, paddings, x.dims):
        j = v.x.sub(i, v.x.const(int(before)))
        size = v.x.dim(d)
        if int(before) or int(after):
            inside = v.x.logical("and", inside, v.x.compare("ge", j, v.x.const(0)))
            inside = v.x.logical("and", inside, v.x.compare("lt", j, size))
        in_index.append(_clamp(v, j, size))
    return v.x.select(inside, v.view(x, in_index), fill_value)


def mirror_pad(v, node, k, index):
    x = node.inputs[0]
    paddings = np.reshape(v.constant(node.inputs[1]), (-1, 2))
    skip = 1 if node.attrs["mode"] == "REFLECT" else 0
    in_index = []
    for i, (before, _after), d in zip(index, paddings, x.dims):
        j = v.x.sub(i, v.x.const(int(before)))
        size = v.x.dim(d)
        left = v.x.sub(v.x.const(skip - 1), j)                     # -j - 1 + skip
        right = v.x.sub(v.x.sub(v.x.add(size, size), v.x.const(1 + skip)), j)
        j = v.x.select(v.x.compare("lt", j, v.x.const(0)), left,
                       v.x.select(v.x.compare("ge", j, size), right, j))
        in_index.append(j)
    return v.view(x, in_index)


def _clamp(v, j, size):
    """j limited to [0, size - 1] so a load whose value is not selected stays in bounds."""
    return v.x.max(v.x.min(j, v.x.sub(size, v.x.const(1))), v.x.const(0))


def concat(v, node, k, index):
    values, out = node.inputs[:-1], _out(node)
    axis = _concat_axis(v, node)
    columns = _interchanged(v, values, axis)
    if columns is not None:
        inner, widths, parts = columns
        return _stitch(v, [(v.x.const(w), _joined(v, part, axis, len(out.dims)))
                           for w, part in zip(widths, parts)], inner, index)
    return _stitch(v, _pieces(v, values, axis, len(out.dims), packed=False), axis, index)


def _concat_axis(v, node):
    return int(np.reshape(v.constant(node.inputs[-1]), -1)[0]) % len(_out(node).dims)


def _interchanged(v, values, axis):
    """A join along `axis` of joins along another axis, all of the same static widths
    there, as a join along that axis of joins along `axis`: (that axis, its widths,
    [the values of column j of each inner join]), else None. The same pieces in the other
    order, so that pieces of one kind meet in runs: batch_gemms' rows [x_t, h_t] of T
    steps become [x_0..x_T-1] (a transpose of the unstacked input) beside [h_0..h_T-1]
    (buffers of one layout)."""
    nodes = [x.node for x in values]
    if len(values) < 2 or any(n.type != "ConcatV2" or x not in v.computed
                              for n, x in zip(nodes, values)):
        return None
    inner = {_concat_axis(v, n) for n in nodes}
    widths = {tuple(dim_key(x.dims[a]) for x in n.inputs[:-1]) for n in nodes
              for a in inner}
    if len(inner) != 1 or len(widths) != 1 or inner == {axis} or \
            not all(isinstance(w, int) for w in next(iter(widths))):
        return None
    columns = [[n.inputs[j] for n in nodes] for j in range(len(nodes[0].inputs) - 1)]
    return inner.pop(), widths.pop(), columns


def _joined(v, values, axis, rank):
    """The view of `values` joined along `axis`, at a piece's own index."""
    return lambda local: _stitch(v, _pieces(v, values, axis, rank, packed=False), axis, local)


def pack(v, node, k, index):
    out = _out(node)
    axis = node.attrs.get("axis", 0) % len(out.dims)
    return _stitch(v, _pieces(v, node.inputs, axis, len(out.dims), packed=True), axis,
                   index)


def _stitch(v, pieces, axis, index):
    """Concatenation along `axis` of `pieces` [(size, view at the piece's own index)]: the
    piece whose range holds index[axis]."""
    starts, off = [], v.x.const(0)
    for size, _ in pieces:
        starts.append(off)
        off = v.x.add(off, size)

    def piece(j):
        size, view_at = pieces[j]
        local = list(index)
        if len(pieces) > 1:  # one piece spans the whole axis: its index is in range
            local[axis] = _clamp(v, v.x.sub(index[axis], starts[j]), size)
        return view_at(local)
    return _choose_piece(v, index[axis], starts, piece, 0, len(pieces))


def _pieces(v, values, axis, rank, packed):
    """The pieces of a concatenation (packed: a Pack, whose pieces lack `axis`) of
    `values` along `axis`, [(size along axis, view at the piece's index)]. A run of
    consecutive outputs of one Unpack or Split computed in the kernel (static_rnn's
    steps joined again: Concat(Unpack(x)) is a transpose of x) is one piece reading x at
    a computed position, and so is a run of buffers of one layout (one load from the
    buffer chosen by the position): as pieces of their own, each was a loop of its own
    (loops/pieces.py), T copies of the code for LLVM to compile. Not along the last axis,
    where the division by the step's size would be in the innermost, contiguous index."""
    out, j = [], 0
    while j < len(values):
        slices = _run_length(v, values, j, axis, packed) if axis < rank - 1 else 1
        buffers = _buffer_run_length(v, values, j, axis, packed) if axis < rank - 1 else 1
        if slices > 1:
            out.append(_run_piece(v, values[j:j + slices], axis, packed))
        elif buffers > 1:
            out.append(_buffer_run_piece(v, values[j:j + buffers], axis, packed))
        else:
            out.append(_single_piece(v, values[j], axis, packed))
        j += max(slices, buffers)
    return out


def _single_piece(v, x, axis, packed):
    if packed:
        return v.x.const(1), lambda local: v.view(x, local[:axis] + local[axis + 1:])
    return v.x.dim(x.dims[axis]), lambda local: v.view(x, local)


# outputs of these are equal slices of their input, in order along one axis
_SLICINGS = ("Unpack", "Split")


def _run_length(v, values, j, axis, packed):
    """How many values from values[j] on are outputs of one Unpack or Split computed in
    the kernel, at indices stepping by +1 or -1, each one static index wide along
    `axis` (1 when values[j] starts no such run)."""
    first = values[j]
    if first.node.type not in _SLICINGS or first not in v.computed or \
            _piece_width(first, axis, packed) is None:
        return 1
    n, step = 1, None
    for value in values[j + 1:]:
        if value.node is not first.node or value not in v.computed:
            break
        delta = value.index - values[j + n - 1].index
        if delta not in (1, -1) or step not in (None, delta):
            break
        step, n = delta, n + 1
    return n


def _piece_width(value, axis, packed):
    """A piece's static width along the concatenated axis, None when it is run-time or 0
    (a run's position divides by it)."""
    if packed:
        return 1
    width = dim_key(value.dims[axis])
    return width if isinstance(width, int) and width > 0 else None


def _run_piece(v, run, axis, packed):
    """One piece for a run of slices of x: element p of the run along `axis` is element
    p % width of slice first + step * (p // width)."""
    source = run[0].node
    width = _piece_width(run[0], axis, packed)
    step = run[1].index - run[0].index

    def view_at(local):
        p = local[axis]
        which = v.x.floordiv(p, v.x.const(width))
        k = v.x.add(v.x.const(run[0].index), which) if step == 1 else \
            v.x.sub(v.x.const(run[0].index), which)
        inner = list(local)
        if packed:
            del inner[axis]
        else:
            inner[axis] = v.x.mod(p, v.x.const(width))
        return v.view(source.inputs[_SLICED_INPUT[source.type]],
                      _slice_index(v, source, k, inner))
    return v.x.const(width * len(run)), view_at


_SLICED_INPUT = {"Unpack": 0, "Split": 1}


def _buffer_run_length(v, values, j, axis, packed):
    """How many values from values[j] on are read from buffers of one layout (computed
    by other kernels, of equal static dims and one dtype, each one static index wide
    along `axis`): an unrolled recurrence's T steps, joined for one batched product or
    stacked. 1 when values[j] starts no such run."""
    first = values[j]
    if not _in_own_buffer(v, first) or _piece_width(first, axis, packed) is None:
        return 1
    layout = (dims_key(first.dims), first.dtype)
    n = 1
    for value in values[j + 1:]:
        if not _in_own_buffer(v, value) or (dims_key(value.dims), value.dtype) != layout:
            break
        n += 1
    return n


def _in_own_buffer(v, value):
    """Whether the kernel reads `value` from a buffer of its own, none of its dims 0."""
    return value not in v.computed and value.node.type != "Const" and \
        all(isinstance(d, int) and d > 0 for d in dims_key(value.dims))


def _buffer_run_piece(v, run, axis, packed):
    """One piece for a run of buffers of one layout: element p of the run along `axis`
    is element p % width of buffer p // width, one load from a chosen address (the
    choice depends on the loops outside the piece's rows only): as pieces of their own,
    each was a loop of its own, T copies of the code for LLVM to compile."""
    width = _piece_width(run[0], axis, packed)
    storages = [v.storage_of(x) for x in run]

    def view_at(local):
        p = local[axis]
        inner = list(local)
        if packed:
            del inner[axis]
        else:
            inner[axis] = v.x.mod(p, v.x.const(width))
        return v.x.load_one_of(storages, v.x.floordiv(p, v.x.const(width)),
                               v.x.linear(inner, run[0].dims), run[0].dtype.name)
    return v.x.const(width * len(run)), view_at


def _slice_index(v, node, k, index):
    """The input's index of element `index` of output k (an index Expr) of an Unpack or
    Split."""
    x = node.inputs[_SLICED_INPUT[node.type]]
    if node.type == "Unpack":
        axis = node.attrs.get("axis", 0) % len(x.dims)
        return list(index[:axis]) + [k] + list(index[axis:])
    axis = int(np.reshape(v.constant(node.inputs[0]), -1)[0]) % len(x.dims)
    local = list(index)
    local[axis] = v.x.add(v.x.mul(k, v.x.dim(node.outputs[0].dims[axis])), index[axis])
    return local


# A choice among more pieces than this branches; fewer are selects, computing each piece
# (cheap, and vectorizable).
SELECT_PIECES = 2


def _choose_piece(v, i, starts, piece, lo, hi):
    """piece(j) for the j in [lo, hi) with starts[j] <= i < starts[j + 1], by bisection:
    log2(pieces) comparisons per element, and only the chosen piece computed. A chain of
    selects over the pieces computes every piece for every element, which makes the
    concat of an unrolled recurrence's T steps cost T times its size."""
    if hi - lo == 1:
        return piece(lo)
    mid = (lo + hi) // 2
    return v.x.select(v.x.compare("lt", i, starts[mid]),
                      _choose_piece(v, i, starts, piece, lo, mid),
                      _choose_piece(v, i, starts, piece, mid, hi),
                      branch=hi - lo > SELECT_PIECES)


def unpack(v, node, k, index):
    return v.view(node.inputs[0], _slice_index(v, node, v.x.const(k), index))


def split(v, node, k, index):
    if node.type == "Split":
        axis_t, x = node.inputs
    else:
        x, _, axis_t = node.inputs
    axis = int(np.reshape(v.constant(axis_t), -1)[0]) % len(x.dims)
    local = list(index)
    local[axis] = v.x.add(index[axis], _split_starts(v, node, axis)[k])
    return v.view(x, local)


def _split_starts(v, node, axis):
    """Where each output of a split starts along `axis`, summed once per kernel: summed
    per output, a concatenation's gradient (a split into n pieces) cost n^2 additions."""
    key = ("split starts", node)
    if key not in v.memo:
        starts = [v.x.const(0)]
        for out in node.outputs[:-1]:
            starts.append(v.x.add(starts[-1], v.x.dim(out.dims[axis])))
        v.memo[key] = starts
    return v.memo[key]


def tile(v, node, k, index):
    x = node.inputs[0]
    return v.view(x, [i if dim_key(d) == dim_key(o) else v.x.mod(i, v.x.dim(d))
                      for i, d, o in zip(index, x.dims, _out(node).dims)])


def gather(v, node, k, index):
    params, indices, axis_t = node.inputs
    axis = int(np.reshape(v.constant(axis_t), -1)[0]) % len(params.dims)
    ri = len(indices.dims)
    bd = node.attrs.get("batch_dims", 0)
    bd = bd + ri if bd < 0 else bd
    idx_index = list(index[:bd]) + list(index[axis:axis + ri - bd])
    size = v.x.dim(params.dims[axis])
    where = v.x.linear(idx_index, indices.dims)  # the reference names the bad index
    pos = v.checked_index(node, v.x.cast(v.view(indices, idx_index), "int64"), size,
                          "indices{2} = {0} is not in [0, {1})",
                          f"indices is out of range [0, {params.dims[axis]}) for GatherV2 "
                          f"on axis {axis}", [(where, {"index": list(indices.dims)})])
    p_index = list(index[:axis]) + [pos] + list(index[axis + ri - bd:])
    return v.view(params, p_index)


def ragged_block(v, node, k, index):
    """Iteration k's block of a ragged stack (ops/while_v2.py): element `index` of the
    output is the stack's element at the block's offset (data) plus index's row-major
    position in the output, which has the block's dims (lowering gave them)."""
    elements, offset, _ = node.inputs
    at = v.x.add(v.x.cast(v.view(offset, []), "int64"), v.x.linear(index, _out(node).dims))
    return v.view(elements, [at])


def one_hot(v, node, k, index):
    indices, _, on, off = node.inputs
    out = _out(node)
    axis = node.attrs.get("axis", -1)
    axis = len(out.dims) - 1 if axis == -1 else axis
    rest = list(index[:axis]) + list(index[axis + 1:])
    hot = v.x.compare("eq", v.x.cast(v.view(indices, rest), "int64"), index[axis])
    return v.x.select(hot, v.view(on, []), v.view(off, []))


class LoopRules(dict):
    """op type -> loop rule. A type with a scalar emitter and no rule of its own gets the
    elementwise rule, looked up when asked, so an emitter registered later (a new op) is
    lowered without an entry here."""

    def get(self, op_type, default=None):
        rule = super().get(op_type)
        if rule is None and op_type in ELEMENTWISE_OP_TYPES:
            return elementwise
        return default if rule is None else rule

    def __missing__(self, op_type):
        if op_type in ELEMENTWISE_OP_TYPES:
            return elementwise
        raise KeyError(op_type)

    def __contains__(self, op_type):
        return super().__contains__(op_type) or op_type in ELEMENTWISE_OP_TYPES


LOOP_RULES = LoopRules()
LOOP_RULES.update({
    "AddN": add_n, "BiasAdd": bias_add, "Select": select,
    "Identity": identity, "StopGradient": identity, "PlaceholderWithDefault": identity,
    "ZerosLike": constant_of(0), "OnesLike": constant_of(1), "Fill": fill,
    "Const": stored, "VariableV2": stored, "Parameter": stored,
    "Shape": shape, "ShapeN": shape_n, "Size": size, "Rank": rank, "Range": range_,
    "Assign": assign, "AssignAdd": assign, "AssignSub": assign,
    "Sum": reduce_rule("sum"), "Mean": reduce_rule("mean"), "Prod": reduce_rule("prod"),
    "Max": reduce_rule("max"), "Min": reduce_rule("min"), "Any": reduce_rule("any"),
    "All": reduce_rule("all"), "ArgMax": arg_reduce, "ArgMin": arg_reduce,
    "BiasAddGrad": bias_add_grad, "L2Loss": l2_loss, "SumToShape": sum_to_shape,
    "Softmax": softmax, "LogSoftmax": softmax,
    "SparseSoftmaxCrossEntropyWithLogits": sparse_xent,
    "MatMul": matmul_loop, "BatchMatMulV2": matmul_loop,
    "Reshape": reshape, "ExpandDims": reshape, "Squeeze": reshape,
    "BroadcastTo": broadcast_to, "Transpose": transpose,
    "Slice": slice_, "StridedSlice": strided_slice, "StridedSliceGrad": strided_slice_grad,
    "Pad": pad, "PadV2": pad, "MirrorPad": mirror_pad,
    "ConcatV2": concat, "Pack": pack, "Unpack": unpack, "Split": split, "SplitV": split,
    "Tile": tile, "GatherV2": gather, "OneHot": one_hot,
    "RaggedBlock": ragged_block,
})
