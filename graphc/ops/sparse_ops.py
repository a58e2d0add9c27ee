"""SparseTensor -> dense: sparse_tensor_to_dense (tf.sparse.to_dense) and sparse_to_dense, as
TF1's SparseToDense: every index not listed holds default_value; indices must lie inside
the shape and, with validate_indices, be sorted in row-major order without repeats.

A host op: it scatters values to data-dependent places, which no loop template lowers,
and its values are often strings (string_split's tokens)."""
import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import name_scope
from graphc.framework.op_def import register_op
from graphc.framework.sparse_tensor import SparseTensor
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["sparse_tensor_to_dense", "sparse_to_dense"]


def _infer(inputs, a):
    indices, shape, values, default = inputs
    if not indices.dtype.is_integer or not shape.dtype.is_integer:
        raise TypeError("SparseToDense: sparse_indices and output_shape must be integers")
    if values.dtype != default.dtype:
        raise TypeError(f"SparseToDense: default_value is {default.dtype.name}, the values "
                        f"are {values.dtype.name}")
    if default.shape.ndims not in (None, 0):
        raise ValueError(f"SparseToDense: default_value must be a scalar, got shape "
                         f"{default.shape}")
    dims = constant_value(shape)
    if dims is not None:
        return TensorShape([int(d) for d in np.reshape(dims, -1)]), values.dtype
    rank = shape.shape.as_list()[0] if shape.shape.ndims == 1 else None
    return TensorShape(None if rank is None else [None] * rank), values.dtype


def _kernel(indices, shape, values, default, validate_indices=True):
    shape = tuple(int(d) for d in np.reshape(shape, -1))
    indices = np.asarray(indices)
    if indices.ndim < 2:  # [N] indices of a vector, or one index
        indices = indices.reshape(-1, len(shape))
    n = indices.shape[0]
    values = np.broadcast_to(values, (n,)) if values.ndim == 0 else values
    if values.shape != (n,):
        raise KernelError(f"sparse_values has incorrect shape {list(values.shape)}, should "
                          f"be [] or [{n}]")
    if n and ((indices < 0).any() or (indices >= np.array(shape)).any()):
        bad = int(np.nonzero(((indices < 0) | (indices >= np.array(shape))).any(1))[0][0])
        raise KernelError(f"indices[{bad}] = {indices[bad].tolist()} is out of bounds: need "
                          f"0 <= index < {list(shape)}")
    if validate_indices and n > 1:
        flat = np.ravel_multi_index(indices.T, shape) if shape else np.zeros(n, np.int64)
        if (np.diff(flat) <= 0).any():
            bad = int(np.nonzero(np.diff(flat) <= 0)[0][0]) + 1
            kind = "repeated" if flat[bad] == flat[bad - 1] else "out of order"
            raise KernelError(f"indices[{bad}] = {indices[bad].tolist()} is {kind}. Many "
                              "sparse ops require sorted indices.")
    out = np.full(shape, default[()], values.dtype)
    if n:
        out[tuple(indices.T)] = values
    return out


def _grad(op, grad):
    from graphc.ops.nd_index_ops import gather_nd
    indices = op.inputs[0]
    values = op.inputs[2]
    g_values = gather_nd(grad, indices) if values.shape.ndims != 0 else None
    return [None, None, g_values, None]


register_op("SparseToDense", infer=_infer, kernel=_kernel, grad=_grad, kind="opaque",
            host_only=True)


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0,
                    validate_indices=True, name=None):
    """A dense tensor of output_shape holding sparse_values at sparse_indices ([N, rank],
    or [N] for rank 1) and default_value elsewhere."""
    with name_scope(name, "SparseToDense", [sparse_indices, sparse_values]) as scope:
        values = convert_to_tensor(sparse_values, name="sparse_values")
        indices = convert_to_tensor(sparse_indices, name="sparse_indices")
        shape = convert_to_tensor(output_shape, name="output_shape")
        default = convert_to_tensor(default_value, dtype=values.dtype, name="default_value")
        return values.graph.create_op("SparseToDense", [indices, shape, values, default],
                                      {"validate_indices": bool(validate_indices)},
                                      scope).outputs[0]


def sparse_tensor_to_dense(sp_input, default_value=None, validate_indices=True, name=None):
    """The dense form of a SparseTensor; missing entries hold default_value (zero, or b''
    for strings)."""
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"Input must be a SparseTensor, got {type(sp_input).__name__}")
    if default_value is None:
        default_value = b"" if sp_input.dtype == dtypes.string else 0
    with name_scope(name, "SparseToDense", [sp_input.values]):
        return sparse_to_dense(sp_input.indices, sp_input.dense_shape, sp_input.values,
                               default_value, validate_indices)
