"""Array ops: shapes, reshaping, joining and splitting, slicing, gathering, padding, filling.

Shape-like arguments (reshape's shape, fill's dims, tile's multiples, slice bounds, axes
that TF takes as tensors) are int tensor inputs; their static values, when known at
graph-build time, drive shape inference. Kernels check every index against its range and
raise KernelError (InvalidArgumentError at run time): NumPy's negative-index wraparound or
silent clamping would be a wrong answer, not TF's.
"""
import builtins
import math

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import Tensor, name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.slicing import dense_spec
from graphc.framework.static_value import _scalar_or_none, constant_value
from graphc.framework.symbolic import SymDim, concrete, slice_size
from graphc.framework.tensor_shape import Dimension, TensorShape, broadcast_shapes
from graphc.ops.broadcast_grad import unbroadcast
from graphc.ops.constant_ops import constant, convert_to_tensor

__all__ = [
    "newaxis", "reshape", "transpose", "expand_dims", "squeeze", "concat", "stack", "unstack",
    "split", "slice", "strided_slice", "gather", "one_hot", "tile", "pad", "shape", "shape_n",
    "size", "rank", "broadcast_to", "stop_gradient", "fill", "zeros", "ones", "zeros_like",
    "ones_like", "range", "invert_permutation", "unique", "reverse", "reverse_v2",
]

newaxis = None


# ------------------------------------------------------------------------- helpers
def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs, name or op_type)


def _dims_str(dims):
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _int_tensor(value, dtype_hint=dtypes.int32):
    """A shape-like argument (list, TensorShape, tensor) as an integer tensor."""
    if isinstance(value, TensorShape):
        value = value.as_list()
    if isinstance(value, (list, tuple)):
        value = [d.value if isinstance(d, Dimension) else d for d in value]
    return convert_to_tensor(value, dtype_hint=dtype_hint)


def _check_int(t, what):
    if not t.dtype.is_integer:
        raise TypeError(f"{what} must be an int32 or int64 tensor, got {t.dtype.name}")


def _check_rank(t, ranks, what):
    r = t.shape.ndims
    if r is not None and r not in ranks:
        raise ValueError(f"{what} must be rank {' or '.join(map(str, ranks))} but is rank {r}")


def known_values(t):
    """The elements of a 0-D/1-D int tensor as a list of int-or-None (None: unknown at
    graph-build time), or None when even its length is unknown. Unlike
    shape_from_tensor it keeps -1 (reshape's "infer this dim")."""
    v = constant_value(t)
    if v is not None:
        return [d if isinstance(d, SymDim) else int(d) for d in np.reshape(v, [-1])]
    op = t.op
    if op.type == "Pack" and op.attrs.get("axis", 0) == 0:
        return [_scalar_or_none(x) for x in op.inputs]
    if op.type == "Shape":
        s = op.inputs[0].shape
        return None if s.ndims is None else s.as_list()
    if op.type == "ConcatV2" and constant_value(op.inputs[-1]) is not None:
        parts = [known_values(x) for x in op.inputs[:-1]]
        if all(p is not None for p in parts):
            return [d for p in parts for d in p]
    if op.type in ("StridedSlice", "Slice", "GatherV2") and op.inputs[0].shape.ndims == 1:
        # picking elements of a partly known shape vector, e.g. shape(x)[1:]
        src = known_values(op.inputs[0])
        rest = [constant_value(x) for x in op.inputs[1:]]
        if src is not None and all(r is not None for r in rest):
            try:
                v = op.op_def.kernel(np.array(src, dtype=object), *rest, **op.attrs)
            except KernelError:
                v = None  # the op's own inference reported the bad index
            if v is not None:
                return [None if d is None else int(d) for d in np.reshape(v, [-1])]
    if t.shape.ndims == 0:
        return [None]
    if t.shape.ndims == 1 and t.shape[0].value is not None:
        return [None] * t.shape[0].value
    return None


def _static_int(t):
    """The value of a scalar (or 1-element) int tensor known at build time, else None."""
    v = constant_value(t)
    return None if v is None or np.size(v) != 1 else int(np.reshape(v, [-1])[0])


def _normalize_axis(axis, rank, what="axis"):
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for a tensor of rank {rank}; "
                         f"expected in [{-rank}, {rank})")
    return axis % rank


def _kernel_axis(axis, rank, what="axis"):
    axis = int(np.reshape(axis, [-1])[0])
    if not -rank <= axis < rank:
        raise KernelError(f"Expected {what} in the range [{-rank}, {rank}), but got {axis}")
    return axis % rank


def _dims(values):
    return [int(d) for d in np.reshape(values, [-1])]


def _raise(cls):
    """An error(message) callback: shared checks raise ValueError while building the graph
    and KernelError while running it."""
    def error(message):
        raise cls(message)
    return error


def _math():
    from graphc.ops import math_ops  # math_ops imports this module
    return math_ops


# ---------------------------------------------------------------- Shape, Size, Rank
def _shape_infer(inputs, a):
    return TensorShape([inputs[0].shape.ndims]), a["out_type"]


def _shape_n_infer(inputs, a):
    return [(TensorShape([t.shape.ndims]), a["out_type"]) for t in inputs]


def _shape_value(x, out_type):
    """x's dims as an `out_type` array; TF's error when one does not fit (an int32 shape
    of a dim past 2**31), never NumPy's wraparound or OverflowError."""
    limit = np.iinfo(out_type.np).max
    for i, d in enumerate(x.shape):
        if d > limit:
            raise KernelError(f"Shape output type is {out_type.size * 8}-bit but dim {i} "
                              f"is {d}")
    return np.array(x.shape, dtype=out_type.np)


def _size_value(x, out_type):
    if x.size > np.iinfo(out_type.np).max:
        raise KernelError(f"Number of elements was larger than representable by "
                          f"{out_type.size * 8}-bit output type")
    return np.array(x.size, dtype=out_type.np)


register_op("Shape", infer=_shape_infer, kernel=_shape_value, kind="index", dims_only_inputs="all")
register_op("ShapeN", infer=_shape_n_infer,
            kernel=lambda *xs, out_type: tuple(_shape_value(x, out_type) for x in xs),
            kind="index", dims_only_inputs="all")
register_op("Size", infer=lambda inputs, a: (TensorShape([]), a["out_type"]),
            kernel=_size_value, kind="index", dims_only_inputs="all")
register_op("Rank", infer=lambda inputs, a: (TensorShape([]), dtypes.int32),
            kernel=lambda x: np.array(x.ndim, dtype=np.int32), kind="index", dims_only_inputs="all")
not_differentiable("Shape", "ShapeN", "Size", "Rank")


def shape(input, name=None, out_type=dtypes.int32):
    x = convert_to_tensor(input)
    return _create("Shape", [x], {"out_type": dtypes.as_dtype(out_type)}, name).outputs[0]


def shape_n(input, out_type=dtypes.int32, name=None):
    xs = [convert_to_tensor(x) for x in input]
    return list(_create("ShapeN", xs, {"out_type": dtypes.as_dtype(out_type)}, name).outputs)


def size(input, name=None, out_type=dtypes.int32):
    x = convert_to_tensor(input)
    return _create("Size", [x], {"out_type": dtypes.as_dtype(out_type)}, name).outputs[0]


def rank(input, name=None):
    x = convert_to_tensor(input)
    return _create("Rank", [x], name=name).outputs[0]


# -------------------------------------------------------------------------- Reshape
def _reshape_infer(inputs, a):
    x, shape_t = inputs
    _check_int(shape_t, "shape")
    _check_rank(shape_t, (1,), "Shape")
    dims = known_values(shape_t)
    if dims is None:
        return TensorShape(None), x.dtype
    for d in dims:
        if d is not None and d < -1:
            raise ValueError(f"Size must be non-negative or -1, not {d}")
    if dims.count(-1) > 1:
        raise ValueError(f"Cannot infer multiple unknown dimensions in shape {_dims_str(dims)}")
    n_in = x.shape.num_elements()
    known = [d for d in dims if d is not None and d != -1]
    product = math.prod(known)  # an int, or a SymDim while the compiler lowers
    if -1 in dims:
        i = dims.index(-1)
        dims[i] = None
        if n_in is not None and None not in dims[:i] + dims[i + 1:]:
            if product == 0 or n_in % product:
                raise ValueError(f"Cannot reshape a tensor with {n_in} elements to shape "
                                 f"{_dims_str(dims[:i] + [-1] + dims[i + 1:])}")
            dims[i] = n_in // product
    elif n_in is not None and None not in dims and product != n_in:
        raise ValueError(f"Cannot reshape a tensor with {n_in} elements to shape "
                         f"{_dims_str(dims)} ({product} elements)")
    return TensorShape(dims), x.dtype


