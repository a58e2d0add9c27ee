"""Elementwise math: unary functions, broadcasting binary arithmetic, comparisons, logical
ops, Select/Where, AddN and Cast, with TF1's names, dtype rules and gradients.

Most ops are registered from tables (op type -> NumPy function, allowed dtypes, gradient).
Kernels run under np.errstate(all="ignore") because TF returns inf/nan silently; integer
division by zero and negative integer powers are run-time errors, as in TF.
"""
import math

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import Tensor, name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape, broadcast_shapes
from graphc.ops.broadcast_grad import unbroadcast
from graphc.ops.constant_ops import convert_to_tensor

__all__ = [
    "add", "subtract", "multiply", "divide", "truediv", "div", "floordiv", "floormod", "mod",
    "negative", "abs", "sign", "square", "sqrt", "rsqrt", "reciprocal", "exp", "log", "log1p",
    "expm1", "pow", "maximum", "minimum", "squared_difference", "tanh", "sigmoid", "sin", "cos",
    "floor", "ceil", "round", "erf", "erfc", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not",
    "is_nan", "is_inf", "is_finite", "where",
    "clip_by_value", "add_n", "cast", "to_float", "to_int32", "to_int64", "saturate_cast",
]

FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
INTEGERS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8)
NUMERIC = FLOATS + INTEGERS
BOOLS = (dtypes.bool,)
NON_STRING = NUMERIC + BOOLS


# ------------------------------------------------------------------------ static checks
def _dims_str(shape):
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _check_allowed(dtype, allowed, arg="x"):
    if dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"Value passed to parameter '{arg}' has DataType {dtype.name} not in "
                        f"list of allowed values: {names}")


def _check_same_dtype(op_type, first, first_arg, second, second_arg):
    if first.dtype != second.dtype:
        raise TypeError(f"Input '{second_arg}' of '{op_type}' Op has type {second.dtype.name} "
                        f"that does not match type {first.dtype.name} of argument '{first_arg}'.")


def _broadcast_static(a, b):
    """NumPy broadcasting of static shapes, with TF's message for known clashing dims."""
    if a.ndims is not None and b.ndims is not None:
        for da, db in zip(reversed(a.as_list()), reversed(b.as_list())):
            if None not in (da, db) and da != db and 1 not in (da, db):
                raise ValueError(f"Dimensions must be equal, but are {da} and {db}")
    return broadcast_shapes(a, b)


def _merge_shapes(a, b):
    """Two shapes that must be equal (no broadcasting), merged; TF's messages on a clash."""
    if a.ndims is None:
        return b
    if b.ndims is None:
        return a
    if a.ndims != b.ndims:
        raise ValueError(f"Shapes must be equal rank, but are {a.ndims} and {b.ndims}")
    for i, (da, db) in enumerate(zip(a.as_list(), b.as_list())):
        if None not in (da, db) and da != db:
            raise ValueError(f"Dimension {i} in both shapes must be equal, but are {da} and {db}. "
                             f"Shapes are {_dims_str(a.as_list())} and {_dims_str(b.as_list())}.")
    return a.merge_with(b)


# ----------------------------------------------------------------------- conversions
def _is_tensor_like(value):
    return isinstance(value, Tensor) or hasattr(value, "_as_tensor")


def _convert_pair(x, y):
    """Both operands as tensors. A Python/NumPy operand takes the dtype of the tensor one,
    so `x + 2` with float32 x adds a float32 constant (TF1's operator rule)."""
    if _is_tensor_like(x) or not _is_tensor_like(y):
        x = convert_to_tensor(x)
        with x.graph.as_default():
            y = convert_to_tensor(y, dtype_hint=x.dtype)
    else:
        y = convert_to_tensor(y)
        with y.graph.as_default():
            x = convert_to_tensor(x, dtype_hint=y.dtype)
    return x, y


def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs, name or op_type).outputs[0]


