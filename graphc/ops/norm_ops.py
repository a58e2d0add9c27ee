"""tf.norm (tf.linalg.norm): vector norms over one axis or all elements, and the
Frobenius, 1- and inf-norms of matrices over two axes, as TF1's linalg_ops.norm."""
import numbers

import numpy as np

from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["norm"]

_MATRIX_ORDS = ("euclidean", "fro", 1, np.inf)


def _checked_axis(axis):
    if axis is None or isinstance(axis, numbers.Integral):
        return axis, False
    if isinstance(axis, (tuple, list)) and len(axis) == 2 and axis[0] != axis[1] and \
            all(isinstance(a, numbers.Integral) for a in axis):
        return tuple(axis), True
    raise ValueError(f"norm: 'axis' must be None, an integer, or a tuple of 2 unique "
                     f"integers, got {axis!r}")


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None,  # noqa: A002
         keep_dims=None):
    keepdims = keepdims if keep_dims is None else keep_dims
    axis, is_matrix = _checked_axis(axis)
    if is_matrix:
        if ord == 2:
            raise ValueError("norm: the 2-norm of a matrix (its largest singular value) "
                             "needs an SVD, which graphc does not have; use 'fro', 1 or "
                             "np.inf")
        if ord not in _MATRIX_ORDS:
            raise ValueError(f"norm: 'ord' must be a supported matrix norm in "
                             f"['euclidean', 'fro', 1, inf], got {ord!r}")
    elif not (ord == "euclidean" or (isinstance(ord, numbers.Real) and ord > 0)):
        raise ValueError(f"norm: 'ord' must be a supported vector norm ('euclidean' or a "
                         f"number > 0, inf included), got {ord!r}")
    with name_scope(name, "norm", [tensor]):
        x = convert_to_tensor(tensor)
        if not x.dtype.is_floating:
            raise TypeError(f"norm: tensor must be floating point, got {x.dtype.name}")
        if axis is None:
            result = _vector_norm(array_ops.reshape(x, [-1]), ord, 0)
            if keepdims:
                ones = array_ops.ones_like(array_ops.shape(x))
                return array_ops.reshape(result, ones)
            return array_ops.reshape(result, [])
        result = _matrix_norm(x, ord, axis) if is_matrix else _vector_norm(x, ord, axis)
        if not keepdims:
            result = array_ops.squeeze(result, list(axis) if is_matrix else [axis])
        return result


def _vector_norm(x, ord, axis):  # noqa: A002
    """The norm over `axis`, kept as a dimension of size 1."""
    if ord in ("euclidean", 2):
        return math_ops.sqrt(reduction_ops.reduce_sum(math_ops.square(x), axis,
                                                      keepdims=True))
    magnitude = math_ops.abs(x)
    if ord == np.inf:
        return reduction_ops.reduce_max(magnitude, axis, keepdims=True)
    if ord == 1:
        return reduction_ops.reduce_sum(magnitude, axis, keepdims=True)
    p = convert_to_tensor(float(ord), dtype=x.dtype)
    total = reduction_ops.reduce_sum(math_ops.pow(magnitude, p), axis, keepdims=True)
    return math_ops.pow(total, math_ops.reciprocal(p))


def _matrix_norm(x, ord, axis):  # noqa: A002
    """The norm over the two axes, kept as dimensions of size 1."""
    if ord in ("euclidean", "fro"):
        return math_ops.sqrt(reduction_ops.reduce_sum(math_ops.square(x), list(axis),
                                                      keepdims=True))
    rows, cols = axis
    magnitude = math_ops.abs(x)
    if ord == 1:  # the largest column sum
        sums = reduction_ops.reduce_sum(magnitude, rows, keepdims=True)
        return reduction_ops.reduce_max(sums, cols, keepdims=True)
    sums = reduction_ops.reduce_sum(magnitude, cols, keepdims=True)  # inf: largest row sum
    return reduction_ops.reduce_max(sums, rows, keepdims=True)