def _reshape_kernel(x, shape):
    dims = _dims(shape)
    for i, d in enumerate(dims):
        if d < -1:
            raise KernelError(f"Size {i} must be non-negative, not {d}")
    if dims.count(-1) > 1:
        raise KernelError(f"Only one input size may be -1, not both "
                          f"{dims.index(-1)} and {dims.index(-1, dims.index(-1) + 1)}")
    product = math.prod(d for d in dims if d != -1)  # Python ints: NumPy's would wrap
    if -1 in dims:
        if product == 0 or x.size % product:
            raise KernelError(f"Input to reshape is a tensor with {x.size} values, but the "
                              f"requested shape requires a multiple of {product}")
        dims[dims.index(-1)] = x.size // product
    elif product != x.size:
        raise KernelError(f"Input to reshape is a tensor with {x.size} values, but the "
                          f"requested shape has {product}")
    return x.reshape(dims)


def _to_shape_of(g, x):
    """g reshaped to the (dynamic) shape of x: the gradient of every pure reshaping op."""
    return reshape(g, shape(x))


register_op("Reshape", infer=_reshape_infer, kernel=_reshape_kernel,
            grad=lambda op, g: [_to_shape_of(g, op.inputs[0]), None], kind="index",
            shape_inputs=(1,), aliases_input=True)


def reshape(tensor, shape, name=None):
    x = convert_to_tensor(tensor)
    with x.graph.as_default():
        s = _int_tensor(shape)
    return _create("Reshape", [x, s], name=name).outputs[0]


# -------------------------------------------------------- Fill, zeros, ones, *_like
def _fill_infer(inputs, a):
    dims_t, value = inputs
    _check_int(dims_t, "dims")
    _check_rank(dims_t, (1,), "dims")
    _check_rank(value, (0,), "value")
    dims = known_values(dims_t)
    if dims is not None and any(d is not None and d < 0 for d in dims):
        raise ValueError(f"Fill dimensions must be >= 0, got {_dims_str(dims)}")
    return TensorShape(dims), value.dtype


def _fill_kernel(dims, value):
    dims = _dims(dims)
    if any(d < 0 for d in dims):
        raise KernelError(f"Fill dimensions must be >= 0, got {_dims_str(dims)}")
    if np.ndim(value) != 0:
        raise KernelError(f"value must be a scalar, got shape {_dims_str(np.shape(value))}")
    return np.full(dims, value, dtype=value.dtype)


def _fill_grad(op, g):
    from graphc.ops.reduction_ops import reduce_sum
    return [None, reduce_sum(g)]


register_op("Fill", infer=_fill_infer, kernel=_fill_kernel, grad=_fill_grad, kind="index",
            shape_inputs=(0,))


def fill(dims, value, name=None):
    v = convert_to_tensor(value)
    with v.graph.as_default():
        d = _int_tensor(dims)
    return _create("Fill", [d, v], name=name).outputs[0]


def _filled(shape, dtype, scalar, name, default_name):
    dtype = dtypes.as_dtype(dtype)
    with name_scope(name, default_name, [shape]) as scope:
        s = _int_tensor(shape)
        return fill(s, constant(np.array(scalar, dtype=dtype.np)), name=scope)


def zeros(shape, dtype=dtypes.float32, name=None):
    return _filled(shape, dtype, 0, name, "zeros")


def ones(shape, dtype=dtypes.float32, name=None):
    return _filled(shape, dtype, 1, name, "ones")


register_op("ZerosLike", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
            kernel=np.zeros_like, kind="index", dims_only_inputs=(0,))
register_op("OnesLike", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
            kernel=np.ones_like, kind="index", dims_only_inputs=(0,))
not_differentiable("ZerosLike", "OnesLike")


def _like(op_type, tensor, dtype, name, scalar, default_name):
    x = convert_to_tensor(tensor)
    if dtype is None or dtypes.as_dtype(dtype) == x.dtype:
        # TF's zeros_like_impl names the result after its name_scope(name, "zeros_like")
        with x.graph.as_default(), name_scope(name, default_name, [x]) as scope:
            return _create(op_type, [x], name=scope).outputs[0]
    with x.graph.as_default():  # another dtype: TF fills the dynamic shape
        return _filled(shape(x), dtype, scalar, name, default_name)


def zeros_like(tensor, dtype=None, name=None, optimize=True):
    return _like("ZerosLike", tensor, dtype, name, 0, "zeros_like")


def ones_like(tensor, dtype=None, name=None, optimize=True):
    return _like("OnesLike", tensor, dtype, name, 1, "ones_like")


# ----------------------------------------------------------------------- BroadcastTo
def _broadcast_to_infer(inputs, a):
    x, shape_t = inputs
    _check_int(shape_t, "shape")
    _check_rank(shape_t, (1,), "shape")
    target = TensorShape(known_values(shape_t))
    if x.shape.ndims is not None and target.ndims is not None:
        if x.shape.ndims > target.ndims:
            raise ValueError(f"Rank of input ({x.shape.ndims}) must be no greater than rank "
                             f"of output shape ({target.ndims})")
        out = broadcast_shapes(x.shape, target)
        for d_out, d_target in zip(out.as_list(), target.as_list()):
            if None not in (d_out, d_target) and d_out != d_target:
                raise ValueError(f"Incompatible shapes: {x.shape} cannot be broadcast to "
                                 f"{_dims_str(target.as_list())}")
        return out.merge_with(target), x.dtype
    return target, x.dtype


def _broadcast_to_kernel(x, shape):
    dims = _dims(shape)
    try:
        return np.array(np.broadcast_to(x, dims))
    except ValueError:
        raise KernelError(f"Incompatible shapes: {_dims_str(x.shape)} vs. "
                          f"{_dims_str(dims)}") from None


register_op("BroadcastTo", infer=_broadcast_to_infer, kernel=_broadcast_to_kernel,
            grad=lambda op, g: [unbroadcast(g, op.inputs[0]), None], kind="index",
            shape_inputs=(1,))


def broadcast_to(input, shape, name=None):
    x = convert_to_tensor(input)
    with x.graph.as_default():
        s = _int_tensor(shape)
    return _create("BroadcastTo", [x, s], name=name).outputs[0]


# ----------------------------------------------------------------------- StopGradient
register_op("StopGradient", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
            kernel=lambda x: x, kind="elementwise", forwards_input=True)
not_differentiable("StopGradient")


def stop_gradient(input, name=None):
    x = convert_to_tensor(input)
    return _create("StopGradient", [x], name=name).outputs[0]


# -------------------------------------------------------------------- ExpandDims, Squeeze
def _expand_dims_infer(inputs, a):
    x, axis_t = inputs
    _check_int(axis_t, "axis")
    axis = _static_int(axis_t)
    r = x.shape.ndims
    if r is None:
        return TensorShape(None), x.dtype
    if axis is None:
        return TensorShape([None] * (r + 1)), x.dtype
    axis = _normalize_axis(axis, r + 1)
    dims = x.shape.as_list()
    return TensorShape(dims[:axis] + [1] + dims[axis:]), x.dtype


def _expand_dims_kernel(x, axis):
    return np.expand_dims(x, _kernel_axis(axis, x.ndim + 1))


register_op("ExpandDims", infer=_expand_dims_infer, kernel=_expand_dims_kernel,
            grad=lambda op, g: [_to_shape_of(g, op.inputs[0]), None], kind="index",
            shape_inputs=(1,), aliases_input=True)


def expand_dims(input, axis=None, name=None, dim=None):
    if axis is not None and dim is not None:
        raise ValueError("Cannot specify both 'axis' and 'dim'")
    axis = dim if axis is None else axis
    if axis is None:
        raise ValueError("Must specify an axis argument to gc.expand_dims()")
    x = convert_to_tensor(input)
    with x.graph.as_default():
        a = convert_to_tensor(axis, dtype_hint=dtypes.int32)
    return _create("ExpandDims", [x, a], name=name).outputs[0]


def _squeezed(dims, squeeze_dims, error):
    """dims with the listed (or all size-1) dims removed; error(msg) for a bad request."""
    r = len(dims)
    if not squeeze_dims:
        return [d for d in dims if d != 1]
    keep = []
    wanted = set()
    for d in squeeze_dims:
        if not -r <= d < r:
            error(f"Tried to squeeze dim index {d} for tensor with {r} dimensions.")
        wanted.add(d % r)
    for i, d in enumerate(dims):
        if i in wanted:
            if d is not None and d != 1:
                error(f"Can not squeeze dim[{i}], expected a dimension of 1, got {d}")
        else:
            keep.append(d)
    return keep


