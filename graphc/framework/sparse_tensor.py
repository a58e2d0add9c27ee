"""tf.SparseTensor: (indices, values, dense_shape) tensors, as TF1's; Session.run fetches it
as a SparseTensorValue of the three arrays."""
import collections

import numpy as np

SparseTensorValue = collections.namedtuple("SparseTensorValue",
                                           ["indices", "values", "dense_shape"])


class SparseTensor(collections.namedtuple("SparseTensor", ["indices", "values", "dense_shape"])):
    """indices: int64 [N, rank], values: [N], dense_shape: int64 [rank]. Built by the ops
    that give sparse results (string_split, parse_example's VarLenFeature) or from values."""

    def __new__(cls, indices, values, dense_shape):
        from graphc.ops.constant_ops import convert_to_tensor
        from graphc import dtypes
        return super().__new__(cls, convert_to_tensor(indices, dtype=dtypes.int64),
                               convert_to_tensor(values),
                               convert_to_tensor(dense_shape, dtype=dtypes.int64))

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def graph(self):
        return self.values.graph

    @property
    def op(self):
        return self.values.op

    def get_shape(self):
        from graphc.framework.static_value import constant_value
        from graphc.framework.tensor_shape import TensorShape
        dims = constant_value(self.dense_shape)
        if dims is not None:
            return TensorShape([int(d) for d in np.reshape(dims, -1)])
        rank = self.dense_shape.shape.as_list()[0] if self.dense_shape.shape.ndims else None
        return TensorShape(None if rank is None else [None] * rank)

    @property
    def shape(self):
        return self.get_shape()
