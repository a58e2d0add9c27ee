"""Reductions (Sum, Mean, Max, Min, Prod, Any, All), ArgMax/ArgMin, Cumsum, with TF1 names.

A reduce op takes (x, axis) where axis is an int32/int64 tensor (scalar or vector, values
may be negative) and has the attr keep_dims. Gradients first restore the reduced axes as
size-1 dims ("kept dims" shape) and then broadcast back to x's shape, which works with
unknown dims and, through a small shape computation, with unknown axes or rank.
"""
import numpy as np

from graphc import dtypes, errors
from graphc.framework.graph import name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import constant, convert_to_tensor

__all__ = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
           "reduce_any", "reduce_all", "reduce_logsumexp", "argmax", "argmin", "arg_max",
           "arg_min", "cumsum", "count_nonzero"]

_INDEX_DTYPES = (dtypes.int32, dtypes.int64)


# ------------------------------------------------------------------------ axis handling
def _static_axis_error(a, rank):  # TF's shape-function wording
    return ValueError(f"Invalid reduction dimension {a} for input with {rank} dimensions.")


def _run_time_axis_error(a, rank):  # TF's kernel wording
    return errors.KernelError(f"Invalid reduction dimension ({a} for input with {rank} "
                              "dimension(s)")


def _normalize_axes(values, rank, axis_error=_static_axis_error):
    """Sorted, de-duplicated non-negative axes; raises axis_error(a, rank) when out of range."""
    axes = set()
    for a in np.reshape(values, [-1]).tolist():
        if not -rank <= a < rank:
            raise axis_error(a, rank)
        axes.add(a % rank)
    return sorted(axes)


def _check_index_tensor(t, what):
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{what} must be int32 or int64, got {t.dtype.name}")


def _reduced_shape(shape, axis_t, keep_dims):
    """Static output shape of reducing `shape` over the (maybe unknown) axis tensor."""
    _check_index_tensor(axis_t, "Reduction axis")
    if axis_t.shape.ndims is not None and axis_t.shape.ndims > 1:
        raise ValueError("Reduction axis must be a scalar or vector, got rank "
                         f"{axis_t.shape.ndims}")
    rank = shape.ndims
    values = constant_value(axis_t)
    if rank is None:
        return TensorShape(None)
    if values is None:
        return TensorShape([None] * rank) if keep_dims else TensorShape(None)
    axes = _normalize_axes(values, rank)
    if keep_dims:
        return TensorShape([1 if i in axes else d for i, d in enumerate(shape.dims)])
    return TensorShape([d for i, d in enumerate(shape.dims) if i not in axes])


def _kernel_axes(axis, ndim):
    return tuple(_normalize_axes(axis, ndim, _run_time_axis_error))


# --------------------------------------------------------------------------- kernels
def _accumulator(dtype):
    """Float16 accumulates in float32 (as TF does); other types in their own type (ints wrap)."""
    return np.float32 if dtype == np.float16 else dtype


def _sum(x, axes, keep):
    return np.sum(x, axis=axes, keepdims=keep, dtype=_accumulator(x.dtype))


def _mean(x, axes, keep):
    total = _sum(x, axes, keep)
    count = int(np.prod([x.shape[a] for a in axes]))
    if x.dtype.kind in "iu":  # TF divides integers with C++ semantics: truncation toward zero
        count = max(count, 1)  # an empty integer mean is 0 rather than a division by zero
        return np.where(total < 0, -((-total) // count), total // count)
    with np.errstate(invalid="ignore", divide="ignore"):  # empty float mean is NaN, as in TF
        return total / np.asarray(count, dtype=total.dtype)


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


# Max/Min of an empty set are the reduction's identity (-inf/+inf, or the integer limits).
_KERNELS = {
    "Sum": _sum,
    "Mean": _mean,
    "Prod": lambda x, axes, keep: np.prod(x, axis=axes, keepdims=keep, dtype=_accumulator(x.dtype)),
    "Max": lambda x, axes, keep: np.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype)),
    "Min": lambda x, axes, keep: np.min(x, axis=axes, keepdims=keep, initial=_highest(x.dtype)),
    "Any": lambda x, axes, keep: np.any(x, axis=axes, keepdims=keep),
    "All": lambda x, axes, keep: np.all(x, axis=axes, keepdims=keep),
}