# --------------------------------------------------------------------------- kernels
def _quiet(fn):
    """fn under np.errstate(all="ignore"): inf/nan results are TF's silent answer."""
    def kernel(*arrays, **attrs):
        with np.errstate(all="ignore"):
            return fn(*arrays, **attrs)
    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


def _broadcasting(fn):
    """A binary kernel that reports TF's run-time error when shapes do not broadcast."""
    def kernel(x, y):
        try:
            np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            raise KernelError(f"Incompatible shapes: {_dims_str(x.shape)} vs. "
                              f"{_dims_str(y.shape)}") from None
        with np.errstate(all="ignore"):
            return fn(x, y)
    return kernel


def _is_int(a):
    return a.dtype.kind in "iu"


def _check_int_divisor(x, y):
    # only divisors that meet a dividend count: TF computes nothing for an empty result
    # (x % rank(x) over the empty axes of a scalar)
    if _is_int(x) and np.broadcast(x, y).size and np.any(y == 0):
        raise KernelError("Integer division by zero")


def _sigmoid_kernel(x):
    # exp(-|x|) never overflows; each branch is exact on its own side of 0
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _libm_kernel(fn):
    """An elementwise kernel from a double function of Python's math module (NumPy has no
    erf/erfc); float32/16 results are the double value rounded."""
    scalar = np.frompyfunc(fn, 1, 1)

    def kernel(x):
        values = scalar(np.asarray(x, dtype=np.float64))
        return np.asarray(values, dtype=np.float64).astype(x.dtype)
    return kernel


def _floordiv_kernel(x, y):
    _check_int_divisor(x, y)
    # TF floors the true quotient for floats (np.floor_divide uses fmod: 1 // 0.1 == 9)
    return np.floor_divide(x, y) if _is_int(x) else np.floor(x / y)


def _floormod_kernel(x, y):
    _check_int_divisor(x, y)
    return np.mod(x, y)  # Python's sign rule (result has the sign of y), as TF's FloorMod


def _pow_kernel(x, y):
    if _is_int(y) and np.any(y < 0):
        raise KernelError("Integers to negative integer powers are not allowed")
    return np.power(x, y)


def _select_kernel(cond, x, y):
    if x.shape != y.shape:
        raise KernelError(f"'then' and 'else' must have the same size.  but are "
                          f"{_dims_str(x.shape)} and {_dims_str(y.shape)}")
    if cond.ndim == 0 or cond.shape == x.shape:
        return np.where(cond, x, y)
    if cond.ndim == 1 and x.ndim >= 1 and cond.shape[0] == x.shape[0]:
        return np.where(cond.reshape((-1,) + (1,) * (x.ndim - 1)), x, y)
    raise KernelError(f"'cond' must be a scalar, a vector of size {x.shape[0] if x.ndim else 1} "
                      f"or have the shape of 'then' {_dims_str(x.shape)}, but has shape "
                      f"{_dims_str(cond.shape)}")


def _add_n_kernel(*arrays):
    for i, a in enumerate(arrays[1:], 1):
        if a.shape != arrays[0].shape:
            raise KernelError(f"Inputs to operation AddN must have the same size and shape.  "
                              f"Input 0: {_dims_str(arrays[0].shape)} != input {i}: "
                              f"{_dims_str(a.shape)}")
    total = arrays[0].copy()
    with np.errstate(all="ignore"):
        for a in arrays[1:]:
            total += a
    return total


def _cast_kernel(x, DstT):
    # astype truncates floats toward zero, like C++ static_cast in TF's Cast
    with np.errstate(all="ignore"):
        return x.astype(DstT.np)


# --------------------------------------------------------------------- unary op table
def _zeros_like(t):
    from graphc.ops.array_ops import zeros_like
    return zeros_like(t)


def _ones_like(t):
    from graphc.ops.array_ops import ones_like
    return ones_like(t)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

