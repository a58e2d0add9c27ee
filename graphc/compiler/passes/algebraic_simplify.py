"""algebraic_simplify: local rewrites that remove or cheapen work.

Rewrites (c is a Const whose elements are all equal, a "splat"):
- x*1, 1*x, x/1 -> x; x+0, 0+x, x-0 -> x; --x -> x; Identity, StopGradient and an unfed
  PlaceholderWithDefault -> their input; Cast to the input's own dtype -> the input.
- transpose(transpose(x, p), q) -> transpose(x, p[q]), or x when that is the identity;
  transpose(x, identity perm) -> x; reshape(reshape(x, s), t) -> reshape(x, t);
  reshape(x, s) -> x when the IR dims show the shape does not change;
  reshape(x, shape(x)) and broadcast_to(x, shape(x)) -> x.
- pow(x, 2) -> x*x; pow(x, 3) -> (x*x)*x; pow(x, 4) -> (x*x)*(x*x); pow(x, 1) -> x;
  pow(x, 0) -> ones_like(x); pow(x, -1) -> reciprocal(x) (floats); pow(x, 0.5) -> sqrt(x).
- select(c, x, y) -> x or y when the condition c is the same constant everywhere.
- split(a . b) along the last axis with one piece used -> a . b' where b' is that piece's
  columns of op(b) (a Slice: rows of b when transpose_b): the unused columns are never
  computed. Static widths only.
- x / c -> x * (1/c) for floats when 1/c is exact (c a power of two whose reciprocal is
  representable), for every float c when run with exact_only=False.
- an operand of a broadcasting binary op that is a splat (a Const, Fill(dims, s) or
  BroadcastTo(s, shape) with scalar s, ZerosLike, OnesLike) becomes the scalar s when the
  other operand alone already has the output's shape: its IR dims are the output's, or
  the splat takes its shape from that operand (Fill(Shape(y), s), OnesLike(y), ...).
An identity is removed only when the IR dims and dtype prove the result is the operand
itself: x*1 where the 1 broadcasts x to a bigger shape stays. Nodes with control
dependencies of their own are not replaced by an existing value (the dependency would be
lost). Nodes left without users are deleted.

Exactness (IEEE 754): all rewrites give bit-identical results except these, accepted as
in XLA and TF's grappler:
- x+0 (and x-(-0)) gives -0 where x is -0; the rewrite returns -0 (the two compare equal).
- pow(x, 0.5) -> sqrt(x) differs at x = -0 (pow: +0, sqrt: -0) and x = -inf (pow: +inf,
  sqrt: nan).
- with exact_only=False, x * (1/c) can differ from x / c in the last bit.
- pow(x, 3) and pow(x, 4) as products round twice (up to ~1 ulp from the correctly
  rounded power, and they overflow to inf exactly where the power does); grappler's
  arithmetic optimizer makes the same trade (a tanh-gelu's x**3 then costs two
  multiplications instead of exp/log).
- the narrowed product of a split sums each element over the same terms, but the GEMM
  may order them differently for the narrower shape (last-bit differences).
pow(x, 2) -> x*x is exact: both are the correctly rounded square.
"""
import numpy as np

from graphc.compiler.ir import Value
from graphc.framework.op_def import OpTypes

IDENTITY_OPS = OpTypes("forwards_input")
# Elementwise binary ops that broadcast their operands (NumPy rules).
BROADCASTING_BINARY = OpTypes("broadcasting")
_MAX_SWEEPS = 8


def run(module, exact_only=True):
    counts = {}
    for _ in range(_MAX_SWEEPS):
        changed = 0
        for node in list(module.nodes):
            if _unused(module, node):
                continue  # deleted below
            for rule in _rules_for(node):
                name = rule(module, node, exact_only)
                if name:
                    counts[name] = counts.get(name, 0) + 1
                    changed += 1
                    break
        if not changed:
            break
    counts["nodes_removed"] = module.remove_dead()
    return counts


def _unused(module, node):
    return all(not v.uses and v not in module.outputs for v in node.outputs)


def _rules_for(node):
    rules = [RULES[node.type]] if node.type in RULES else \
        [_simplify_identity] if node.type in IDENTITY_OPS else []
    if node.type in BROADCASTING_BINARY:
        rules.append(_simplify_splat_operand)
    return rules


# ------------------------------------------------------------------------ helpers
def _const(v):
    """The array of a Const-produced value, else None."""
    return v.node.attrs["value"] if isinstance(v, Value) and v.node.type == "Const" else None


def _splat(v):
    """The one element value of a Const whose elements are all equal, else None."""
    c = _const(v)
    if c is None or c.size == 0 or c.dtype == object:
        return None
    first = c.reshape(-1)[0]
    return first if np.all(c == first) else None


def _is(v, number):
    s = _splat(v)
    return s is not None and s == number


def _same_type(a, b):
    return a.dtype == b.dtype and a.dims is not None and a.dims == b.dims


