"""top_k (TopKV2: a host op, its output order being a sort), sort and argsort (TF1's
sort_ops, built on top_k) and in_top_k (composed of comparisons and sums, so it compiles
natively)."""
import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import name_scope
from graphc.framework.op_def import register_op
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor

__all__ = ["top_k", "in_top_k", "sort", "argsort"]


def _top_k_infer(inputs, a):
    x, k = inputs
    if not k.dtype.is_integer or (k.shape.ndims not in (None, 0)):
        raise TypeError(f"top_k: k must be an int32 scalar, got {k.dtype.name} {k.shape}")
    if x.shape.ndims == 0:
        raise ValueError("top_k: input must have rank >= 1, got a scalar")
    k_value = constant_value(k)
    if k_value is not None:
        k_value = int(k_value)
        if k_value < 0:
            raise ValueError(f"top_k: k must be >= 0, got {k_value}")
        last = x.shape[-1].value if x.shape.ndims else None
        if last is not None and last < k_value:
            raise ValueError(f"input must have last dimension >= k = {k_value} but is {last}")
    out = (TensorShape(None) if x.shape.ndims is None
           else x.shape[:-1].concatenate([k_value]))
    return [(out, x.dtype), (out, dtypes.int32)]


def _top_k_kernel(x, k, sorted=True):
    k = int(k)
    if k < 0:
        raise KernelError(f"Need k >= 0, got {k}")
    n = x.shape[-1]
    if n < k:
        raise KernelError(f"input must have at least k columns. Had {n}, needed {k}")
    # a stable ascending sort of the reversed rows, read backwards: descending order with
    # ties in increasing index, as TF's (and without negating: unsigned and INT_MIN)
    descending = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    indices = (n - 1 - descending[..., :k]).astype(np.int32)
    return np.take_along_axis(x, indices, axis=-1), indices


def _top_k_grad(op, g_values, g_indices=None):
    x, _ = op.inputs
    indices = op.outputs[1]
    if g_values is None:
        return [None, None]
    dims = array_ops.shape(x)
    n = dims[-1]
    k = array_ops.shape(indices)[-1]
    rows = array_ops.size(indices) // math_ops.maximum(k, 1)
    offsets = array_ops.expand_dims(array_ops.range(rows) * n, 1)
    flat = array_ops.reshape(array_ops.reshape(indices, array_ops.stack([rows, k])) + offsets,
                             [-1])
    dx = array_ops.scatter_rows(array_ops.reshape(g_values, [-1]), flat,
                                array_ops.reshape(array_ops.size(x), [1]))
    return [array_ops.reshape(dx, dims), None]


# host_only: a sort, which no loop template lowers yet
register_op("TopKV2", infer=_top_k_infer, kernel=_top_k_kernel, grad=_top_k_grad,
            kind="opaque", host_only=True)


def top_k(input, k=1, sorted=True, name=None):
    """(values, indices) of the k largest entries of each last-axis row, largest first;
    equal values in increasing index order."""
    x = convert_to_tensor(input)
    with x.graph.as_default():
        k = convert_to_tensor(k, dtype_hint=dtypes.int32)
    op = x.graph.create_op("TopKV2", [x, k], {"sorted": bool(sorted)}, name or "TopKV2")
    return tuple(op.outputs)


def in_top_k(predictions, targets, k, name=None):
    """out[i]: whether predictions[i, targets[i]] is among the k largest of row i, ties
    counting for the target (fewer than k entries strictly larger). False where the target
    is outside [0, classes) or the row holds a non-finite value, as TF1's."""
    with name_scope(name, "in_top_k", [predictions, targets]) as scope:
        p = convert_to_tensor(predictions, name="predictions")
        t = convert_to_tensor(targets, name="targets")
        if p.dtype != dtypes.float32:
            raise TypeError(f"in_top_k: predictions must be float32, got {p.dtype.name}")
        if not t.dtype.is_integer:
            raise TypeError(f"in_top_k: targets must be int32 or int64, got {t.dtype.name}")
        if p.shape.ndims not in (None, 2) or t.shape.ndims not in (None, 1):
            raise ValueError(f"in_top_k: predictions must be 2-D and targets 1-D, got "
                             f"{p.shape} and {t.shape}")
        classes = array_ops.shape(p, out_type=t.dtype)[1]
        is_target = math_ops.equal(array_ops.expand_dims(t, 1),
                                   array_ops.expand_dims(array_ops.range(classes), 0))
        valid = reduction_ops.reduce_any(is_target, axis=1)
        target_value = reduction_ops.reduce_sum(
            math_ops.where(is_target, p, array_ops.zeros_like(p)), axis=1, keepdims=True)
        larger = reduction_ops.reduce_sum(
            math_ops.cast(math_ops.greater(p, target_value), t.dtype), axis=1)
        finite = reduction_ops.reduce_all(
            math_ops.less(math_ops.abs(p), constant(np.inf, p.dtype)), axis=1)
        k = math_ops.cast(convert_to_tensor(k, dtype_hint=t.dtype), t.dtype)
        return math_ops.logical_and(math_ops.logical_and(valid, finite),
                                    math_ops.less(larger, k), name=scope)


def _sorted_along(values, axis, direction, name, pick):
    """top_k over the whole of `axis` (moved last and back): pick(values, indices)."""
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"{name}: direction must be 'ASCENDING' or 'DESCENDING', got "
                         f"{direction!r}")
    with name_scope(None, name, [values]):
        x = convert_to_tensor(values)
        rank = x.shape.ndims
        if rank is None:
            raise ValueError(f"{name}: values need a known rank")
        if rank == 0:
            raise ValueError(f"{name}: values must have rank >= 1, got a scalar")
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise ValueError(f"{name}: axis must be an int in [{-rank}, {rank}), got {axis!r}")
        axis %= rank
        perm = [d for d in range(rank) if d != axis] + [axis]
        moved = x if axis == rank - 1 else array_ops.transpose(x, perm)
        ascending = direction == "ASCENDING"
        if ascending and x.dtype.is_unsigned:
            raise TypeError(f"{name}: ascending order of unsigned {x.dtype.name} is not "
                            f"supported; cast to a signed type first")
        keys = math_ops.negative(moved) if ascending else moved
        top_values, top_indices = top_k(keys, k=array_ops.shape(moved)[-1])
        out = pick(math_ops.negative(top_values) if ascending else top_values, top_indices)
        if axis == rank - 1:
            return out
        return array_ops.transpose(out, np.argsort(perm).tolist())


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """values sorted along axis; equal values keep their order (top_k's, stable)."""
    return _sorted_along(values, axis, direction, name or "sort", lambda v, i: v)


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """The int32 indices that sort values along axis (stable: equal values in index
    order, whatever `stable` says)."""
    return _sorted_along(values, axis, direction, name or "argsort", lambda v, i: i)
