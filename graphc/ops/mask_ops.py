"""Ops that keep or place values by their position: sequence_mask, matrix_band_part, diag,
diag_part. Composed of range/compare/Select, so they compile natively and differentiate
through Select; positions outside the mask get zeros by selection, not by multiplying
with 0 (an inf or NaN outside the band must not leak into the result as NaN).
"""
from graphc import dtypes
from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.control_flow_ops import identity

__all__ = ["sequence_mask", "matrix_band_part", "diag", "diag_part"]


def sequence_mask(lengths, maxlen=None, dtype=dtypes.bool, name=None):
    """mask[i..., j] = j < lengths[i...], for j in [0, maxlen) (maxlen defaults to the
    largest length)."""
    with name_scope(name, "SequenceMask", [lengths, maxlen]):
        lengths = convert_to_tensor(lengths, name="lengths")
        if not lengths.dtype.is_integer:
            raise TypeError(f"sequence_mask: lengths must be integers, got "
                            f"{lengths.dtype.name}")
        if maxlen is None:
            maxlen = reduction_ops.reduce_max(lengths)
        else:
            maxlen = convert_to_tensor(maxlen, dtype_hint=lengths.dtype, name="maxlen")
            if maxlen.shape.ndims is not None and maxlen.shape.ndims != 0:
                raise ValueError(f"maxlen must be scalar for sequence_mask, got shape "
                                 f"{maxlen.shape}")
        positions = array_ops.range(constant(0, maxlen.dtype), maxlen, constant(1, maxlen.dtype))
        mask = math_ops.less(positions, math_ops.cast(array_ops.expand_dims(lengths, -1),
                                                      maxlen.dtype))
        dtype = dtypes.as_dtype(dtype)
        return mask if dtype == dtypes.bool else math_ops.cast(mask, dtype)


def _select(mask, x):
    """x where mask (broadcast to x's shape), zeros elsewhere."""
    mask = array_ops.broadcast_to(mask, array_ops.shape(x))
    return math_ops.where(mask, x, array_ops.zeros_like(x))


def matrix_band_part(input, num_lower, num_upper, name=None):
    """Keeps the band of each innermost matrix: element (m, n) stays where
    (num_lower < 0 or m - n <= num_lower) and (num_upper < 0 or n - m <= num_upper)."""
    with name_scope(name, "MatrixBandPart", [input, num_lower, num_upper]) as scope:
        x = convert_to_tensor(input, name="input")
        if x.shape.ndims is not None and x.shape.ndims < 2:
            raise ValueError(f"matrix_band_part: input must be at least rank 2, got shape "
                             f"{x.shape}")
        lower = convert_to_tensor(num_lower, dtype_hint=dtypes.int64, name="num_lower")
        upper = math_ops.cast(convert_to_tensor(num_upper, dtype_hint=lower.dtype,
                                                name="num_upper"), lower.dtype)
        dims = array_ops.shape(x, out_type=lower.dtype)
        rows = array_ops.expand_dims(array_ops.range(dims[-2]), 1)
        cols = array_ops.expand_dims(array_ops.range(dims[-1]), 0)
        zero = constant(0, lower.dtype)
        below = math_ops.logical_or(lower < zero, rows - cols <= lower)
        above = math_ops.logical_or(upper < zero, cols - rows <= upper)
        out = _select(math_ops.logical_and(below, above), x)
        return identity(out, name=scope)


def _eye_mask(n):
    r = array_ops.range(n)
    return math_ops.equal(array_ops.expand_dims(r, 1), array_ops.expand_dims(r, 0))


def diag(diagonal, name=None):
    """A tensor of shape D + D holding diagonal (shape D) on its diagonal, zeros elsewhere."""
    with name_scope(name, "Diag", [diagonal]) as scope:
        x = convert_to_tensor(diagonal, name="diagonal")
        if x.shape.ndims == 0:
            raise ValueError("diag: input must be at least rank 1, got a scalar")
        n = array_ops.size(x)
        square = array_ops.broadcast_to(array_ops.reshape(x, [-1, 1]), array_ops.stack([n, n]))
        out_dims = array_ops.concat([array_ops.shape(x), array_ops.shape(x)], 0)
        out = array_ops.reshape(_select(_eye_mask(n), square), out_dims, name=scope)
        if x.shape.ndims is not None:
            out.set_shape(x.shape.concatenate(x.shape))
        return out


def diag_part(input, name=None):
    """The diagonal (shape D) of a tensor of shape D + D."""
    with name_scope(name, "DiagPart", [input]) as scope:
        x = convert_to_tensor(input, name="input")
        rank = x.shape.ndims
        if rank is None or rank % 2 or rank == 0:
            raise ValueError(f"diag_part: input must have an even, known rank > 0, got shape "
                             f"{x.shape}")
        half = x.shape[:rank // 2]
        half.assert_is_compatible_with(x.shape[rank // 2:])
        dims = array_ops.shape(x)[:rank // 2]
        n = reduction_ops.reduce_prod(dims)
        square = array_ops.reshape(x, array_ops.stack([n, n]))
        out = reduction_ops.reduce_sum(_select(_eye_mask(n), square), axis=1)
        out = array_ops.reshape(out, dims, name=scope)
        out.set_shape(half.merge_with(x.shape[rank // 2:]))
        return out