def _squeeze_infer(inputs, a):
    x = inputs[0]
    if x.shape.ndims is None:
        return TensorShape(None), x.dtype
    dims = x.shape.as_list()
    if not a["squeeze_dims"] and None in dims:
        return TensorShape(None), x.dtype  # an unknown dim may or may not be 1
    return TensorShape(_squeezed(dims, a["squeeze_dims"], _raise(ValueError))), x.dtype


def _squeeze_kernel(x, squeeze_dims):
    return x.reshape(_squeezed(list(x.shape), squeeze_dims, _raise(KernelError)))


register_op("Squeeze", infer=_squeeze_infer, kernel=_squeeze_kernel,
            grad=lambda op, g: [_to_shape_of(g, op.inputs[0])], kind="index", aliases_input=True)


def squeeze(input, axis=None, name=None, squeeze_dims=None):
    if axis is not None and squeeze_dims is not None:
        raise ValueError("Cannot specify both 'axis' and 'squeeze_dims'")
    axis = squeeze_dims if axis is None else axis
    if isinstance(axis, int):
        axis = [axis]
    x = convert_to_tensor(input)
    return _create("Squeeze", [x], {"squeeze_dims": [int(d) for d in axis or []]},
                   name).outputs[0]


# ----------------------------------------------------------------------- Pack, Unpack
def _merge_all(tensors, op_type):
    """The common static shape and dtype of tensors that must agree exactly."""
    s, dtype = TensorShape(None), tensors[0].dtype
    for i, t in enumerate(tensors):
        if t.dtype != dtype:
            raise TypeError(f"{op_type}: input {i} has dtype {t.dtype.name}, expected "
                            f"{dtype.name} (the dtype of input 0)")
        if s.ndims is not None and t.shape.ndims is not None and s.ndims != t.shape.ndims:
            raise ValueError(f"Shapes must be equal rank, but are {s.ndims} and {t.shape.ndims}")
        if not s.is_compatible_with(t.shape):
            raise ValueError(f"Shapes {s} and {t.shape} are not compatible")
        s = s.merge_with(t.shape)
    return s, dtype


def _pack_infer(inputs, a):
    if not inputs:
        raise ValueError("Pack needs at least one input")
    s, dtype = _merge_all(inputs, "Pack")
    if s.ndims is None:
        return TensorShape(None), dtype
    axis = _normalize_axis(a["axis"], s.ndims + 1)
    dims = s.as_list()
    return TensorShape(dims[:axis] + [len(inputs)] + dims[axis:]), dtype


def _pack_kernel(*arrays, axis, N=None):
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise KernelError(f"Shapes of all inputs must match: values[0].shape = "
                          f"{_dims_str(arrays[0].shape)} != values[i].shape for some i: "
                          f"{', '.join(_dims_str(s) for s in shapes)}")
    return np.stack(arrays, axis=axis)


def _unpack_infer(inputs, a):
    x, num = inputs[0], a["num"]
    if x.shape.ndims is None:
        return [(TensorShape(None), x.dtype)] * num
    axis = _normalize_axis(a["axis"], x.shape.ndims)
    dims = x.shape.as_list()
    if dims[axis] is not None and dims[axis] != num:
        raise ValueError(f"Dimension {axis} has size {dims[axis]}, but num = {num}")
    return [(TensorShape(dims[:axis] + dims[axis + 1:]), x.dtype)] * num


def _unpack_kernel(x, num, axis):
    axis %= x.ndim
    if x.shape[axis] != num:
        raise KernelError(f"Input shape axis {axis} must equal {num}, got shape "
                          f"{_dims_str(x.shape)}")
    return tuple(np.moveaxis(x, axis, 0))


register_op("Pack", infer=_pack_infer, kernel=_pack_kernel,
            grad=lambda op, g: unstack(g, num=len(op.inputs), axis=op.attrs["axis"]), kind="index")
register_op("Unpack", infer=_unpack_infer, kernel=_unpack_kernel,
            grad=lambda op, *gs: [stack(list(gs), axis=op.attrs["axis"])], kind="index")


def _holds_tensor(value):
    if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_tensor(v) for v in value)


def _convert_all(values):
    """Values as tensors; Python values take the dtype of the first tensor among them."""
    tensors = [convert_to_tensor(v) if _holds_tensor(v) else None for v in values]
    hint = next((t.dtype for t in tensors if t is not None), None)
    return [t if t is not None else convert_to_tensor(v, dtype_hint=hint)
            for t, v in zip(tensors, values)]


def stack(values, axis=0, name="stack"):
    values = _convert_all(values)
    return _create("Pack", values, {"axis": int(axis), "N": len(values)}, name).outputs[0]


def unstack(value, num=None, axis=0, name="unstack"):
    x = convert_to_tensor(value)
    if num is None:
        if x.shape.ndims is None:
            raise ValueError(f"Cannot infer num from shape {x.shape}")
        num = x.shape[_normalize_axis(axis, x.shape.ndims)].value
        if num is None:
            raise ValueError(f"Cannot infer num from shape {x.shape}")
    return list(_create("Unpack", [x], {"num": int(num), "axis": int(axis)}, name).outputs)


# --------------------------------------------------------------------------- ConcatV2
def _concat_infer(inputs, a):
    values, axis_t = inputs[:-1], inputs[-1]
    _check_int(axis_t, "axis")
    dtype = values[0].dtype
    ranks = {t.shape.ndims for t in values if t.shape.ndims is not None}
    for i, t in enumerate(values):
        if t.dtype != dtype:
            raise TypeError(f"ConcatV2: values[{i}] has dtype {t.dtype.name}, expected "
                            f"{dtype.name}")
    if len(ranks) > 1:
        r0, r1 = sorted(ranks)[:2]
        raise ValueError(f"Shape must be rank {r0} but is rank {r1}")
    if not ranks:
        return TensorShape(None), dtype
    r = ranks.pop()
    if r == 0:
        raise ValueError("Can't concatenate scalars (use gc.stack instead)")
    axis = _static_int(axis_t)
    if axis is None:
        return TensorShape([None] * r), dtype
    axis = _normalize_axis(axis, r)
    out = [None] * r
    total = 0
    for t in values:
        if t.shape.ndims is None:
            total = None
            continue
        dims = t.shape.as_list()
        for i, d in enumerate(dims):
            if i == axis:
                continue
            if None not in (out[i], d) and out[i] != d:
                raise ValueError(f"Dimension {i} in both shapes must be equal, but are "
                                 f"{out[i]} and {d}")
            out[i] = d if out[i] is None else out[i]
        total = None if total is None or dims[axis] is None else total + dims[axis]
    out[axis] = total
    return TensorShape(out), dtype


def _concat_kernel(*arrays, N=None):
    values, axis = arrays[:-1], arrays[-1]
    r = values[0].ndim
    axis = _kernel_axis(axis, r)
    for i, v in enumerate(values):
        if v.ndim != r or v.shape[:axis] + v.shape[axis + 1:] != \
                values[0].shape[:axis] + values[0].shape[axis + 1:]:
            raise KernelError(f"ConcatOp : Dimensions of inputs should match: shape[0] = "
                              f"{_dims_str(values[0].shape)} vs. shape[{i}] = "
                              f"{_dims_str(v.shape)}")
    return np.concatenate(values, axis=axis)


def _dim_size(x, axis, out_type=dtypes.int32):
    """x's size along `axis` (a python int) as a 1-element int tensor."""
    d = x.shape[axis].value if x.shape.ndims is not None else None
    if d is not None:
        return constant(np.array([d], dtype=out_type.np))
    return slice(shape(x, out_type=out_type), [axis], [1])


def _concat_grad(op, g):
    values, axis_t = op.inputs[:-1], op.inputs[-1]
    axis = _static_int(axis_t)
    if not hasattr(g, "indices"):
        return _concat_dense_grad(values, axis_t, axis, g)
    if axis == 0:
        return _concat_rows_grad(values, g) + [None]
    return _concat_dense_grad(values, axis_t, axis, convert_to_tensor(g))


def _concat_rows_grad(values, g):
    """TF1's gradient of a concatenation of rows for an IndexedSlices (a gather of the
    concatenation: embedding_lookup of a list of shards): each input's own rows, as an
    IndexedSlices of that input."""
    from graphc.framework.indexed_slices import IndexedSlices
    m = _math()
    out, start = [], constant(0, g.indices.dtype)
    for x in values:
        end = start + reshape(_dim_size(x, 0, g.indices.dtype), [])
        mine = m.logical_and(m.greater_equal(g.indices, start), m.less(g.indices, end))
        picked = reshape(m.where(mine), [-1])
        out.append(IndexedSlices(gather(g.values, picked), gather(g.indices, picked) - start,
                                 shape(x)))
        start = end
    return out


