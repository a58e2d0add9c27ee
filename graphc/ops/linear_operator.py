"""tf.linalg.LinearOperatorLowerTriangular: a (batch of) square matrix given by the lower
triangle of `tril`; the entries above the diagonal are ignored (treated as zeros), as in
TF1. graphc has this one operator: the one TF1 scripts build attention masks with."""
from graphc.framework.graph import name_scope
from graphc.ops import math_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.mask_ops import matrix_band_part
from graphc.ops.matmul_ops import matmul

__all__ = ["LinearOperatorLowerTriangular"]


class LinearOperatorLowerTriangular:
    def __init__(self, tril, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None,
                 name="LinearOperatorLowerTriangular"):
        if is_square is False:
            raise ValueError("Only square lower triangular operators supported.")
        with name_scope(name, values=[tril]):
            self._tril = convert_to_tensor(tril, name="tril")
        shape = self._tril.shape
        if shape.ndims is not None and shape.ndims < 2:
            raise ValueError(f"LinearOperatorLowerTriangular: tril must have rank >= 2 (a "
                             f"batch of square matrices), got shape {shape}")
        if shape.ndims is not None and None not in (shape[-1].value, shape[-2].value) and \
                shape[-1].value != shape[-2].value:
            raise ValueError(f"LinearOperatorLowerTriangular: tril must be square, got shape "
                             f"{shape}")
        self._name = name
        self.is_non_singular, self.is_self_adjoint = is_non_singular, is_self_adjoint
        self.is_positive_definite = is_positive_definite

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._tril.dtype)
    shape = property(lambda self: self._tril.shape)
    batch_shape = property(lambda self: self._tril.shape[:-2])
    is_square = property(lambda self: True)

    def to_dense(self, name="to_dense"):
        """The matrix: tril with the entries above the diagonal set to zero."""
        with name_scope(self._name + "/", values=[self._tril]):
            return matrix_band_part(self._tril, -1, 0, name=name)

    def diag_part(self, name="diag_part"):
        with name_scope(self._name + "/", values=[self._tril]):
            return reduction_ops.reduce_sum(matrix_band_part(self._tril, 0, 0), -1, name=name)

    def matmul(self, x, adjoint=False, adjoint_arg=False, name="matmul"):
        with name_scope(self._name + "/", values=[self._tril, x]):
            return matmul(self.to_dense(), x, transpose_a=adjoint, transpose_b=adjoint_arg,
                          name=name)

    def determinant(self, name="det"):
        """The product of the diagonal (the matrix is triangular)."""
        with name_scope(self._name + "/", values=[self._tril]):
            return reduction_ops.reduce_prod(self.diag_part(), -1, name=name)

    def log_abs_determinant(self, name="log_abs_det"):
        with name_scope(self._name + "/", values=[self._tril]):
            return reduction_ops.reduce_sum(math_ops.log(math_ops.abs(self.diag_part())), -1,
                                            name=name)
