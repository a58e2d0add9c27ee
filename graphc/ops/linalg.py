"""tf.linalg: the names of TF1's tf.linalg namespace that graphc has."""
from graphc.ops.einsum_ops import einsum  # noqa: F401
from graphc.ops.mask_ops import diag_part as tensor_diag_part  # noqa: F401
from graphc.ops.mask_ops import diag as tensor_diag  # noqa: F401
from graphc.ops.mask_ops import matrix_band_part as band_part  # noqa: F401
from graphc.ops.matmul_ops import matmul  # noqa: F401
from graphc.ops.norm_ops import norm  # noqa: F401
from graphc.ops.linear_operator import LinearOperatorLowerTriangular  # noqa: F401