def _concat_dense_grad(values, axis_t, axis, g):
    r = next((t.shape.ndims for t in values if t.shape.ndims is not None), None)
    if axis is not None and r is not None:
        sizes = concat([_dim_size(x, axis % r) for x in values], 0)
    else:  # axis known only at run time
        m = _math()
        axis_t = m.floormod(axis_t, rank(values[0]))
        sizes = stack([gather(shape(x, out_type=axis_t.dtype), axis_t) for x in values])
    parts = _create("SplitV", [g, sizes, axis_t], {"num_split": len(values)},
                    "split").outputs
    return list(parts) + [None]


register_op("ConcatV2", infer=_concat_infer, kernel=_concat_kernel, grad=_concat_grad, kind="index")


def concat(values, axis, name="concat"):
    if isinstance(axis, (list, tuple)) and not isinstance(values, (list, tuple)):
        raise TypeError("tf.concat(values, axis) takes the list of tensors first; "
                        "tf.concat(concat_dim, values) is the argument order of TensorFlow "
                        "before 1.0: swap the two arguments")
    if not isinstance(values, (list, tuple)):
        values = [values]
    values = _convert_all(values)
    with values[0].graph.as_default():
        axis_t = convert_to_tensor(axis, dtype_hint=dtypes.int32)
    if len(values) == 1:
        from graphc.ops.control_flow_ops import identity
        return identity(values[0], name=name)
    return _create("ConcatV2", values + [axis_t], {"N": len(values)}, name).outputs[0]


# ------------------------------------------------------------------------------- Tile
def _tile_infer(inputs, a):
    x, multiples_t = inputs
    _check_int(multiples_t, "multiples")
    _check_rank(multiples_t, (1,), "multiples")
    m = known_values(multiples_t)
    r = x.shape.ndims
    if m is not None and r is not None and len(m) != r:
        raise ValueError(f"Shape must be rank {r} but is rank {len(m)}: multiples has "
                         f"{len(m)} elements for an input of rank {r}")
    if m is not None and any(k is not None and k < 0 for k in m):
        raise ValueError(f"Expected multiples to be non-negative, got {_dims_str(m)}")
    if r is None:
        return TensorShape(None if m is None else [None] * len(m)), x.dtype
    m = m or [None] * r
    dims = [None if d is None or k is None else d * k for d, k in zip(x.shape.as_list(), m)]
    return TensorShape(dims), x.dtype


def _tile_kernel(x, multiples):
    m = _dims(multiples)
    if len(m) != x.ndim:
        raise KernelError(f"Expected multiples argument to be a vector of length {x.ndim} "
                          f"but got length {len(m)}")
    if any(k < 0 for k in m):
        raise KernelError(f"Expected multiples to be non-negative, got {_dims_str(m)}")
    return np.tile(x, m) if m else x.copy()


def _tile_grad(op, g):
    """Sum over the tiles: view g as [m0, d0, m1, d1, ...] and reduce the m axes."""
    from graphc.ops.reduction_ops import reduce_sum
    x, multiples = op.inputs
    interleaved = reshape(transpose(stack([multiples, shape(x, out_type=multiples.dtype)])),
                          [-1])
    axes = range(0, size(interleaved), 2)
    dx = reduce_sum(reshape(g, interleaved), axes)
    dx.set_shape(x.shape)
    return [dx, None]


register_op("Tile", infer=_tile_infer, kernel=_tile_kernel, grad=_tile_grad, kind="index")


def tile(input, multiples, name=None):
    x = convert_to_tensor(input)
    with x.graph.as_default():
        m = _int_tensor(multiples)
    return _create("Tile", [x, m], name=name).outputs[0]



# -------------------------------------------------------------- Transpose, InvertPermutation
def _check_permutation(perm, n, error):
    if sorted(perm) != list(builtins.range(n)):
        error(f"perm {_dims_str(perm)} is not a permutation of [0, {n})")


def _transpose_infer(inputs, a):
    x, perm_t = inputs
    _check_int(perm_t, "perm")
    _check_rank(perm_t, (1,), "perm")
    perm = known_values(perm_t)
    r = x.shape.ndims
    if perm is not None and r is not None and len(perm) != r:
        raise ValueError(f"Dimension must be {r} but is {len(perm)}")
    r = len(perm) if r is None and perm is not None else r
    if r is None:
        return TensorShape(None), x.dtype
    if perm is None or None in perm:
        return TensorShape([None] * r), x.dtype
    _check_permutation(perm, r, _raise(ValueError))
    dims = x.shape.as_list() if x.shape.ndims is not None else [None] * r
    return TensorShape([dims[p] for p in perm]), x.dtype


def _transpose_kernel(x, perm):
    perm = _dims(perm)
    if len(perm) != x.ndim:
        raise KernelError(f"transpose expects a vector of size {x.ndim}. But input(1) is a "
                          f"vector of size {len(perm)}")
    _check_permutation(perm, x.ndim, _raise(KernelError))
    return np.transpose(x, perm)


def _inverse_perm(perm):
    p = constant_value(perm)
    if p is not None:
        return constant(np.argsort(np.reshape(p, [-1])).astype(perm.dtype.np))
    return invert_permutation(perm)


register_op("Transpose", infer=_transpose_infer, kernel=_transpose_kernel,
            grad=lambda op, g: [transpose(g, _inverse_perm(op.inputs[1])), None], kind="index")


def transpose(a, perm=None, name="transpose", conjugate=False):
    x = convert_to_tensor(a)
    with x.graph.as_default(), name_scope(name, "transpose", [x]) as scope:
        if perm is None:
            r = x.shape.ndims
            if r is not None:
                perm = list(builtins.range(r - 1, -1, -1))
            else:  # reversed dims, known only at run time
                m = _math()
                n = rank(x)
                perm = m.subtract(m.subtract(n, 1), range(0, n, 1))
        p = _int_tensor(perm)
        return _create("Transpose", [x, p], name=scope).outputs[0]


def _invert_permutation_kernel(x):
    perm = _dims(x)
    _check_permutation(perm, len(perm), _raise(KernelError))
    return np.argsort(perm).astype(x.dtype)


def _invert_permutation_infer(inputs, a):
    _check_int(inputs[0], "x")
    _check_rank(inputs[0], (1,), "x")
    return inputs[0].shape, inputs[0].dtype


register_op("InvertPermutation", infer=_invert_permutation_infer,
            kernel=_invert_permutation_kernel, kind="opaque")
not_differentiable("InvertPermutation")


def invert_permutation(x, name=None):
    x = convert_to_tensor(x, dtype_hint=dtypes.int32)
    return _create("InvertPermutation", [x], name=name).outputs[0]


# ------------------------------------------------------------------------ Split, SplitV
def _split_infer(inputs, a):
    axis_t, x = inputs
    _check_int(axis_t, "axis")
    n = a["num_split"]
    r, axis = x.shape.ndims, _static_int(axis_t)
    if r is None:
        return [(TensorShape(None), x.dtype)] * n
    if axis is None:
        return [(TensorShape([None] * r), x.dtype)] * n
    axis = _normalize_axis(axis, r)
    dims = x.shape.as_list()
    if dims[axis] is not None:
        if dims[axis] % n:
            raise ValueError(f"Dimension size must be evenly divisible by {n} but is "
                             f"{dims[axis]}")
        dims[axis] //= n
    return [(TensorShape(dims), x.dtype)] * n


def _split_kernel(axis, x, num_split):
    axis = _kernel_axis(axis, x.ndim)
    if x.shape[axis] % num_split:
        raise KernelError(f"Number of ways to split should evenly divide the split dimension, "
                          f"but got split_dim {axis} (size = {x.shape[axis]}) and num_split "
                          f"{num_split}")
    return tuple(np.split(x, num_split, axis=axis))