# op type: (NumPy kernel, allowed dtypes, grad(x, y, dy) -> dx or None)
# Gradients are written with graphc ops on x, the output y and dy, so they differentiate again.
# Sign's gradient is zeros and Floor/Ceil/Round's is None, as TF registers them.
_UNARY = {
    "Neg": (np.negative, NUMERIC, lambda x, y, g: -g),
    "Abs": (np.abs, NUMERIC, lambda x, y, g: g * sign(x)),
    "Sign": (np.sign, NUMERIC, lambda x, y, g: _zeros_like(x)),
    "Square": (np.square, NUMERIC, lambda x, y, g: g * (2.0 * x)),
    "Sqrt": (np.sqrt, FLOATS, lambda x, y, g: g * 0.5 / y),
    "Rsqrt": (lambda x: 1 / np.sqrt(x), FLOATS, lambda x, y, g: g * (-0.5 * y * y * y)),
    "Reciprocal": (lambda x: 1 / x, FLOATS, lambda x, y, g: -g * y * y),
    "Exp": (np.exp, FLOATS, lambda x, y, g: g * y),
    "Log": (np.log, FLOATS, lambda x, y, g: g * reciprocal(x)),
    "Log1p": (np.log1p, FLOATS, lambda x, y, g: g * reciprocal(1.0 + x)),
    "Expm1": (np.expm1, FLOATS, lambda x, y, g: g * exp(x)),
    "Tanh": (np.tanh, FLOATS, lambda x, y, g: g * (1.0 - y * y)),
    "Sigmoid": (_sigmoid_kernel, FLOATS, lambda x, y, g: g * y * (1.0 - y)),
    "Sin": (np.sin, FLOATS, lambda x, y, g: g * cos(x)),
    "Cos": (np.cos, FLOATS, lambda x, y, g: -g * sin(x)),
    "Floor": (np.floor, FLOATS, lambda x, y, g: None),
    "Ceil": (np.ceil, FLOATS, lambda x, y, g: None),
    "Round": (np.round, NUMERIC, lambda x, y, g: None),  # np.round: half to even
    "Erf": (_libm_kernel(math.erf), FLOATS,
            lambda x, y, g: g * _TWO_OVER_SQRT_PI * exp(-square(x))),
    "Erfc": (_libm_kernel(math.erfc), FLOATS,
             lambda x, y, g: g * -_TWO_OVER_SQRT_PI * exp(-square(x))),
}


def _unary_infer(allowed):
    def infer(inputs, attrs):
        _check_allowed(inputs[0].dtype, allowed)
        return inputs[0].shape, inputs[0].dtype
    return infer


def _unary_grad(fn):
    return lambda op, g: [fn(op.inputs[0], op.outputs[0], g)]


def _unary_function(op_type, public_name):
    def fn(x, name=None):
        x = convert_to_tensor(x)
        return _create(op_type, [x], name=name)
    fn.__name__ = fn.__qualname__ = public_name
    fn.__doc__ = f"Elementwise {public_name} (op {op_type})."
    return fn


# activations that fuse into a MatMul/Conv2D epilogue (nn_ops has the others)
_EPILOGUE = ("Tanh", "Sigmoid")
for _type, (_kernel, _allowed, _grad) in _UNARY.items():
    register_op(_type, infer=_unary_infer(_allowed), kernel=_quiet(_kernel),
                grad=_unary_grad(_grad), kind="elementwise", epilogue=_type in _EPILOGUE)

negative = _unary_function("Neg", "negative")
abs = _unary_function("Abs", "abs")  # noqa: A001 - TF's name
sign = _unary_function("Sign", "sign")
square = _unary_function("Square", "square")
sqrt = _unary_function("Sqrt", "sqrt")
rsqrt = _unary_function("Rsqrt", "rsqrt")
reciprocal = _unary_function("Reciprocal", "reciprocal")
exp = _unary_function("Exp", "exp")
log = _unary_function("Log", "log")
log1p = _unary_function("Log1p", "log1p")
expm1 = _unary_function("Expm1", "expm1")
tanh = _unary_function("Tanh", "tanh")
sigmoid = _unary_function("Sigmoid", "sigmoid")
sin = _unary_function("Sin", "sin")
cos = _unary_function("Cos", "cos")
floor = _unary_function("Floor", "floor")
ceil = _unary_function("Ceil", "ceil")
erf = _unary_function("Erf", "erf")
erfc = _unary_function("Erfc", "erfc")


