"""Const, Placeholder, PlaceholderWithDefault and conversion of Python values to tensors."""
import numbers

import numpy as np

from graphc import dtypes
from graphc.framework.api_types import DTypeLike, Optional, ShapeLike, TensorLike
from graphc.framework.graph import Tensor, get_default_graph
from graphc.framework.op_def import register_op
from graphc.framework.tensor_shape import TensorShape, as_shape


def _const_kernel(value, dtype):
    return value


register_op("Const", infer=lambda inputs, a: (TensorShape(a["value"].shape), a["dtype"]),
            kernel=_const_kernel, kind="source")


def _infer_dtype(value):
    """TF's choice for Python values: float -> float32, int -> int32 (int64 when too big)."""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return dtypes.as_dtype(value.dtype)
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        return dtypes.float32
    if arr.dtype.kind in "iu":
        if arr.size and (arr.max() > np.iinfo(np.int32).max or arr.min() < np.iinfo(np.int32).min):
            return dtypes.int64
        return dtypes.int32
    if arr.dtype.kind == "b":
        return dtypes.bool
    if arr.dtype.kind in "SU" or (arr.dtype == object and arr.size and all(
            isinstance(v, (str, bytes)) for v in arr.reshape(-1))):
        return dtypes.string
    raise TypeError(f"Cannot convert {value!r} (NumPy dtype {arr.dtype}) to a graphc Tensor.")


def to_numpy(value, dtype=None):
    """A NumPy array of `value` in `dtype` (a DType or None: inferred). TypeError for a
    float value asked to be an integer or bool tensor, as TF."""
    dtype = _infer_dtype(value) if dtype is None else dtypes.as_dtype(dtype)
    if dtype == dtypes.string:
        return dtypes.bytes_array(value)
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind in "SU":
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}.")
    if (dtype.is_integer or dtype.is_bool) and arr.dtype.kind == "f" and arr.size:
        # TF never turns a float value into an integer tensor implicitly
        raise TypeError(f"Expected {dtype.name}, got {value!r} of type "
                        f"'{type(value).__name__}' instead.")
    if dtype.is_bool and arr.dtype.kind != "b":
        raise TypeError(f"Expected bool, got {value!r} instead.")
    if dtype.is_integer and arr.dtype.kind in "iu" and not _fits(arr, dtype.np):
        # NumPy's cast would keep the low bits (2**32 + 5 -> 5): a dim silently wrong;
        # a shape argument given this way is converted as int64 instead (dtype_hint)
        raise TypeError(f"Value {value!r} is out of range for a tensor of dtype "
                        f"{dtype.name}.")
    return np.asarray(arr, dtype=dtype.np)


def _fits(arr, np_dtype):
    if not arr.size:
        return True
    info = np.iinfo(np_dtype)
    return int(arr.min()) >= info.min and int(arr.max()) <= info.max


def constant(value: TensorLike, dtype: Optional[DTypeLike] = None, shape: ShapeLike = None,
             name: str = "Const", verify_shape: bool = False) -> Tensor:
    arr = to_numpy(value, dtype)
    if shape is not None:
        arr = _fill_shape(arr, shape, verify_shape)
    arr = np.array(arr, order="C")  # a private copy (ascontiguousarray would make 0-d 1-d)
    arr.setflags(write=False)
    return get_default_graph().create_op(
        "Const", [], {"value": arr, "dtype": dtypes.as_dtype(arr.dtype)}, name).outputs[0]


def _fill_shape(arr, shape, verify_shape):
    """TF1's constant(value, shape) (tensor_util.make_tensor_proto without broadcast): a
    zero-element shape ignores the value, as many values as elements are reshaped, fewer
    are padded with the last one (a TensorProto's rule; none: zeros), more are an error."""
    shape = tuple(as_shape(shape).as_list())
    if any(d is None for d in shape):
        raise ValueError(f"constant() needs a fully defined shape, got {shape}.")
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, arr.dtype)
    if verify_shape and arr.shape != shape:
        raise TypeError(f"Expected Tensor's shape: {shape}, got {arr.shape}.")
    if arr.size > n:
        raise ValueError(f"Too many elements provided. Takes at most {n}, but got {arr.size}")
    flat = arr.reshape(-1)
    pad = flat[-1] if flat.size else np.zeros((), arr.dtype)
    return np.concatenate([flat, np.full(n - flat.size, pad, arr.dtype)]).reshape(shape)


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None, dtype_hint=None):
    """Returns `value` as a Tensor: tensors pass through, variables are read, Python and
    NumPy values become constants (lists holding tensors are stacked)."""
    dtype = None if dtype is None else dtypes.as_dtype(dtype)
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtype:
            raise ValueError(f"Tensor conversion requested dtype {dtype.name} for Tensor with "
                             f"dtype {value.dtype.name}: {value!r}")
        return value
    if isinstance(value, (list, tuple)) and _contains_tensor(value):
        from graphc.ops.array_ops import stack
        # without a dtype, stack gives Python numbers the dtype of the tensors among them
        parts = list(value) if dtype is None else [convert_to_tensor(v, dtype) for v in value]
        return stack(parts, name=name or "packed")
    hint = dtype or preferred_dtype or dtype_hint
    if dtype is None and hint is not None:
        try:
            return constant(value, hint, name=name or "Const")
        except TypeError:
            pass
    return constant(value, dtype, name=name or "Const")


def _contains_tensor(values):
    for v in values:
        if isinstance(v, Tensor) or hasattr(v, "_as_tensor"):
            return True
        if isinstance(v, (list, tuple)) and _contains_tensor(v):
            return True
    return False


def is_scalar_number(value):
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _placeholder_kernel(dtype, shape):
    raise AssertionError("placeholders are fed by the Session, never run")


register_op("Placeholder", infer=lambda inputs, a: (a["shape"], a["dtype"]),
            kernel=_placeholder_kernel, kind="source")


def placeholder(dtype: DTypeLike, shape: ShapeLike = None, name: Optional[str] = None) -> Tensor:
    """A value fed at run time. `shape=None` accepts any shape; dims may be None."""
    attrs = {"dtype": dtypes.as_dtype(dtype), "shape": TensorShape(None if shape is None else shape)}
    return get_default_graph().create_op("Placeholder", [], attrs, name or "Placeholder").outputs[0]


def _with_default_infer(inputs, a):
    if not inputs[0].shape.is_compatible_with(a["shape"]):
        raise ValueError(f"Default value shape {inputs[0].shape} is not compatible with "
                         f"shape {a['shape']}")
    return a["shape"], inputs[0].dtype


register_op("PlaceholderWithDefault", infer=_with_default_infer,
            kernel=lambda x, shape: x, grad=lambda op, g: [None], kind="elementwise",
            forwards_input=True)


def placeholder_with_default(input: TensorLike, shape: ShapeLike,
                             name: Optional[str] = None) -> Tensor:
    x = convert_to_tensor(input)
    return x.graph.create_op("PlaceholderWithDefault", [x], {"shape": as_shape(shape)},
                             name or "PlaceholderWithDefault").outputs[0]