def _reduce_kernel(op_type):
    fn = _KERNELS[op_type]

    def kernel(x, axis, keep_dims):
        return fn(x, _kernel_axes(axis, x.ndim), keep_dims)
    return kernel


def _reduce_infer(wants_bool):
    def infer(inputs, attrs):
        x, axis_t = inputs
        if wants_bool != x.dtype.is_bool or x.dtype == dtypes.string:
            kind = "bool" if wants_bool else "numeric"
            raise TypeError(f"Reduction expects a {kind} tensor, got {x.dtype.name}")
        return _reduced_shape(x.shape, axis_t, attrs["keep_dims"]), x.dtype
    return infer


# ------------------------------------------------------------------------- gradients
def _shape_tensor(x):
    """x's shape as an int32 tensor: a constant when fully known, else Shape(x)."""
    if x.shape.is_fully_defined():
        return constant(np.array(x.shape.as_list(), dtype=np.int32))
    return array_ops.shape(x)


def _dynamic_kept_shape(x, axis_t):
    """shape(x) with 1 in the reduced axes, computed at run time (axes or rank unknown)."""
    shape_x = array_ops.shape(x)
    rank_x = array_ops.rank(x)
    axes = math_ops.floormod(math_ops.cast(axis_t, dtypes.int32), rank_x)
    hits = math_ops.equal(array_ops.expand_dims(array_ops.range(rank_x), 1),
                          array_ops.reshape(axes, [1, -1]))
    is_reduced = reduce_any(hits, axis=1)
    return math_ops.where(is_reduced, array_ops.ones_like(shape_x), shape_x)


def _with_kept_dims(t, x, axis_t, keep_dims):
    """`t`, a reduction of x over axis_t, reshaped so the reduced axes are size-1 dims."""
    if keep_dims:
        return t
    rank, values = x.shape.ndims, constant_value(axis_t)
    if rank is None or values is None:
        return array_ops.reshape(t, _dynamic_kept_shape(x, axis_t))
    axes = _normalize_axes(values, rank)
    if x.shape.is_fully_defined():
        kept = [1 if i in axes else d for i, d in enumerate(x.shape.as_list())]
        return array_ops.reshape(t, constant(np.array(kept, dtype=np.int32)))
    for a in axes:  # ascending, so each axis index refers to the final layout
        t = array_ops.expand_dims(t, a)
    return t


def _broadcast_back(grad, op):
    x, axis_t = op.inputs
    kept = _with_kept_dims(grad, x, axis_t, op.attrs["keep_dims"])
    return array_ops.broadcast_to(kept, _shape_tensor(x))


def _sum_grad(op, grad):
    return [_broadcast_back(grad, op), None]