def round(x, name=None):  # noqa: A001 - TF's name
    """Rounds half to even, as TF; integers are returned unchanged."""
    x = convert_to_tensor(x)
    if x.dtype.is_integer:
        return x
    return _create("Round", [x], name=name)


register_op("LogicalNot", infer=_unary_infer(BOOLS), kernel=np.logical_not, kind="elementwise")
not_differentiable("LogicalNot")


def _float_test_infer(inputs, attrs):
    """IsNan, IsInf, IsFinite: a float tensor in, a bool tensor of its shape out."""
    _check_allowed(inputs[0].dtype, FLOATS)
    return inputs[0].shape, dtypes.bool


for _type, _kernel in (("IsNan", np.isnan), ("IsInf", np.isinf), ("IsFinite", np.isfinite)):
    register_op(_type, infer=_float_test_infer, kernel=_kernel, kind="elementwise")
not_differentiable("IsNan", "IsInf", "IsFinite")


def is_nan(x, name=None):
    return _create("IsNan", [convert_to_tensor(x)], name=name)


def is_inf(x, name=None):
    return _create("IsInf", [convert_to_tensor(x)], name=name)


def is_finite(x, name=None):
    return _create("IsFinite", [convert_to_tensor(x)], name=name)


# -------------------------------------------------------------------- binary op table
def _add_grad(x, y, z, g):
    return g, g


def _sub_grad(x, y, z, g):
    return g, -g


def _mul_grad(x, y, z, g):
    return g * y, x * g


def _realdiv_grad(x, y, z, g):
    return g / y, g * (-x / y / y)


def _floormod_grad(x, y, z, g):
    return g, g * negative(floordiv(x, y))


def _pow_grad(x, y, z, g):
    gx = g * y * pow(x, y - 1.0)
    # log(x) is only taken where x > 0 so that x == 0 gives a 0 (not nan) exponent gradient
    positive = greater(x, 0.0)
    safe_x = where(positive, x, _ones_like(x))
    log_x = where(positive, log(safe_x), _zeros_like(x))
    return gx, g * z * log_x


def _selecting_grad(choose_x):
    """Maximum/Minimum: the gradient goes to the selected side, to x on ties (as TF)."""
    def grad(x, y, z, g):
        x_chosen = choose_x(x, y)
        zeros = _zeros_like(g)
        return where(x_chosen, g, zeros), where(x_chosen, zeros, g)
    return grad


def _squared_difference_grad(x, y, z, g):
    gx = g * (2.0 * (x - y))
    return gx, -gx


def _no_grad(x, y, z, g):
    return None, None


# op type: (NumPy kernel, allowed dtypes, grad(x, y, z, dz) -> (dx, dy) before unbroadcast)
_BINARY = {
    "Add": (np.add, NUMERIC, _add_grad),
    "Sub": (np.subtract, NUMERIC, _sub_grad),
    "Mul": (np.multiply, NUMERIC, _mul_grad),
    "RealDiv": (np.true_divide, FLOATS, _realdiv_grad),
    "FloorDiv": (_floordiv_kernel, NUMERIC, _no_grad),
    "FloorMod": (_floormod_kernel, NUMERIC, _floormod_grad),
    "Pow": (_pow_kernel, NUMERIC, _pow_grad),
    "Maximum": (np.maximum, NUMERIC, _selecting_grad(lambda x, y: greater_equal(x, y))),
    "Minimum": (np.minimum, NUMERIC, _selecting_grad(lambda x, y: less_equal(x, y))),
    "SquaredDifference": (lambda x, y: np.square(x - y), NUMERIC, _squared_difference_grad),
}