def _resolve_sizes(sizes, d, error):
    """size_splits with its -1 (if any) filled in from the dim size d (None: unknown)."""
    if sizes.count(-1) > 1:
        error(f"size_splits may contain at most one -1, got {_dims_str(sizes)}")
    if any(s is not None and s < -1 for s in sizes):
        error(f"size_splits must be non-negative (or -1), got {_dims_str(sizes)}")
    known = [s for s in sizes if s is not None and s != -1]
    complete = None not in sizes and d is not None
    if -1 in sizes:
        if complete:
            if sum(known) > d:
                error(f"Determined shape must either match input shape along split_dim "
                      f"exactly if fully specified, or be less than the size of the input "
                      f"along split_dim if not fully specified.  Got: {sum(known)} > {d}")
            sizes = [d - sum(known) if s == -1 else s for s in sizes]
        else:
            sizes = [None if s == -1 else s for s in sizes]
    elif complete and sum(known) != d:
        error(f"Determined shape must either match input shape along split_dim exactly if "
              f"fully specified, or be less than the size of the input along split_dim if "
              f"not fully specified.  Got: {sum(known)} != {d}")
    return sizes


def _split_v_infer(inputs, a):
    x, sizes_t, axis_t = inputs
    _check_int(sizes_t, "size_splits")
    _check_int(axis_t, "axis")
    n = a["num_split"]
    sizes = known_values(sizes_t)
    if sizes is not None and len(sizes) != n:
        raise ValueError(f"size_splits has {len(sizes)} elements but num_split is {n}")
    r, axis = x.shape.ndims, _static_int(axis_t)
    if r is None:
        return [(TensorShape(None), x.dtype)] * n
    if axis is None:
        return [(TensorShape([None] * r), x.dtype)] * n
    axis = _normalize_axis(axis, r)
    dims = x.shape.as_list()
    sizes = _resolve_sizes(sizes or [None] * n, dims[axis], _raise(ValueError))
    return [(TensorShape(dims[:axis] + [s] + dims[axis + 1:]), x.dtype) for s in sizes]


def _split_v_kernel(x, size_splits, axis, num_split):
    axis = _kernel_axis(axis, x.ndim)
    sizes = _resolve_sizes(_dims(size_splits), x.shape[axis], _raise(KernelError))
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


register_op("Split", infer=_split_infer, kernel=_split_kernel,
            grad=lambda op, *gs: [None, concat(list(gs), op.inputs[0])], kind="index")
register_op("SplitV", infer=_split_v_infer, kernel=_split_v_kernel,
            grad=lambda op, *gs: [concat(list(gs), op.inputs[2]), None, None], kind="index")


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    x = convert_to_tensor(value)
    with x.graph.as_default():
        axis_t = convert_to_tensor(axis, dtype_hint=dtypes.int32)
        if isinstance(num_or_size_splits, (int, np.integer)):
            n = int(num_or_size_splits)
            if n < 1:
                raise ValueError(f"num_split must be >= 1, got {n}")
            return list(_create("Split", [axis_t, x], {"num_split": n}, name).outputs)
        sizes = _int_tensor(num_or_size_splits)
        if num is None:
            num = sizes.shape[0].value if sizes.shape.ndims == 1 else None
            if num is None:
                raise ValueError(f"Cannot infer num from shape {sizes.shape}")
        return list(_create("SplitV", [x, sizes, axis_t], {"num_split": int(num)},
                            name).outputs)


# ------------------------------------------------------------------------------ Slice
def _slice_infer(inputs, a):
    x, begin_t, size_t = inputs
    for t, what in ((begin_t, "begin"), (size_t, "size")):
        _check_int(t, what)
        _check_rank(t, (1,), what)
    begin, sizes = known_values(begin_t), known_values(size_t)
    r = x.shape.ndims
    for v, what in ((begin, "begin"), (sizes, "size")):
        if v is not None and r is not None and len(v) != r:
            raise ValueError(f"Length of {what} must equal the rank of input ({r}), "
                             f"but is {len(v)}")
        r = len(v) if r is None and v is not None else r
    if r is None:
        return TensorShape(None), x.dtype
    dims = x.shape.as_list() if x.shape.ndims is not None else [None] * r
    begin, sizes = begin or [None] * r, sizes or [None] * r
    out = []
    for i, (d, b, s) in enumerate(zip(dims, begin, sizes)):
        if b is not None and (b < 0 or (d is not None and b > d)):
            raise ValueError(f"Expected begin[{i}] in [0, {d}], but got {b}")
        if s == -1:
            out.append(None if d is None or b is None else d - b)
            continue
        if s is not None and (s < 0 or (None not in (d, b) and b + s > d)):
            raise ValueError(f"Expected size[{i}] in [0, {'?' if d is None else d - (b or 0)}]"
                             f", but got {s}")
        out.append(s)
    return TensorShape(out), x.dtype


def _slice_kernel(x, begin, size):
    begin, sizes = _dims(begin), _dims(size)
    if len(begin) != x.ndim or len(sizes) != x.ndim:
        raise KernelError(f"Expected begin and size arguments to be 1-D tensors of size "
                          f"{x.ndim}, but got shapes [{len(begin)}] and [{len(sizes)}] instead.")
    index = []
    for i, (d, b, s) in enumerate(zip(x.shape, begin, sizes)):
        if not 0 <= b <= d:
            raise KernelError(f"Expected begin[{i}] in [0, {d}], but got {b}")
        s = d - b if s == -1 else s
        if not 0 <= s <= d - b:
            raise KernelError(f"Expected size[{i}] in [0, {d - b}], but got {s}")
        index.append(builtins.slice(b, b + s))
    return x[tuple(index)]


def _slice_grad(op, g):
    """Pad g with zeros back to the input's shape: before = begin, after = the rest.
    With begin and size known when the graph is built, the same as a StridedSliceGrad
    (size -1: an end mask bit), whose input shape is read for its dims only: compiled
    code then needs no shape arithmetic on values when the input has unknown dims."""
    m = _math()
    x, begin = op.inputs[0], op.inputs[1]
    b, size = constant_value(begin), constant_value(op.inputs[2])
    if b is not None and size is not None and np.ndim(b) == 1:
        b, size = np.asarray(b, np.int64), np.asarray(size, np.int64)
        end_mask = builtins.sum(1 << i for i, s in enumerate(size) if s == -1)
        end = np.where(size == -1, 0, b + size)
        dt = begin.dtype
        dx = _create("StridedSliceGrad",
                     [shape(x, out_type=dt), constant(b, dtype=dt), constant(end, dtype=dt),
                      constant(np.ones_like(b), dtype=dt), g],
                     {"begin_mask": 0, "end_mask": end_mask, "ellipsis_mask": 0,
                      "new_axis_mask": 0, "shrink_axis_mask": 0}, "StridedSliceGrad").outputs[0]
        dx.set_shape(x.shape)
        return [dx, None, None]
    input_shape = shape(x, out_type=begin.dtype)
    after = m.subtract(m.subtract(input_shape, begin), shape(op.outputs[0], out_type=begin.dtype))
    dx = pad(g, stack([begin, after], axis=1))
    dx.set_shape(x.shape)
    return [dx, None, None]


register_op("Slice", infer=_slice_infer, kernel=_slice_kernel, grad=_slice_grad, kind="index")


def slice(input_, begin, size, name=None):  # noqa: A001 - TF's name
    x = convert_to_tensor(input_)
    with x.graph.as_default():
        b = _int_tensor(begin)
        s = _int_tensor(size, dtype_hint=b.dtype)
    return _create("Slice", [x, b, s], name=name).outputs[0]


# ---------------------------------------------------------------------- StridedSlice
_UNKNOWN = "?"  # a begin/end/stride element not known at graph-build time
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _strided_index(shape, begin, end, strides, masks, error):
    """The NumPy basic index equal to TF's slice spec on an array of `shape`; Python's
    slice clamping and negative-index rules are TF's, out-of-range shrinks are errors."""
    index = []
    for entry in dense_spec(len(shape), begin, end, strides, masks, error):
        if entry[0] == "new":
            index.append(None)
        elif entry[0] == "shrink":
            dim, b = entry[1], entry[2]
            if not -shape[dim] <= b < shape[dim]:
                error(f"slice index {b} of dimension {dim} out of bounds.")
            index.append(b)
        else:
            index.append(builtins.slice(*entry[2:]))
    return tuple(index)


def _strided_slice_infer(inputs, a):
    x, *bounds = inputs
    for t, what in zip(bounds, ("begin", "end", "strides")):
        _check_int(t, what)
        _check_rank(t, (1,), what)
    values = [known_values(t) for t in bounds]
    if x.shape.ndims is None or any(v is None for v in values):
        return TensorShape(None), x.dtype
    begin, end, strides = [[_UNKNOWN if d is None else d for d in v] for v in values]
    dims = x.shape.as_list()
    out = []
    for entry in dense_spec(len(dims), begin, end, strides, a, _raise(ValueError)):
        if entry[0] == "new":
            out.append(1)
        elif entry[0] == "shrink":
            d, b = dims[entry[1]], entry[2]
            if None not in (d, b) and b != _UNKNOWN and not -d <= b < d:
                raise ValueError(f"slice index {b} of dimension {entry[1]} out of bounds.")
        else:
            d, parts = dims[entry[1]], entry[2:]
            if d is None or _UNKNOWN in parts:
                out.append(None)
            else:
                out.append(slice_size(*parts, d))
    return TensorShape(out), x.dtype