def _mean_grad(op, grad):
    x, y = op.inputs[0], op.outputs[0]
    sum_grad = _broadcast_back(grad, op)
    if x.shape.is_fully_defined() and y.shape.is_fully_defined():
        count = max(x.shape.num_elements() // max(y.shape.num_elements(), 1), 1)
        factor = constant(count, dtype=x.dtype)
    else:
        size_x = reduce_prod(array_ops.shape(x))
        size_y = math_ops.maximum(reduce_prod(array_ops.shape(y)), 1)
        factor = math_ops.cast(math_ops.maximum(math_ops.floordiv(size_x, size_y), 1), x.dtype)
    return [math_ops.truediv(sum_grad, factor), None]


def _min_or_max_grad(op, grad):
    """The gradient goes to the elements equal to the result, split equally among ties."""
    x, axis_t = op.inputs
    keep = op.attrs["keep_dims"]
    y = _with_kept_dims(op.outputs[0], x, axis_t, keep)
    grad = _with_kept_dims(grad, x, axis_t, keep)
    indicators = math_ops.cast(math_ops.equal(x, y), x.dtype)
    count = reduce_sum(indicators, axis_t, keepdims=True)
    return [math_ops.multiply(math_ops.truediv(indicators, count), grad), None]


def _prod_grad(op, grad):
    """d prod / d x_i = product of the other elements, computed without dividing by zero:
    with no zero in the group it is prod(x) / x_i; with exactly one zero, the zero's entry
    is the product of the non-zero elements and the others get 0; with more zeros, all 0."""
    x, axis_t = op.inputs
    grad = _with_kept_dims(grad, x, axis_t, op.attrs["keep_dims"])
    is_zero = math_ops.cast(math_ops.equal(x, constant(0, dtype=x.dtype)), x.dtype)
    nonzero_x = math_ops.add(x, is_zero)  # zeros replaced by ones
    prod_nonzero = reduce_prod(nonzero_x, axis_t, keepdims=True)
    zero_count = reduce_sum(is_zero, axis_t, keepdims=True)

    def count_is(n):
        return math_ops.cast(math_ops.equal(zero_count, constant(n, dtype=x.dtype)), x.dtype)

    one = constant(1, dtype=x.dtype)
    others = math_ops.add(
        math_ops.multiply(is_zero, math_ops.multiply(prod_nonzero, count_is(1))),
        math_ops.multiply(math_ops.subtract(one, is_zero),
                          math_ops.multiply(math_ops.truediv(prod_nonzero, nonzero_x),
                                            count_is(0))))
    return [math_ops.multiply(others, grad), None]


_GRADS = {"Sum": _sum_grad, "Mean": _mean_grad, "Max": _min_or_max_grad,
          "Min": _min_or_max_grad, "Prod": _prod_grad}

for _type in _KERNELS:
    register_op(_type, infer=_reduce_infer(_type in ("Any", "All")),
                kernel=_reduce_kernel(_type), grad=_GRADS.get(_type), kind="reduction")
not_differentiable("Any", "All")


# ----------------------------------------------------------------- public reductions
def _pick(new, old, new_name, old_name):
    """TF1's deprecated-argument rule: at most one of the two spellings."""
    if new is not None and old is not None:
        raise ValueError(f"Cannot specify both '{new_name}' and '{old_name}'.")
    return new if new is not None else old


def _axis_tensor(x, axis):
    """The axis argument as an index tensor; None means all axes (range(rank(x)) if unknown)."""
    if axis is None:
        if x.shape.ndims is not None:
            return constant(np.arange(x.shape.ndims, dtype=np.int32))
        return array_ops.range(0, array_ops.rank(x))
    return convert_to_tensor(axis, dtype_hint=dtypes.int32)


def _reduce(op_type, input_tensor, axis, keepdims, name, reduction_indices, keep_dims):
    axis = _pick(axis, reduction_indices, "axis", "reduction_indices")
    keepdims = bool(_pick(keepdims, keep_dims, "keepdims", "keep_dims"))
    x = convert_to_tensor(input_tensor)
    axis_t = _axis_tensor(x, axis)
    return x.graph.create_op(op_type, [x, axis_t], {"keep_dims": keepdims},
                             name or op_type).outputs[0]


def _make_reduction(op_type, tf_name, what):
    def reduction(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
                  keep_dims=None):
        return _reduce(op_type, input_tensor, axis, keepdims, name, reduction_indices, keep_dims)
    reduction.__name__ = reduction.__qualname__ = tf_name
    reduction.__doc__ = (f"Computes the {what} of elements across dimensions of a tensor "
                         "(axis None: all; negative axes count from the end).")
    return reduction


reduce_sum = _make_reduction("Sum", "reduce_sum", "sum")
reduce_mean = _make_reduction("Mean", "reduce_mean", "mean (integer division for ints)")
reduce_max = _make_reduction("Max", "reduce_max", "maximum")
reduce_min = _make_reduction("Min", "reduce_min", "minimum")
reduce_prod = _make_reduction("Prod", "reduce_prod", "product")
reduce_any = _make_reduction("Any", "reduce_any", "logical or")
reduce_all = _make_reduction("All", "reduce_all", "logical and")


def reduce_logsumexp(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
                     keep_dims=None):
    """log(sum(exp(x))) over axis, stable: the max is subtracted first (and held constant
    for the gradient, which is then the softmax of x). An infinite max is replaced by 0 so
    that all -inf inputs give -inf and a +inf input gives +inf, not NaN."""
    axis = _pick(axis, reduction_indices, "axis", "reduction_indices")
    keepdims = bool(_pick(keepdims, keep_dims, "keepdims", "keep_dims"))
    with name_scope(name, "ReduceLogSumExp", [input_tensor]) as scope:
        x = convert_to_tensor(input_tensor)
        axis_t = _axis_tensor(x, axis)
        raw_max = reduce_max(x, axis_t, keepdims=True)
        is_finite = math_ops.equal(math_ops.subtract(raw_max, raw_max),
                                   constant(0, dtype=x.dtype))
        shift = array_ops.stop_gradient(
            math_ops.where(is_finite, raw_max, array_ops.zeros_like(raw_max)))
        total = reduce_sum(math_ops.exp(math_ops.subtract(x, shift)), axis_t, keepdims=keepdims)
        if not keepdims:  # summing the size-1 reduced dims squeezes them, for any axis form
            shift = reduce_sum(shift, axis_t)
        return math_ops.add(math_ops.log(total), shift, name=scope)


def count_nonzero(input_tensor, axis=None, keepdims=None, dtype=dtypes.int64, name=None,
                  reduction_indices=None, keep_dims=None):
    axis = _pick(axis, reduction_indices, "axis", "reduction_indices")
    keepdims = bool(_pick(keepdims, keep_dims, "keepdims", "keep_dims"))
    with name_scope(name, "count_nonzero", [input_tensor]):
        x = convert_to_tensor(input_tensor)
        zero = constant(False if x.dtype.is_bool else 0, dtype=x.dtype)
        nonzero = math_ops.cast(math_ops.not_equal(x, zero), dtypes.int64)
        return math_ops.cast(reduce_sum(nonzero, axis, keepdims=keepdims), dtype)


# ------------------------------------------------------------------------ ArgMax/ArgMin
def _check_axis(axis, rank, error):
    """One axis in [-rank, rank), as TF's error wording; returns it non-negative."""
    a = int(np.reshape(axis, [-1])[0]) if np.size(axis) == 1 else None
    if a is None or not -rank <= a < rank:
        raise error(f"Expected dimension in the range [{-rank}, {rank}), but got "
                    f"{np.asarray(axis).tolist()}")
    return a % rank


def _single_axis_infer(inputs, what):
    x, axis_t = inputs
    _check_index_tensor(axis_t, f"{what} axis")
    if axis_t.shape.ndims not in (None, 0) and axis_t.shape.num_elements() != 1:
        raise ValueError(f"{what} axis must be a scalar, got shape {axis_t.shape}")
    if x.dtype.is_bool or x.dtype == dtypes.string:
        raise TypeError(f"{what} expects a numeric tensor, got {x.dtype.name}")
    if x.shape.ndims == 0:
        raise ValueError(f"{what} expects a tensor of rank >= 1, got a scalar")
    value = constant_value(axis_t)
    if x.shape.ndims is None or value is None:
        return None
    return _check_axis(value, x.shape.ndims, ValueError)


def _arg_infer(inputs, attrs):
    x = inputs[0]
    if attrs["output_type"] not in _INDEX_DTYPES:
        raise TypeError(f"output_type must be int32 or int64, got {attrs['output_type'].name}")
    axis = _single_axis_infer(inputs, "ArgMax/ArgMin")
    if x.shape.ndims is None:
        return TensorShape(None), attrs["output_type"]
    if axis is None:
        return TensorShape([None] * (x.shape.ndims - 1)), attrs["output_type"]
    return TensorShape(x.shape.dims[:axis] + x.shape.dims[axis + 1:]), attrs["output_type"]


def _arg_kernel(numpy_fn):
    # NumPy's argmax/argmin return the first NaN along the axis (NaN wins), ties the first.
    def kernel(x, axis, output_type):
        a = _check_axis(axis, x.ndim, errors.KernelError)
        if x.shape[a] == 0:
            raise errors.KernelError(f"Reduction axis {a} is empty in shape "
                                     f"[{','.join(map(str, x.shape))}]")
        return numpy_fn(x, axis=a)
    return kernel


register_op("ArgMax", infer=_arg_infer, kernel=_arg_kernel(np.argmax), kind="reduction")
register_op("ArgMin", infer=_arg_infer, kernel=_arg_kernel(np.argmin), kind="reduction")
not_differentiable("ArgMax", "ArgMin")


def _arg(op_type, input, axis, name, dimension, output_type):
    axis = _pick(axis, dimension, "axis", "dimension")
    x = convert_to_tensor(input)
    axis_t = convert_to_tensor(0 if axis is None else axis, dtype_hint=dtypes.int32)
    return x.graph.create_op(op_type, [x, axis_t], {"output_type": dtypes.as_dtype(output_type)},
                             name or op_type).outputs[0]


def argmax(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):
    """Index of the largest value along axis (default 0). Ties: the first index. NaN: the
    index of the first NaN (NaN counts as the largest), as NumPy."""
    return _arg("ArgMax", input, axis, name, dimension, output_type)


def argmin(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):
    """Index of the smallest value along axis (default 0). Ties: the first index. NaN: the
    index of the first NaN (NaN counts as the smallest), as NumPy."""
    return _arg("ArgMin", input, axis, name, dimension, output_type)


def arg_max(input, dimension, name=None, output_type=dtypes.int64):
    return argmax(input, dimension, name, output_type=output_type)


def arg_min(input, dimension, name=None, output_type=dtypes.int64):
    return argmin(input, dimension, name, output_type=output_type)


# ----------------------------------------------------------------------------- Cumsum
def _cumsum_infer(inputs, attrs):
    # as TF, the axis value is checked only when the op runs
    x, axis_t = inputs
    _check_index_tensor(axis_t, "Cumsum axis")
    if x.dtype.is_bool or x.dtype == dtypes.string:
        raise TypeError(f"Cumsum expects a numeric tensor, got {x.dtype.name}")
    return x.shape, x.dtype


def _cumsum_kernel(x, axis, exclusive, reverse):
    if np.ndim(axis) != 0:
        raise errors.KernelError(f"ScanOp: axis must be a scalar, not {list(np.shape(axis))}")
    if not -x.ndim <= axis < x.ndim:
        raise errors.KernelError(f"ScanOp: Expected scan axis in the range [{-x.ndim}, "
                                 f"{x.ndim}), but got {int(axis)}")
    a = int(axis) % x.ndim
    if reverse:
        x = np.flip(x, a)
    out = np.cumsum(x, axis=a, dtype=_accumulator(x.dtype))
    if exclusive and x.shape[a]:  # shift by one along the axis: element i sums x[:i]
        out = np.moveaxis(out, a, 0)
        out = np.moveaxis(np.concatenate([np.zeros_like(out[:1]), out[:-1]]), 0, a)
    return np.flip(out, a) if reverse else out


def _cumsum_grad(op, grad):
    # each x_j feeds the outputs after it (before it when reversed): a cumsum the other way
    return [cumsum(grad, op.inputs[1], exclusive=op.attrs["exclusive"],
                   reverse=not op.attrs["reverse"]), None]


register_op("Cumsum", infer=_cumsum_infer, kernel=_cumsum_kernel, grad=_cumsum_grad,
            kind="opaque")


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    x = convert_to_tensor(x)
    axis_t = convert_to_tensor(axis, dtype_hint=dtypes.int32)
    return x.graph.create_op("Cumsum", [x, axis_t],
                             {"exclusive": bool(exclusive), "reverse": bool(reverse)},
                             name or "Cumsum").outputs[0]
