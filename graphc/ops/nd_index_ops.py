"""gather_nd, scatter_nd and boolean_mask, composed of gather/scatter along one flattened
axis (so they compile natively and differentiate through GatherV2/GatherGrad).

An index tuple (i_0 .. i_{K-1}) into the leading K dims of a tensor becomes the row
sum_k i_k * stride_k of the tensor reshaped to [prod(dims[:K])] + dims[K:]. A tuple with a
component outside its dim would land on some other valid row, so it is sent to row -1
instead, which the gather/scatter kernels reject (InvalidArgumentError naming the
GatherNd/ScatterNd node): TF1 raises for such an index too, never reads another element.
"""
from graphc import dtypes
from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor

__all__ = ["gather_nd", "scatter_nd", "boolean_mask"]


def _index_depth(indices, what):
    if not indices.dtype.is_integer:
        raise TypeError(f"{what}: indices must be int32 or int64, got {indices.dtype.name}")
    if indices.shape.ndims is None or indices.shape[-1].value is None:
        raise ValueError(f"{what}: the last dimension of indices must be known when the op is "
                         f"created (it is the index depth), got shape {indices.shape}")
    if indices.shape.ndims == 0:
        raise ValueError(f"{what}: indices must be at least 1-D, got a scalar")
    return indices.shape[-1].value


def _rows(indices, dims, depth):
    """The flattened row of each index tuple of `indices` into `dims` (an int tensor of the
    indexed shape), -1 where a component is out of its range; and the number of rows."""
    dims = math_ops.cast(dims, indices.dtype)
    lead = array_ops.slice(dims, [0], [depth])
    # stride_k = prod(lead[k+1:]): an exclusive reverse cumulative product, as sums of logs
    # would round, is computed term by term (depth is small and static)
    strides = array_ops.stack(
        [reduction_ops.reduce_prod(array_ops.slice(lead, [k + 1], [depth - k - 1]))
         for k in range(depth)]) if depth else constant([], indices.dtype)
    rows = reduction_ops.reduce_sum(indices * strides, axis=-1)
    zero = constant(0, indices.dtype)
    in_range = reduction_ops.reduce_all(
        math_ops.logical_and(indices >= zero, indices < lead), axis=-1)
    rows = math_ops.where(in_range, rows, array_ops.fill(array_ops.shape(rows),
                                                           constant(-1, indices.dtype)))
    return rows, reduction_ops.reduce_prod(lead)


def gather_nd(params, indices, name=None, batch_dims=0):
    """out[i..., :] = params[indices[i..., 0], ..., indices[i..., K-1], ...] (TF1's
    GatherNd): out has shape indices.shape[:-1] + params.shape[K:]."""
    if batch_dims != 0:
        raise NotImplementedError("gather_nd: batch_dims > 0 is not supported by graphc; "
                                  "prepend the batch coordinates to the indices instead")
    with name_scope(name, "GatherNd", [params, indices]) as scope:
        params = convert_to_tensor(params, name="params")
        indices = convert_to_tensor(indices, name="indices")
        depth = _index_depth(indices, "gather_nd")
        if params.shape.ndims is not None and depth > params.shape.ndims:
            raise ValueError(f"gather_nd: index depth {depth} is larger than the rank of "
                             f"params {params.shape}")
        dims = array_ops.shape(params, out_type=indices.dtype)
        rows, n_rows = _rows(indices, dims, depth)
        inner = array_ops.slice(dims, [depth], [-1])
        flat = array_ops.reshape(params, array_ops.concat([array_ops.reshape(n_rows, [1]),
                                                           inner], 0))
        out = array_ops.gather(flat, rows, name=scope)
        if params.shape.ndims is not None:
            out.set_shape(indices.shape[:-1].concatenate(params.shape[depth:]))
        return out


def scatter_nd(indices, updates, shape, name=None):
    """Zeros of `shape` with updates[i...] added at indices[i...] (repeated indices add up),
    TF1's ScatterNd."""
    with name_scope(name, "ScatterNd", [indices, updates, shape]) as scope:
        indices = convert_to_tensor(indices, name="indices")
        updates = convert_to_tensor(updates, name="updates")
        depth = _index_depth(indices, "scatter_nd")
        shape = math_ops.cast(convert_to_tensor(shape, dtype_hint=indices.dtype),
                              indices.dtype)
        rows, n_rows = _rows(indices, shape, depth)
        inner = array_ops.slice(shape, [depth], [-1])
        n_updates = array_ops.reshape(array_ops.size(rows, out_type=indices.dtype), [1])
        values = array_ops.reshape(updates, array_ops.concat([n_updates, inner], 0))
        flat = array_ops.scatter_rows(values, array_ops.reshape(rows, [-1]),
                                      array_ops.concat([array_ops.reshape(n_rows, [1]),
                                                        inner], 0))
        out = array_ops.reshape(flat, shape, name=scope)
        return out


def boolean_mask(tensor, mask, name="boolean_mask", axis=None):
    """The slices of tensor where the K-D mask is true, mask covering dims axis..axis+K-1
    (TF1's boolean_mask): those K dims become one of the count of true entries."""
    with name_scope(name, values=[tensor, mask]):
        tensor = convert_to_tensor(tensor, name="tensor")
        mask = convert_to_tensor(mask, name="mask")
        if mask.dtype != dtypes.bool:
            raise TypeError(f"boolean_mask: mask must be bool, got {mask.dtype.name}")
        k = mask.shape.ndims
        if k is None:
            raise ValueError("Number of mask dimensions must be specified, even if some "
                             "dimensions are None.  E.g. shape=[None] is ok, but shape=None "
                             "is not.")
        if k == 0:
            raise ValueError("mask cannot be scalar.")
        axis = 0 if axis is None else int(axis)
        rank = tensor.shape.ndims
        if rank is not None:
            axis = axis + rank if axis < 0 else axis
            tensor.shape[axis:axis + k].assert_is_compatible_with(mask.shape)
        dims = array_ops.shape(tensor)
        masked = reduction_ops.reduce_prod(array_ops.slice(dims, [axis], [k]), keepdims=True)
        flat = array_ops.reshape(tensor, array_ops.concat(
            [array_ops.slice(dims, [0], [axis]), masked,
             array_ops.slice(dims, [axis + k], [-1])], 0))
        where = math_ops.where(array_ops.reshape(mask, [-1]))
        out = array_ops.gather(flat, array_ops.reshape(where, [-1]), axis=axis)
        if rank is not None:
            out.set_shape(tensor.shape[:axis].concatenate([None])
                          .concatenate(tensor.shape[axis + k:]))
        return out