def _strided_slice_kernel(x, begin, end, strides, **masks):
    return x[_strided_index(np.shape(x), _dims(begin), _dims(end), _dims(strides), masks,
                            _raise(KernelError))]


def _strided_slice_grad_infer(inputs, a):
    shape_t, *bounds, dy = inputs
    _check_int(shape_t, "shape")
    return TensorShape(known_values(shape_t)), dy.dtype


def _strided_slice_grad_kernel(shape, begin, end, strides, dy, **masks):
    """dy scattered into zeros of `shape` at the positions StridedSlice read."""
    out = np.zeros(_dims(shape), dtype=dy.dtype)
    index = _strided_index(out.shape, _dims(begin), _dims(end), _dims(strides), masks,
                           _raise(KernelError))
    if out[index].shape != dy.shape:
        raise KernelError(f"dy has shape {_dims_str(dy.shape)} but the slice of shape "
                          f"{_dims_str(out.shape)} has shape {_dims_str(out[index].shape)}")
    out[index] = dy
    return out


def _strided_slice_grad(op, g):
    x, begin, end, strides = op.inputs
    dx = _create("StridedSliceGrad", [shape(x, out_type=begin.dtype), begin, end, strides, g],
                 dict(op.attrs), "StridedSliceGrad").outputs[0]
    dx.set_shape(x.shape)
    return [dx, None, None, None]


def _strided_slice_grad_grad(op, g):
    return [None] * 4 + [strided_slice(g, *op.inputs[1:4], **op.attrs)]


register_op("StridedSlice", infer=_strided_slice_infer, kernel=_strided_slice_kernel,
            grad=_strided_slice_grad, kind="index")
register_op("StridedSliceGrad", infer=_strided_slice_grad_infer,
            kernel=_strided_slice_grad_kernel, grad=_strided_slice_grad_grad, kind="index")


def _index_vector(values, dtype):
    """A list of ints and scalar int tensors as one 1-D tensor of `dtype`."""
    if not any(isinstance(v, Tensor) for v in values):
        return constant(np.array(values, dtype=dtype.np).reshape([-1]))
    return stack([v if isinstance(v, Tensor) else constant(np.array(v, dtype=dtype.np))
                  for v in values])


def _index_vectors(*lists):
    """begin, end, strides as tensors of one dtype (that of any tensor among them)."""
    tensors = [v for lst in lists for v in lst if isinstance(v, Tensor)]
    dtype = tensors[0].dtype if tensors else dtypes.int32
    if not tensors and any(abs(int(v)) > np.iinfo(np.int32).max for lst in lists for v in lst):
        dtype = dtypes.int64
    return [_index_vector(list(lst), dtype) for lst in lists]


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0,
                  ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0, var=None, name=None):
    x = convert_to_tensor(input_)
    with x.graph.as_default():
        b = _int_tensor(begin)
        e = _int_tensor(end, dtype_hint=b.dtype)
        s = ones_like(b) if strides is None else _int_tensor(strides, dtype_hint=b.dtype)
    masks = dict(zip(_MASKS, (int(m) for m in (begin_mask, end_mask, ellipsis_mask,
                                                new_axis_mask, shrink_axis_mask))))
    return _create("StridedSlice", [x, b, e, s], masks, name or "StridedSlice").outputs[0]


def _index_part(value):
    """One int (or None) of an index key, checked: Python/NumPy ints, known Dimensions
    (TF1 code slices by `x.shape[1]`) and scalar int tensors."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        return value
    if isinstance(value, Dimension) and isinstance(value.value, int):
        return value.value
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor) and value.dtype.is_integer and value.shape.ndims in (0, None):
        return value
    raise TypeError("Only integers, slices (`:`), ellipsis (`...`), gc.newaxis (`None`) and "
                    f"scalar gc.int32/gc.int64 tensors are valid indices, got {value!r}")


def slice_helper(tensor, key, var=None):
    """tensor[key] (Tensor.__getitem__) as one StridedSlice, with TF's masks."""
    x = convert_to_tensor(tensor)
    key = key if isinstance(key, tuple) else (key,)
    begin, end, strides = [], [], []
    masks = dict.fromkeys(_MASKS, 0)
    for i, k in enumerate(key):
        bit = 1 << i
        if isinstance(k, builtins.slice):
            start, stop, step = (_index_part(v) for v in (k.start, k.stop, k.step))
            begin.append(0 if start is None else start)
            end.append(0 if stop is None else stop)
            strides.append(1 if step is None else step)
            masks["begin_mask"] |= bit if start is None else 0
            masks["end_mask"] |= bit if stop is None else 0
        elif k is Ellipsis or k is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask" if k is Ellipsis else "new_axis_mask"] |= bit
        else:
            k = _index_part(k)
            begin.append(k)
            end.append(k + 1 if isinstance(k, (int, np.integer)) else 0)  # ignored when shrinking
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    with x.graph.as_default(), name_scope(None, "strided_slice", [x]) as scope:
        b, e, s = _index_vectors(begin, end, strides)
        return strided_slice(x, b, e, s, name=scope, **masks)


# --------------------------------------------------------------------- GatherV2, GatherGrad
def _check_indices(indices, limit):
    bad = (indices < 0) | (indices >= limit)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"indices[{','.join(map(str, pos))}]" if pos else "indices"
        raise KernelError(f"{where} = {indices[pos]} is not in [0, {limit})")


def _batch_dims(batch_dims, indices_rank):
    return batch_dims + indices_rank if batch_dims < 0 else batch_dims


def _gather_infer(inputs, a):
    params, indices, axis_t = inputs
    _check_int(indices, "indices")
    _check_int(axis_t, "axis")
    pr, ir, axis = params.shape.ndims, indices.shape.ndims, _static_int(axis_t)
    if pr is None or ir is None:
        return TensorShape(None), params.dtype
    bd = _batch_dims(a["batch_dims"], ir)
    if not 0 <= bd <= ir:
        raise ValueError(f"batch_dims ({a['batch_dims']}) must be in [{-ir}, {ir}]")
    if axis is None:
        return TensorShape([None] * (pr + ir - 1 - bd)), params.dtype
    if pr == 0:
        raise ValueError("params must be at least 1 dimensional")
    axis = _normalize_axis(axis, pr)
    if axis < bd:
        raise ValueError(f"batch_dims ({bd}) must be less than or equal to axis ({axis})")
    p, i = params.shape.as_list(), indices.shape.as_list()
    batch = TensorShape(p[:bd]).merge_with(TensorShape(i[:bd])).as_list()
    return TensorShape(batch + p[bd:axis] + i[bd:] + p[axis + 1:]), params.dtype


def _per_batch(arrays_and_splits, n):
    """Arrays with their first `bd` dims flattened into one of size n."""
    return [a.reshape((n,) + a.shape[bd:]) for a, bd in arrays_and_splits]


def _gather_kernel(params, indices, axis, batch_dims):
    axis = _kernel_axis(axis, params.ndim)
    bd = _batch_dims(batch_dims, indices.ndim)
    _check_indices(indices, params.shape[axis])
    if bd == 0:
        return np.take(params, indices, axis=axis)
    if params.shape[:bd] != indices.shape[:bd]:
        raise KernelError(f"params.shape[:{bd}] = {_dims_str(params.shape[:bd])} must equal "
                          f"indices.shape[:{bd}] = {_dims_str(indices.shape[:bd])}")
    out_shape = (params.shape[:axis] + indices.shape[bd:] + params.shape[axis + 1:])
    n = int(np.prod(params.shape[:bd]))
    p, ix = _per_batch([(params, bd), (indices, bd)], n)
    out = np.empty((n,) + out_shape[bd:], dtype=params.dtype)
    for b in builtins.range(n):
        out[b] = np.take(p[b], ix[b], axis=axis - bd)
    return out.reshape(out_shape)


