"""einsum, composed of transpose, reshape, reduce_sum, Select and batched matmul.

Operands are contracted left to right, two at a time: in each pair, letters neither
operand's partner nor any later operand or the output needs are summed out first; the
letters left are batch (in both, still needed), contracted (in both, no longer needed) and
free (in one); the pair becomes one BatchMatMul of [batch, free_a, contracted] by
[batch, contracted, free_b]. A letter repeated within one operand takes that operand's
diagonal. So the work is that of the matmuls, never of the full outer product, and the
gradient is the composition's.

Ellipses stand for the same leading dims in every operand that has one (no broadcasting
of size-1 dims: the sizes must agree, as the letters' must).
"""
import string

from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, matmul_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import identity

__all__ = ["einsum"]

_ELLIPSIS_LETTERS = "".join(sorted(set(string.ascii_uppercase + string.ascii_lowercase)))


def _parse(equation, operands):
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got {equation!r}")
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: the equation {equation!r} has {len(terms)} inputs but "
                         f"{len(operands)} operands were given")
    used = set(eq) - set(".,->")
    spare = [c for c in _ELLIPSIS_LETTERS if c not in used]
    n_ellipsis = 0
    expanded = []
    for term, x in zip(terms, operands):
        if not set(term.replace("...", "")) <= set(string.ascii_letters):
            raise ValueError(f"einsum: invalid subscripts {term!r} in {equation!r}")
        if "..." in term:
            rank = x.shape.ndims
            if rank is None:
                raise ValueError(f"einsum: an operand with '...' ({term!r}) needs a known rank")
            k = rank - (len(term) - 3)
            n_ellipsis = max(n_ellipsis, k)
            term = term.replace("...", "".join(spare[n_ellipsis - k:n_ellipsis]) if k else "")
        elif x.shape.ndims is not None and x.shape.ndims != len(term):
            raise ValueError(f"einsum: subscripts {term!r} name {len(term)} dims but the "
                             f"operand has shape {x.shape}")
        expanded.append(term)
    ellipsis_letters = "".join(spare[:n_ellipsis])
    if arrow:
        out = out.replace("...", ellipsis_letters)
    else:  # implicit output: the ellipsis dims, then the letters used once, sorted
        counts = {c: sum(t.count(c) for t in expanded) for c in used}
        out = ellipsis_letters + "".join(sorted(c for c in used if counts[c] == 1))
    if len(set(out)) != len(out) or not set(out) <= set("".join(expanded)):
        raise ValueError(f"einsum: output subscripts {out!r} of {equation!r} must be distinct "
                         "letters that appear in the inputs")
    return expanded, out


def _check_sizes(terms, operands):
    size = {}
    for term, x in zip(terms, operands):
        for c, d in zip(term, x.shape.as_list() if x.shape.ndims is not None else []):
            if d is not None and size.setdefault(c, d) != d:
                raise ValueError(f"einsum: dimension '{c}' has size {size[c]} in one operand "
                                 f"and {d} in another")


def _take_diagonal(x, letters):
    """x with each repeated letter reduced to its diagonal (one axis per letter)."""
    while len(set(letters)) != len(letters):
        c = next(c for c in letters if letters.count(c) > 1)
        p = letters.index(c)
        q = letters.index(c, p + 1)
        rest = [i for i in range(len(letters)) if i not in (p, q)]
        x = array_ops.transpose(x, rest + [p, q])
        n = array_ops.shape(x)[-1]
        r = array_ops.range(n)
        eye = math_ops.equal(array_ops.expand_dims(r, 1), array_ops.expand_dims(r, 0))
        eye = array_ops.broadcast_to(eye, array_ops.shape(x))
        x = reduction_ops.reduce_sum(math_ops.where(eye, x, array_ops.zeros_like(x)), -1)
        letters = "".join(letters[i] for i in rest) + c
    return x, letters


def _sum_out(x, letters, keep):
    axes = [i for i, c in enumerate(letters) if c not in keep]
    if not axes:
        return x, letters
    return (reduction_ops.reduce_sum(x, axes),
            "".join(c for c in letters if c in keep))


def _transposed(x, letters, order):
    perm = [letters.index(c) for c in order]
    return x if perm == list(range(len(perm))) else array_ops.transpose(x, perm)


def _group_size(dims, letters, group):
    return reduction_ops.reduce_prod(
        array_ops.gather(dims, [letters.index(c) for c in group]) if group
        else array_ops.ones([0], dims.dtype), keepdims=True)


def _contract_pair(a, la, b, lb, keep):
    a, la = _sum_out(a, la, set(keep) | set(lb))
    b, lb = _sum_out(b, lb, set(keep) | set(la))
    batch = [c for c in la if c in lb and c in keep]
    contracted = [c for c in la if c in lb and c not in keep]
    free_a = [c for c in la if c not in lb]
    free_b = [c for c in lb if c not in la]
    a = _transposed(a, la, batch + free_a + contracted)
    b = _transposed(b, lb, batch + contracted + free_b)
    da, db = array_ops.shape(a), array_ops.shape(b)
    order_a, order_b = "".join(batch + free_a + contracted), "".join(batch + contracted + free_b)
    a3 = array_ops.reshape(a, array_ops.concat(
        [_group_size(da, order_a, batch), _group_size(da, order_a, free_a),
         _group_size(da, order_a, contracted)], 0))
    b3 = array_ops.reshape(b, array_ops.concat(
        [_group_size(db, order_b, batch), _group_size(db, order_b, contracted),
         _group_size(db, order_b, free_b)], 0))
    product = matmul_ops.matmul(a3, b3)
    out_dims = array_ops.concat([da[:len(batch) + len(free_a)],
                                 db[len(batch) + len(contracted):]], 0)
    return array_ops.reshape(product, out_dims), "".join(batch + free_a + free_b)


def einsum(equation, *inputs, **kwargs):
    """Sums of products of operands' elements over the letters missing from the output,
    as numpy.einsum / TF1's tf.einsum (e.g. "ij,jk->ik", "bij,bjk->bik", "ii->i",
    "...ij,...jk")."""
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"einsum: unexpected keyword arguments {sorted(kwargs)}")
    if not inputs:
        raise ValueError("einsum: no operands given")
    with name_scope(name, "einsum", inputs) as scope:
        operands = [convert_to_tensor(x) for x in inputs]
        terms, out = _parse(equation, operands)
        _check_sizes(terms, operands)
        x, letters = _take_diagonal(operands[0], terms[0])
        for i in range(1, len(operands)):
            y, ly = _take_diagonal(operands[i], terms[i])
            later = set(out).union(*terms[i + 1:])
            x, letters = _contract_pair(x, letters, y, ly, later)
        x, letters = _sum_out(x, letters, set(out))
        return identity(_transposed(x, letters, out), name=scope)