# op type: (NumPy kernel, allowed dtypes); the result is bool and has no gradient
_PREDICATES = {
    # strings compare too, as TF's (an op reading a string runs on the host)
    "Equal": (np.equal, NON_STRING + (dtypes.string,)),
    "NotEqual": (np.not_equal, NON_STRING + (dtypes.string,)),
    "Less": (np.less, NUMERIC),
    "LessEqual": (np.less_equal, NUMERIC),
    "Greater": (np.greater, NUMERIC),
    "GreaterEqual": (np.greater_equal, NUMERIC),
    "LogicalAnd": (np.logical_and, BOOLS),
    "LogicalOr": (np.logical_or, BOOLS),
}


def _binary_infer(op_type, allowed, out_dtype=None):
    def infer(inputs, attrs):
        x, y = inputs
        _check_same_dtype(op_type, x, "x", y, "y")
        _check_allowed(x.dtype, allowed)
        return _broadcast_static(x.shape, y.shape), out_dtype or x.dtype
    return infer


def _binary_grad(fn):
    def grad(op, g):
        x, y = op.inputs
        gx, gy = fn(x, y, op.outputs[0], g)
        return [None if gx is None else unbroadcast(gx, x),
                None if gy is None else unbroadcast(gy, y)]
    return grad


def _binary_function(op_type, public_name):
    def fn(x, y, name=None):
        x, y = _convert_pair(x, y)
        return _create(op_type, [x, y], name=name)
    fn.__name__ = fn.__qualname__ = public_name
    fn.__doc__ = f"Elementwise {public_name} with NumPy broadcasting (op {op_type})."
    return fn


for _type, (_kernel, _allowed, _grad) in _BINARY.items():
    register_op(_type, infer=_binary_infer(_type, _allowed), kernel=_broadcasting(_kernel),
                grad=_binary_grad(_grad), kind="elementwise", broadcasting=True)
for _type, (_kernel, _allowed) in _PREDICATES.items():
    register_op(_type, infer=_binary_infer(_type, _allowed, dtypes.bool),
                kernel=_broadcasting(_kernel), kind="elementwise", broadcasting=True)
not_differentiable(*_PREDICATES)

add = _binary_function("Add", "add")
subtract = _binary_function("Sub", "subtract")
multiply = _binary_function("Mul", "multiply")
floormod = mod = _binary_function("FloorMod", "floormod")
pow = _binary_function("Pow", "pow")  # noqa: A001 - TF's name
maximum = _binary_function("Maximum", "maximum")
minimum = _binary_function("Minimum", "minimum")
squared_difference = _binary_function("SquaredDifference", "squared_difference")
equal = _binary_function("Equal", "equal")
not_equal = _binary_function("NotEqual", "not_equal")
less = _binary_function("Less", "less")
less_equal = _binary_function("LessEqual", "less_equal")
greater = _binary_function("Greater", "greater")
greater_equal = _binary_function("GreaterEqual", "greater_equal")
logical_and = _binary_function("LogicalAnd", "logical_and")
logical_or = _binary_function("LogicalOr", "logical_or")


def logical_not(x, name=None):
    return _create("LogicalNot", [convert_to_tensor(x)], name=name)


def logical_xor(x, y, name="LogicalXor"):
    """x ^ y, built as TF1 does: (x | y) & ~(x & y)."""
    x, y = _convert_pair(x, y)
    return logical_and(logical_or(x, y), logical_not(logical_and(x, y)), name=name)


# ------------------------------------------------------------------------- division
# TF1's truediv casts small integers to float32 and 32/64-bit ones to float64
_TRUEDIV_DTYPE = {
    dtypes.uint8: dtypes.float32, dtypes.int8: dtypes.float32, dtypes.int16: dtypes.float32,
    dtypes.int32: dtypes.float64, dtypes.int64: dtypes.float64,
    dtypes.float16: None, dtypes.float32: None, dtypes.float64: None,
}