def _forward(module, node, value, same_shape=False):
    """Replaces node's only output by an existing value, if that loses nothing.

    same_shape: the caller has proven the shapes equal (else the IR dims must be)."""
    out = node.outputs[0]
    if node.control_deps or value.dtype != out.dtype:
        return False
    if not same_shape and not _same_type(value, out):
        return False
    module.replace_node(node, [value])
    return True


def _rebuild(module, node, type, inputs, attrs=None):
    """A new node computing node's output another way, placed just before it."""
    out = node.outputs[0]
    new = module.add_node(type, inputs, attrs or {}, [(out.dtype, out.dims)], node.name,
                          node.location, node.gradient_of, node.control_deps, before=node)
    module.replace_node(node, new.outputs)


# -------------------------------------------------------------------------- rules
def _identity_operand(neutral, commutes):
    """x op neutral -> x (and neutral op x -> x when the op commutes)."""
    def rule(module, node, exact_only):
        x, y = node.inputs
        if _is(y, neutral) and _forward(module, node, x):
            return f"{node.type.lower()}_by_{neutral}"
        if commutes and _is(x, neutral) and _forward(module, node, y):
            return f"{node.type.lower()}_by_{neutral}"
        return None
    return rule


def _simplify_identity(module, node, exact_only):
    return "identity" if _forward(module, node, node.inputs[0]) else None


def _simplify_neg(module, node, exact_only):
    x = node.inputs[0]
    if x.node.type == "Neg" and _forward(module, node, x.node.inputs[0]):
        return "neg_neg"
    return None


def _simplify_cast(module, node, exact_only):
    x = node.inputs[0]
    if x.dtype == node.outputs[0].dtype and _forward(module, node, x):
        return "noop_cast"
    return None


def _simplify_transpose(module, node, exact_only):
    x, perm = node.inputs
    q = _const(perm)
    if q is None:
        return None
    q = q.reshape(-1)
    if np.array_equal(q, np.arange(q.size)) and _forward(module, node, x):
        return "identity_transpose"
    p = _const(x.node.inputs[1]) if x.node.type == "Transpose" else None
    if p is None:
        return None
    inner = x.node.inputs[0]
    composed = p.reshape(-1)[q]
    if np.array_equal(composed, np.arange(composed.size)) and _forward(module, node, inner):
        return "transpose_transpose"
    new_perm = module.add_constant(composed.astype(p.dtype), before=node,
                                   name=node.name + "/perm", location=node.location)
    _rebuild(module, node, "Transpose", [inner, new_perm], node.attrs)
    return "transpose_transpose"


def _simplify_reshape(module, node, exact_only):
    x, shape = node.inputs
    if _forward(module, node, x, same_shape=_shape_operand(shape) is x):
        return "noop_reshape"
    if x.node.type == "Reshape":
        _rebuild(module, node, "Reshape", [x.node.inputs[0], shape], node.attrs)
        return "reshape_reshape"
    return None


def _simplify_broadcast_to(module, node, exact_only):
    x, shape = node.inputs
    if _forward(module, node, x, same_shape=_shape_operand(shape) is x):
        return "noop_broadcast"
    return None


def _simplify_pow(module, node, exact_only):
    x, y = node.inputs
    out = node.outputs[0]
    if not _same_type(x, out):
        return None
    if _is(y, 2):
        _rebuild(module, node, "Mul", [x, x])
        return "pow2_to_mul"
    if x.dtype.is_floating and _is(y, 0.5):
        _rebuild(module, node, "Sqrt", [x])
        return "pow_half_to_sqrt"
    if _is(y, 1) and _forward(module, node, x):
        return "pow1_to_identity"
    if _is(y, 0):
        _rebuild(module, node, "OnesLike", [x])
        return "pow0_to_ones"
    if _is(y, 3) or _is(y, 4):
        square = _add_before(module, node, "Mul", [x, x])
        _rebuild(module, node, "Mul", [square, x if _is(y, 3) else square])
        return "pow_int_to_mul"
    if x.dtype.is_floating and _is(y, -1):
        _rebuild(module, node, "Reciprocal", [x])
        return "pow_minus1_to_reciprocal"
    return None


def _add_before(module, node, type, inputs):
    """A new node of node's output type and dims, placed just before it; its output."""
    out = node.outputs[0]
    return module.add_node(type, inputs, {}, [(out.dtype, out.dims)], node.name,
                           node.location, node.gradient_of, node.control_deps,
                           before=node).outputs[0]


def _simplify_div(module, node, exact_only):
    x, y = node.inputs
    if _is(y, 1) and _forward(module, node, x):
        return "realdiv_by_1"
    c = _const(y)
    if c is None or not y.dtype.is_floating:
        return None
    r = _reciprocal(c, exact_only)
    if r is None:
        return None
    r_value = module.add_constant(r, before=node, name=y.node.name + "/reciprocal",
                                  location=y.node.location)
    _rebuild(module, node, "Mul", [x, r_value])
    return "div_to_mul"


