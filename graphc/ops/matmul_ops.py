"""Matrix products: MatMul (rank 2) and BatchMatMulV2 (rank >= 2, batch dims broadcast).

gc.matmul picks the op as TF1 does: both operands of known rank 2 -> MatMul; a larger or
unknown rank -> BatchMatMulV2. For real numbers adjoint is transpose, so both ops share
one kernel and one table of gradient recipes (TF's MatMulGrad / BatchMatMulV2Grad).
"""
import numpy as np

from graphc import dtypes, errors
from graphc.framework.graph import Tensor, name_scope
from graphc.framework.op_def import register_op
from graphc.framework.tensor_shape import TensorShape, broadcast_shapes
from graphc.ops.broadcast_grad import unbroadcast
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["matmul"]

_MATMUL_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)

# Attr names of the two "transpose this operand" flags, per op type.
_FLAGS = {"MatMul": ("transpose_a", "transpose_b"), "BatchMatMulV2": ("adj_x", "adj_y")}


# ---------------------------------------------------------------------- shape inference
def _check_dtypes(op_type, a, b):
    if a.dtype not in _MATMUL_DTYPES:
        raise TypeError(f"{op_type} does not support dtype {a.dtype.name}")
    if b.dtype != a.dtype:
        raise TypeError(f"Input 'b' of '{op_type}' Op has type {b.dtype.name} that does not "
                        f"match type {a.dtype.name} of argument 'a'.")


def _matrix_dims(shape, transposed):
    """(rows, cols) of the last two dims after the optional transpose."""
    rows, cols = shape[-2].value, shape[-1].value
    return (cols, rows) if transposed else (rows, cols)


def _product_dims(sa, sb, ta, tb):
    m, k_a = _matrix_dims(sa, ta)
    k_b, n = _matrix_dims(sb, tb)
    if k_a is not None and k_b is not None and k_a != k_b:
        raise ValueError(f"Dimensions must be equal, but are {k_a} and {k_b}")
    return [m, n]


def _matmul_infer(inputs, attrs):
    a, b = inputs
    _check_dtypes("MatMul", a, b)
    for t in (a, b):
        if t.shape.ndims is not None and t.shape.ndims != 2:
            raise ValueError(f"Shape must be rank 2 but is rank {t.shape.ndims}")
    sa, sb = a.shape.with_rank(2), b.shape.with_rank(2)
    return TensorShape(_product_dims(sa, sb, attrs["transpose_a"], attrs["transpose_b"])), a.dtype


def _batch_matmul_infer(inputs, attrs):
    a, b = inputs
    _check_dtypes("BatchMatMulV2", a, b)
    for t in (a, b):
        if t.shape.ndims is not None and t.shape.ndims < 2:
            raise ValueError(f"Shape must be at least rank 2 but is rank {t.shape.ndims}")
    sa, sb = a.shape, b.shape
    if sa.ndims is None or sb.ndims is None:
        return TensorShape(None), a.dtype
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    return batch.concatenate(_product_dims(sa, sb, attrs["adj_x"], attrs["adj_y"])), a.dtype


# ----------------------------------------------------------------------------- kernel
def _shape_str(shape):
    return "[" + ",".join(map(str, shape)) + "]"


def _matmul_array(a, b, ta, tb):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise errors.KernelError(f"Matrix size-incompatible: In[0]: {_shape_str(a.shape)}, "
                                 f"In[1]: {_shape_str(b.shape)}")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise errors.KernelError(f"Incompatible batch shapes: {_shape_str(a.shape)} vs. "
                                 f"{_shape_str(b.shape)}") from None
    if a.dtype == np.float16:  # accumulate half in float32, as TF's kernels do
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    return np.matmul(a, b)


# -------------------------------------------------------------------------- gradients
# For y = op(a, b) with transposes (ta, tb): each input's gradient is a product of two of
# {g, a, b} with its own transposes, as (lhs, rhs, transpose lhs, transpose rhs).
_GRAD_RECIPES = {
    (False, False): (("g", "b", False, True), ("a", "g", True, False)),
    (False, True): (("g", "b", False, False), ("g", "a", True, False)),
    (True, False): (("b", "g", False, True), ("a", "g", False, False)),
    (True, True): (("b", "g", True, True), ("g", "a", True, True)),
}


def _matmul_grad(op, grad):
    a, b = op.inputs
    flag_a, flag_b = _FLAGS[op.type]
    operands = {"g": grad, "a": a, "b": b}
    recipes = _GRAD_RECIPES[(op.attrs[flag_a], op.attrs[flag_b])]
    grads = []
    for (lhs, rhs, t_lhs, t_rhs), x in zip(recipes, (a, b)):
        g = a.graph.create_op(op.type, [operands[lhs], operands[rhs]],
                              {flag_a: t_lhs, flag_b: t_rhs}, op.type).outputs[0]
        # batch dims that x was broadcast along are summed out
        grads.append(unbroadcast(g, x) if op.type == "BatchMatMulV2" else g)
    return grads


register_op("MatMul", infer=_matmul_infer, grad=_matmul_grad, kind="gemm",
            kernel=lambda a, b, transpose_a, transpose_b: _matmul_array(a, b, transpose_a,
                                                                         transpose_b))
register_op("BatchMatMulV2", infer=_batch_matmul_infer, grad=_matmul_grad, kind="gemm",
            kernel=lambda a, b, adj_x, adj_y: _matmul_array(a, b, adj_x, adj_y))


# ----------------------------------------------------------------------------- public
def _convert_pair(a, b):
    """Python values take the dtype of the tensor operand, as for binary math ops."""
    if isinstance(b, Tensor) and not isinstance(a, Tensor):
        b = convert_to_tensor(b, name="b")
        return convert_to_tensor(a, name="a", dtype_hint=b.dtype), b
    a = convert_to_tensor(a, name="a")
    return a, convert_to_tensor(b, name="b", dtype_hint=a.dtype)


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, name=None):
    """a @ b over the last two dims. Rank 2: MatMul; rank >= 3 (or unknown): BatchMatMulV2
    with broadcast batch dims. adjoint is transpose for real dtypes; *_is_sparse are hints
    that graphc ignores."""
    if transpose_a and adjoint_a:
        raise ValueError("Only one of transpose_a and adjoint_a can be True.")
    if transpose_b and adjoint_b:
        raise ValueError("Only one of transpose_b and adjoint_b can be True.")
    ta, tb = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    with name_scope(name, "MatMul", [a, b]) as scope:
        a, b = _convert_pair(a, b)
        ranks = (a.shape.ndims, b.shape.ndims)
        if None in ranks or max(ranks) > 2:
            op_type, attrs = "BatchMatMulV2", {"adj_x": ta, "adj_y": tb}
        else:
            op_type, attrs = "MatMul", {"transpose_a": ta, "transpose_b": tb}
        return a.graph.create_op(op_type, [a, b], attrs, scope).outputs[0]