def truediv(x, y, name=None):
    """x / y in floating point (RealDiv); integer inputs are cast first (TF1's table)."""
    with name_scope(name, "truediv", [x, y]) as scope:
        x, y = _convert_pair(x, y)
        if x.dtype != y.dtype:
            raise TypeError(f"x and y must have the same dtype, got {x.dtype!r} != {y.dtype!r}")
        if x.dtype not in _TRUEDIV_DTYPE:
            raise TypeError(f"Invalid dtype {x.dtype!r} in __truediv__")
        target = _TRUEDIV_DTYPE[x.dtype]
        if target is not None:
            x, y = cast(x, target), cast(y, target)
        return _create("RealDiv", [x, y], name=scope)


def divide(x, y, name=None):
    """x / y: TF1's divide is Python 3 division, i.e. truediv."""
    return truediv(x, y, name=name)


def div(x, y, name=None):
    """TF1's deprecated Python 2 division: RealDiv for floats, FloorDiv for integers."""
    with name_scope(name, "div", [x, y]) as scope:
        x, y = _convert_pair(x, y)
        if x.dtype != y.dtype:
            raise TypeError(f"x and y must have the same dtype, got {x.dtype!r} != {y.dtype!r}")
        return _create("RealDiv" if x.dtype.is_floating else "FloorDiv", [x, y], name=scope)


def floordiv(x, y, name=None):
    """floor(x / y) elementwise (FloorDiv); Python's rounding for negative integers."""
    with name_scope(name, "floordiv", [x, y]) as scope:
        x, y = _convert_pair(x, y)
        return _create("FloorDiv", [x, y], name=scope)


# ----------------------------------------------------------------------- Select, Where
def _select_infer(inputs, attrs):
    cond, x, y = inputs
    _check_allowed(cond.dtype, BOOLS, "condition")
    _check_same_dtype("Select", x, "t", y, "e")
    data = _merge_shapes(x.shape, y.shape)
    c_rank, d_rank = cond.shape.ndims, data.ndims
    if c_rank is None or d_rank is None or c_rank == 0:
        return data, x.dtype
    if c_rank == 1 and d_rank >= 1:  # a vector picks whole rows of x or y
        _merge_shapes(cond.shape, TensorShape([data[0]]))
        return data, x.dtype
    return _merge_shapes(data, cond.shape), x.dtype


def _select_grad(op, g):
    cond, x = op.inputs[0], op.inputs[1]
    zeros = _zeros_like(x)
    return [None, where(cond, g, zeros), where(cond, zeros, g)]


def _where_infer(inputs, attrs):
    _check_allowed(inputs[0].dtype, NON_STRING, "input")
    return TensorShape([None, inputs[0].shape.ndims]), dtypes.int64


register_op("Select", infer=_select_infer, kernel=_select_kernel, grad=_select_grad,
            kind="elementwise")
# host-only: the indices form's row count depends on the data, and compiled code allocates
# its fetches from the dims before it runs
register_op("Where", infer=_where_infer, kernel=lambda c: np.argwhere(c).astype(np.int64),
            kind="opaque", host_only=True)
not_differentiable("Where")


def where(condition, x=None, y=None, name=None):
    """TF1's where: with x and y, elements (or rows, for a vector condition) of x where
    condition is true, else of y (Select); alone, the [N, rank] int64 indices of the true
    elements of condition (Where)."""
    if (x is None) != (y is None):
        raise ValueError("x and y must both be non-None or both be None.")
    if x is None:
        return _create("Where", [convert_to_tensor(condition, dtype_hint=dtypes.bool)], name=name)
    x, y = _convert_pair(x, y)
    with x.graph.as_default():
        condition = convert_to_tensor(condition, dtype_hint=dtypes.bool)
    return _create("Select", [condition, x, y], name=name)


# --------------------------------------------------------------------- clip, AddN, Cast
def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """min(max(t, lo), hi) elementwise; the bounds broadcast to t but may not grow it."""
    with name_scope(name, "clip_by_value", [t, clip_value_min, clip_value_max]) as scope:
        t = convert_to_tensor(t)
        below_max = minimum(t, clip_value_max)
        t.shape.merge_with(below_max.shape)
        clipped = maximum(below_max, clip_value_min, name=scope)
        t.shape.merge_with(clipped.shape)
        return clipped