def _reciprocal(c, exact_only):
    """1/c in c's dtype, or None when it is not finite (or not exact and exact_only)."""
    with np.errstate(all="ignore"):
        r = (1 / c.astype(np.float64)).astype(c.dtype)
    if not np.all(np.isfinite(r)) or np.any(c == 0):
        return None
    if exact_only:
        powers_of_two = np.all(np.abs(np.frexp(c)[0]) == 0.5) and \
            np.all(np.abs(np.frexp(r)[0]) == 0.5)
        if not (powers_of_two and np.all(r.astype(np.float64) * c == 1)):
            return None
    return r


_LIKE_FILL = {"ZerosLike": 0, "OnesLike": 1}


def _splat_parts(v):
    """(scalar Value or number, Value whose shape it takes or None) for a splat v."""
    n = v.node
    if n.type == "Fill" and n.inputs[1].dims == ():
        return n.inputs[1], _shape_operand(n.inputs[0])
    if n.type == "BroadcastTo" and n.inputs[0].dims == ():
        return n.inputs[0], _shape_operand(n.inputs[1])
    if n.type in _LIKE_FILL:
        return _LIKE_FILL[n.type], n.inputs[0]
    s = _splat(v)
    return (None, None) if s is None else (s, None)


def _shape_operand(shape):
    return shape.node.inputs[0] if shape.node.type == "Shape" else None


def _simplify_splat_operand(module, node, exact_only):
    out = node.outputs[0]
    for i in (0, 1):
        v, other = node.inputs[i], node.inputs[1 - i]
        if v.dims == ():
            continue
        scalar, shape_source = _splat_parts(v)
        if scalar is None:
            continue
        if shape_source is not other and (other.dims is None or other.dims != out.dims):
            continue
        if not isinstance(scalar, Value):
            scalar = module.add_constant(np.array(scalar, dtype=v.dtype.np), before=node,
                                         name=v.node.name + "/scalar", location=v.node.location)
        module.set_input(node, i, scalar)
        return "splat_to_scalar"
    return None


def _simplify_select(module, node, exact_only):
    """select(c, x, y) with c the same everywhere -> x or y (e.g. dropout's training flag
    left at its default False: the mask's arithmetic is then dead code)."""
    cond, x, y = node.inputs
    scalar, _ = _splat_parts(cond)
    if isinstance(scalar, Value):
        scalar = _splat(scalar)
    if scalar is None or isinstance(scalar, Value):
        return None
    if _forward(module, node, x if bool(scalar) else y):
        return "select_of_constant"
    return None


def _simplify_split_of_product(module, node, exact_only):
    """split(a . b) along the columns with one piece used -> a . (that piece's columns
    of b): static_rnn's backward product g . [W_x; W_h]^T is split into the gradients of
    x and h, and x's (a fed input's) is dropped, a third of the product's work."""
    x, axis = (node.inputs[1], node.inputs[0]) if node.type == "Split" else \
        (node.inputs[0], node.inputs[2])
    product = x.node
    used = [o for o in node.outputs if o.uses or o in module.outputs]
    if (product.type != "MatMul" or len(used) != 1 or len(node.outputs) < 2
            or x.uses != [node] or x in module.outputs or product in module.roots
            or product.control_deps or product.control_users or node.control_deps
            or not isinstance(product.inputs[1], Value)):
        return None
    axis = _const(axis)
    widths = [o.dims[-1] for o in node.outputs]
    b = product.inputs[1]
    if (axis is None or int(axis) % 2 != 1 or not all(isinstance(w, int) for w in widths)
            or not all(isinstance(d, int) for d in b.dims)):
        return None
    piece = node.outputs.index(used[0])
    offset, width = sum(widths[:piece]), widths[piece]
    transpose_b = bool(product.attrs.get("transpose_b"))
    # the piece's columns of op(b): rows of b when it is transposed
    begin, size = ([offset, 0], [width, b.dims[1]]) if transpose_b else \
        ([0, offset], [b.dims[0], width])
    where = dict(location=product.location, before=node)
    columns = module.add_node(
        "Slice", [b, module.add_constant(np.array(begin, np.int64), name=b.node.name + "/begin",
                                         **where),
                  module.add_constant(np.array(size, np.int64), name=b.node.name + "/size",
                                      **where)],
        {}, [(b.dtype, tuple(size))], product.name + "/columns", product.location,
        product.gradient_of, before=node)
    narrow = module.add_node("MatMul", [product.inputs[0], columns.outputs[0]],
                             dict(product.attrs), [(used[0].dtype, used[0].dims)],
                             product.name + "/narrow", product.location, product.gradient_of,
                             before=node)
    module.replace_all_uses(used[0], narrow.outputs[0])
    return "split_of_product"


RULES = {
    "Split": _simplify_split_of_product,
    "SplitV": _simplify_split_of_product,
    "Select": _simplify_select,
    "Mul": _identity_operand(1, commutes=True),
    "Add": _identity_operand(0, commutes=True),
    "Sub": _identity_operand(0, commutes=False),
    "RealDiv": _simplify_div,
    "Neg": _simplify_neg,
    "Cast": _simplify_cast,
    "Transpose": _simplify_transpose,
    "Reshape": _simplify_reshape,
    "BroadcastTo": _simplify_broadcast_to,
    "Pow": _simplify_pow,
}