def _gather_grad_kernel(grad, indices, params_shape, axis, batch_dims):
    """Adds each slice of grad into zeros of params_shape at the gathered index (repeated
    indices add up): the transpose of GatherV2."""
    dims = _dims(params_shape)
    axis = _kernel_axis(axis, len(dims))
    bd = _batch_dims(batch_dims, indices.ndim)
    _check_indices(indices, dims[axis])
    out = np.zeros(dims, dtype=grad.dtype)
    n = int(np.prod(dims[:bd]))
    o = out.reshape([n] + dims[bd:])  # a view: writes land in out
    g, ix = _per_batch([(grad, bd), (indices, bd)], n)
    a, k = axis - bd, indices.ndim - bd
    for b in builtins.range(n):
        # grad[b] is [pre..., idx..., post...]; add.at wants [idx..., pre..., post...]
        gb = np.moveaxis(g[b], list(builtins.range(a, a + k)), list(builtins.range(k)))
        np.add.at(np.moveaxis(o[b], a, 0), ix[b], gb)
    return out


def _gather_grad(op, g):
    params, indices, axis = op.inputs
    if op.attrs["batch_dims"] == 0 and _static_int(axis) == 0:
        return [_gather_rows_grad(params, indices, g), None, None]
    dp = _create("GatherGrad", [g, indices, shape(params, out_type=indices.dtype), axis],
                 {"batch_dims": op.attrs["batch_dims"]}, "GatherGrad").outputs[0]
    dp.set_shape(params.shape)
    return [dp, None, None]


def _gather_rows_grad(params, indices, g):
    """TF1's gradient of a gather of rows: IndexedSlices of g's rows at the flattened
    indices, so that optimizers update only those rows."""
    from graphc.framework.indexed_slices import IndexedSlices
    params_shape = shape(params)
    n = size(indices)
    values = reshape(g, concat([reshape(n, [1]), params_shape[1:]], 0))
    return IndexedSlices(values, reshape(indices, reshape(n, [1])), params_shape)


def _unique_kernel(x, out_idx):
    """TF's order: the distinct values in order of first occurrence."""
    _, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return x[np.sort(first)], rank[inverse.reshape(-1)].astype(out_idx.np)


def _unique_infer(inputs, a):
    x, = inputs
    _check_rank(x, (1,), "x")
    return [(TensorShape([None]), x.dtype), (x.shape.with_rank(1) if x.shape.ndims is None
                                             else x.shape, a["out_idx"])]


# host-only: its output size depends on the data, and compiled code allocates its fetches
# from the dims before it runs
register_op("Unique", infer=_unique_infer, kernel=_unique_kernel, kind="opaque", host_only=True)
not_differentiable("Unique")


def unique(x, out_idx=dtypes.int32, name=None):
    """(y, idx): the distinct elements of the 1-D x in order of first occurrence, and for
    each element of x the position of its value in y."""
    x = convert_to_tensor(x)
    op = x.graph.create_op("Unique", [x], {"out_idx": dtypes.as_dtype(out_idx)},
                           name or "Unique")
    return tuple(op.outputs)


def scatter_rows(values, indices, dense_shape, name=None):
    """Zeros of dense_shape with values[i] added into row indices[i] (TF's
    unsorted_segment_sum into dense_shape[0] segments): a dense IndexedSlices."""
    values = convert_to_tensor(values)
    indices = convert_to_tensor(indices)
    dense_shape = _int_tensor(dense_shape, indices.dtype)
    axis = constant(0, indices.dtype)
    return _create("GatherGrad", [values, indices, dense_shape, axis], {"batch_dims": 0},
                   name or "UnsortedSegmentSum").outputs[0]


def _gather_grad_grad(op, g):
    _, indices, _, axis = op.inputs
    return [gather(g, indices, axis=axis, batch_dims=op.attrs["batch_dims"]), None, None, None]


def _gather_grad_infer(inputs, a):
    grad, indices, shape_t, axis = inputs
    _check_int(indices, "indices")
    _check_int(shape_t, "params_shape")
    return TensorShape(known_values(shape_t)), grad.dtype


register_op("GatherV2", infer=_gather_infer, kernel=_gather_kernel, grad=_gather_grad, kind="index")
register_op("GatherGrad", infer=_gather_grad_infer, kernel=_gather_grad_kernel,
            grad=_gather_grad_grad, kind="opaque")


def gather(params, indices, validate_indices=None, name=None, axis=None, batch_dims=0):
    p = convert_to_tensor(params)
    with p.graph.as_default():
        ix = convert_to_tensor(indices, dtype_hint=dtypes.int32)
        axis_t = convert_to_tensor(batch_dims if axis is None else axis,
                                   dtype_hint=dtypes.int32)
    return _create("GatherV2", [p, ix, axis_t], {"batch_dims": int(batch_dims)},
                   name).outputs[0]


# ----------------------------------------------------------------------------- OneHot
def _one_hot_infer(inputs, a):
    indices, depth_t, on, off = inputs
    _check_int(indices, "indices")
    _check_int(depth_t, "depth")
    for t, what in ((depth_t, "depth"), (on, "on_value"), (off, "off_value")):
        _check_rank(t, (0,), what)
    if on.dtype != off.dtype:
        raise TypeError(f"on_value dtype {on.dtype.name} does not match off_value dtype "
                        f"{off.dtype.name}")
    depth = _static_int(depth_t)
    if depth is not None and depth < 0:
        raise ValueError(f"depth must be non-negative, got: {depth}")
    if indices.shape.ndims is None:
        return TensorShape(None), on.dtype
    dims = indices.shape.as_list()
    axis = a["axis"]
    if not -1 <= axis <= len(dims):
        raise ValueError(f"Expected axis to be -1 or between [0, {len(dims)}].  But received: "
                         f"{axis}")
    axis = len(dims) if axis == -1 else axis
    return TensorShape(dims[:axis] + [depth] + dims[axis:]), on.dtype


def _one_hot_kernel(indices, depth, on_value, off_value, axis):
    depth = int(depth)
    if depth < 0:
        raise KernelError(f"depth must be non-negative, got: {depth}")
    # an index outside [0, depth) matches no column: an all-off row, as in TF
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, on_value, off_value).astype(on_value.dtype)
    return out if axis == -1 else np.moveaxis(out, -1, axis)


register_op("OneHot", infer=_one_hot_infer, kernel=_one_hot_kernel, kind="index")
not_differentiable("OneHot")


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    ix = convert_to_tensor(indices, dtype_hint=dtypes.int32)
    with ix.graph.as_default(), name_scope(name, "one_hot", [ix]) as scope:
        given = [v for v in (on_value, off_value) if isinstance(v, Tensor)]
        if dtype is None:
            dtype = given[0].dtype if given else dtypes.float32
        dtype = dtypes.as_dtype(dtype)
        on = convert_to_tensor(1 if on_value is None else on_value, dtype=dtype)
        off = convert_to_tensor(0 if off_value is None else off_value, dtype=dtype)
        depth_t = convert_to_tensor(depth, dtype_hint=dtypes.int32)
        return _create("OneHot", [ix, depth_t, on, off],
                       {"axis": -1 if axis is None else int(axis)}, scope).outputs[0]


# ------------------------------------------------------------------ Pad, PadV2, MirrorPad
def _pad_infer(inputs, a):
    x, paddings = inputs[0], inputs[1]
    _check_int(paddings, "paddings")
    _check_rank(paddings, (2,), "paddings")
    if len(inputs) == 3:
        _check_rank(inputs[2], (0,), "constant_values")
        if inputs[2].dtype != x.dtype:
            raise TypeError(f"constant_values dtype {inputs[2].dtype.name} does not match "
                            f"input dtype {x.dtype.name}")
    ps = paddings.shape
    r = x.shape.ndims
    if ps.ndims == 2:
        if ps[1].value not in (None, 2):
            raise ValueError(f"Dimension 1 of paddings must be 2, but is {ps[1].value}")
        if None not in (r, ps[0].value) and ps[0].value != r:
            raise ValueError(f"The first dimension of paddings must be the rank of inputs"
                             f"[{ps[0].value},2] {r}")
        r = ps[0].value if r is None else r
    if r is None:
        return TensorShape(None), x.dtype
    dims = x.shape.as_list() if x.shape.ndims is not None else [None] * r
    v = constant_value(paddings)
    if v is None:
        return TensorShape([None] * r), x.dtype
    _check_paddings(v, dims, a.get("mode"), _raise(ValueError))
    return TensorShape([None if d is None else d + int(b) + int(e) for d, (b, e) in
                        zip(dims, np.reshape(v, [-1, 2]))]), x.dtype