def _add_n_infer(inputs, attrs):
    if not inputs:
        raise ValueError("AddN needs at least one input")
    shape = inputs[0].shape
    for i, t in enumerate(inputs[1:], 1):
        _check_same_dtype("AddN", inputs[0], "inputs[0]", t, f"inputs[{i}]")
        shape = _merge_shapes(shape, t.shape)
    _check_allowed(inputs[0].dtype, NUMERIC, "inputs")
    return shape, inputs[0].dtype


register_op("AddN", infer=_add_n_infer, kernel=_add_n_kernel, kind="elementwise",
            grad=lambda op, g: [g] * len(op.inputs))


def add_n(inputs, name=None):
    """The elementwise sum of a list of tensors of one dtype and shape (no broadcasting)."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError("inputs must be a list of at least one Tensor with the same dtype "
                         "and shape")
    hint = next((convert_to_tensor(v).dtype for v in inputs if _is_tensor_like(v)), None)
    tensors = [convert_to_tensor(v, dtype_hint=hint) for v in inputs]
    if len(tensors) == 1:
        if name:
            from graphc.ops.control_flow_ops import identity
            return identity(tensors[0], name=name)
        return tensors[0]
    return _create("AddN", tensors, name=name)


def _cast_infer(inputs, attrs):
    src, dst = inputs[0].dtype, attrs["DstT"]
    if dtypes.string in (src, dst):
        raise TypeError(f"Cast {src.name} to {dst.name} is not supported")
    return inputs[0].shape, dst


def _cast_grad(op, g):
    src = op.inputs[0].dtype
    # only float -> float casts pass a gradient (TF's _CastGrad)
    return [cast(g, src) if src.is_floating and g.dtype.is_floating else None]


register_op("Cast", infer=_cast_infer, kernel=_cast_kernel, grad=_cast_grad,
            kind="elementwise")


def cast(x, dtype, name=None):
    """x converted to `dtype`; floats to integers truncate toward zero. A tensor that
    already has the dtype is returned as is."""
    dtype = dtypes.as_dtype(dtype)
    if isinstance(x, Tensor) and x.dtype == dtype:
        return x
    with name_scope(name, "Cast", [x]) as scope:
        x = convert_to_tensor(x)
        if x.dtype == dtype:
            return x
        return _create("Cast", [x], {"DstT": dtype}, name=scope)


def to_float(x, name="ToFloat"):
    return cast(x, dtypes.float32, name=name)


def to_int32(x, name="ToInt32"):
    return cast(x, dtypes.int32, name=name)


def to_int64(x, name="ToInt64"):
    return cast(x, dtypes.int64, name=name)


def saturate_cast(value, dtype, name=None):
    """`value` cast to `dtype`, first clamped to dtype's range so that no value wraps."""
    dtype = dtypes.as_dtype(dtype)
    with name_scope(name, "saturate_cast", [value]):
        value = convert_to_tensor(value, name="value")
        if value.dtype.min < dtype.min:
            value = maximum(value, convert_to_tensor(dtype.min, dtype=value.dtype))
        if value.dtype.max > dtype.max:
            value = minimum(value, _largest_below(dtype.max, value.dtype))
        return cast(value, dtype)


def _largest_below(limit, dtype):
    """`limit` (an integer dtype's max) in `dtype`, rounded down where dtype cannot hold it
    exactly (int32's max is 2**31 in float32, which would wrap when cast back)."""
    if dtype.is_floating:
        v = np.asarray(limit, dtype.as_numpy_dtype)
        if int(v) > limit:
            v = np.nextafter(v, np.asarray(0, dtype.as_numpy_dtype))
        return convert_to_tensor(v, dtype=dtype)
    return convert_to_tensor(limit, dtype=dtype)
