"""tf.sparse: the SparseTensor class and its dense form (graphc/ops/sparse_ops.py)."""
from graphc.framework.sparse_tensor import SparseTensor, SparseTensorValue  # noqa: F401
from graphc.ops.sparse_ops import sparse_tensor_to_dense as to_dense  # noqa: F401