def _check_paddings(paddings, dims, mode, error):
    if np.shape(paddings) != (len(dims), 2):
        error(f"paddings must be a matrix with 2 columns and {len(dims)} rows, got shape "
              f"{_dims_str(np.shape(paddings))}")
    for i, ((b, e), d) in enumerate(zip(paddings, dims)):
        if b < 0 or e < 0:
            error(f"Paddings must be non-negative: {b} {e}")
        if mode is not None and d is not None:
            limit = d - 1 if mode == "REFLECT" else d  # a reflection never repeats the edge
            if b > limit or e > limit:
                error(f"paddings must be no greater than the dimension size: {b}, {e} greater "
                      f"than {limit}")


def _pad_kernel(x, paddings, constant_values=None):
    _check_paddings(paddings, x.shape, None, _raise(KernelError))
    cv = 0 if constant_values is None else constant_values
    return np.pad(x, np.asarray(paddings, dtype=np.int64), mode="constant", constant_values=cv)


def _mirror_index(d, before, after, mode):
    """For each position of a mirror-padded dim of size d, the input position it copies."""
    skip = 1 if mode == "REFLECT" else 0  # REFLECT does not repeat the edge element
    left = [before - i - 1 + skip for i in builtins.range(before)]
    right = [d - 1 - j - skip for j in builtins.range(after)]
    return np.array(left + list(builtins.range(d)) + right, dtype=np.int64)


def _mirror_pad_kernel(x, paddings, mode):
    _check_paddings(paddings, x.shape, mode, _raise(KernelError))
    for axis, (b, e) in enumerate(paddings):
        x = np.take(x, _mirror_index(x.shape[axis], int(b), int(e), mode), axis=axis)
    return x


def _mirror_pad_grad_kernel(g, paddings, mode):
    """Each padded position's gradient added to the input position it copied."""
    for axis, (b, e) in enumerate(paddings):
        d = g.shape[axis] - int(b) - int(e)
        if d < 0:
            raise KernelError(f"paddings {_dims_str(paddings[axis])} exceed dimension {axis} "
                              f"of the gradient, {g.shape[axis]}")
        out = np.zeros(g.shape[:axis] + (d,) + g.shape[axis + 1:], dtype=g.dtype)
        np.add.at(np.moveaxis(out, axis, 0), _mirror_index(d, int(b), int(e), mode),
                  np.moveaxis(g, axis, 0))
        g = out
    return g


def _mirror_pad_grad_infer(inputs, a):
    g, paddings = inputs
    v = constant_value(paddings)
    if v is None or g.shape.ndims is None:
        return TensorShape(None if g.shape.ndims is None else [None] * g.shape.ndims), g.dtype
    return TensorShape([None if d is None else d - int(b) - int(e) for d, (b, e) in
                        zip(g.shape.as_list(), np.reshape(v, [-1, 2]))]), g.dtype


def _pad_grad(op, g):
    """The input's part of g: a slice starting at the `before` paddings (for MirrorPad,
    plus the mirrored copies folded back in)."""
    x, paddings = op.inputs[0], op.inputs[1]
    if op.type == "MirrorPad":
        dx = _create("MirrorPadGrad", [g, paddings], {"mode": op.attrs["mode"]}).outputs[0]
    else:
        before = slice_helper(paddings, (builtins.slice(None), 0))
        dx = slice(g, before, shape(x, out_type=paddings.dtype))
    dx.set_shape(x.shape)
    grads = [dx, None]
    if op.type == "PadV2":  # every padded element is constant_values
        from graphc.ops.reduction_ops import reduce_sum
        grads.append(_math().subtract(reduce_sum(g), reduce_sum(dx)))
    return grads


def _mirror_pad_grad_grad(op, g):
    return [_create("MirrorPad", [g, op.inputs[1]], {"mode": op.attrs["mode"]}).outputs[0],
            None]


register_op("Pad", infer=_pad_infer, kernel=_pad_kernel, grad=_pad_grad, kind="index")
register_op("PadV2", infer=_pad_infer, kernel=_pad_kernel, grad=_pad_grad, kind="index")
register_op("MirrorPad", infer=_pad_infer, kernel=_mirror_pad_kernel, grad=_pad_grad, kind="index")
register_op("MirrorPadGrad", infer=_mirror_pad_grad_infer, kernel=_mirror_pad_grad_kernel,
            grad=_mirror_pad_grad_grad, kind="opaque")


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0):
    x = convert_to_tensor(tensor)
    mode = str(mode).upper()
    with x.graph.as_default():
        p = _int_tensor(paddings)
        if mode == "CONSTANT":
            if not isinstance(constant_values, Tensor) and np.all(constant_values == 0):
                return _create("Pad", [x, p], name=name).outputs[0]
            cv = convert_to_tensor(constant_values, dtype=x.dtype)
            return _create("PadV2", [x, p, cv], name=name).outputs[0]
        if mode not in ("REFLECT", "SYMMETRIC"):
            raise ValueError(f"Unknown padding mode: {mode}")
        return _create("MirrorPad", [x, p], {"mode": mode}, name).outputs[0]


# ------------------------------------------------------------------------------ Range
def _range_length(start, limit, delta, error):
    if delta == 0:
        error(f"Requires delta != 0: {delta}")
    if delta > 0 and start > limit:
        error(f"Requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        error(f"Requires start >= limit when delta < 0: {start}/{limit}")
    if all(isinstance(v, (int, np.integer, SymDim)) for v in (start, limit, delta)):
        # exact for int64 bounds past 2**53 and for symbolic ones (range(shape(x)[0]));
        # the checks above make both numerators non-negative
        if delta > 0:
            return concrete((limit - start + delta - 1) // delta)
        return concrete((start - limit - delta - 1) // -delta)
    return int(np.ceil(abs((limit - start) / delta)))


def _range_infer(inputs, a):
    dtype = inputs[0].dtype
    for t, what in zip(inputs, ("start", "limit", "delta")):
        _check_rank(t, (0,), what)
        if t.dtype != dtype:
            raise TypeError(f"Range: {what} has dtype {t.dtype.name}, expected {dtype.name}")
    values = [constant_value(t) for t in inputs]
    if any(v is None for v in values):
        return TensorShape([None]), dtype
    return TensorShape([_range_length(*(v.item() for v in values), _raise(ValueError))]), dtype


def _range_kernel(start, limit, delta):
    n = _range_length(start.item(), limit.item(), delta.item(), _raise(KernelError))
    return (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)


register_op("Range", infer=_range_infer, kernel=_range_kernel, kind="index")
not_differentiable("Range")

_RANGE_DTYPES = [dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64]


def _fits_int32(value):
    info = np.iinfo(np.int32)
    return info.min <= int(value) <= info.max


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001 - TF's name
    if limit is None:
        start, limit = 0, start
    with name_scope(name, "Range", [start, limit, delta]) as scope:
        if dtype is None:  # the widest of the arguments' dtypes (Python: int32, float32;
            # int64 for ints past int32, as their constants are)
            kinds = [v.dtype if isinstance(v, Tensor) else
                     dtypes.float32 if np.asarray(v).dtype.kind == "f" else
                     dtypes.int32 if _fits_int32(v) else dtypes.int64
                     for v in (start, limit, delta)]
            for k in kinds:
                if k not in _RANGE_DTYPES:
                    raise TypeError(f"range: unsupported dtype {k.name}")
            dtype = max(kinds, key=_RANGE_DTYPES.index)
        dtype = dtypes.as_dtype(dtype)
        args = [_math().cast(v, dtype) if isinstance(v, Tensor) else
                convert_to_tensor(v, dtype=dtype) for v in (start, limit, delta)]
        return _create("Range", args, name=scope).outputs[0]


def reverse(tensor, axis, name=None):
    """TF's reverse (ReverseV2): `tensor` with the order of each axis in `axis` reversed."""
    tensor = convert_to_tensor(tensor, name="tensor")
    if isinstance(axis, Tensor):
        axis = constant_value(axis)
        if axis is None:
            raise ValueError("reverse: graphc needs `axis` known when the graph is built")
    rank = tensor.shape.ndims
    if rank is None:
        raise ValueError("reverse needs a tensor of known rank")
    axes = [int(a) for a in np.reshape(axis, [-1])]
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"reverse: axis {a} is out of range for a tensor of rank {rank}")
    if len({a % rank for a in axes}) != len(axes):
        raise ValueError(f"reverse: axis {axes} names a dimension more than once")
    axes = {a % rank for a in axes}
    key = tuple(builtins.slice(None, None, -1) if a in axes else builtins.slice(None)
                for a in builtins.range(rank))
    with name_scope(name, "ReverseV2", [tensor]):
        # a stride of -1 on each reversed axis: strided_slice already compiles everywhere and
        # has its gradient
        return slice_helper(tensor, key)


reverse_v2 = reverse
