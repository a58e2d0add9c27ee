"""Neural-network ops of gc.nn: activations, softmax, bias_add, dropout, losses, embeddings.

Ops with a natural dedicated kernel (the activations, Softmax/LogSoftmax, BiasAdd, L2Loss,
the fused sparse cross entropy) are registered here; their gradients are built from graph
ops (where/greater/...) so that second derivatives work. Everything else is a composite
of math/array/reduction ops, as in TF.
"""
import numbers

import numpy as np

from graphc import dtypes, errors
from graphc.framework.graph import Tensor, name_scope
from graphc.framework.op_def import register_op
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops, random_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.math_ops import sigmoid, tanh
from kernels.activation_constants import SELU_ALPHA, SELU_SCALE

__all__ = [
    "relu", "relu6", "leaky_relu", "elu", "selu", "softplus", "softsign", "sigmoid", "tanh",
    "gelu", "softmax", "log_softmax", "bias_add", "dropout",
    "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "sigmoid_cross_entropy_with_logits", "l2_loss",
    "l2_normalize", "moments", "batch_normalization", "fused_batch_norm", "embedding_lookup",
]



def _scalar(value, like):
    return constant(value, dtype=like.dtype)


def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs, name or op_type).outputs[0]


def _check_dtype(t, allowed, what):
    if not any(t.dtype == a for a in allowed):
        names = ", ".join(a.name for a in allowed)
        raise TypeError(f"Value passed to parameter '{what}' has DataType {t.dtype.name} not in "
                        f"list of allowed values: {names}")


_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
_REALS = _FLOATS + (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8)
_INDICES = (dtypes.int32, dtypes.int64)


# ----------------------------------------------------------------------------- activations
# Each gradient is (x, y, g, attrs) -> dx, built from graph ops. Where the output says
# as much as the input (relu(x) > 0 exactly when x > 0, NaN included), the gradient reads
# the output, as TF's ReluGrad does: then the forward pass need not keep its input (a conv
# or matmul epilogue writes only the activation).

def _relu_grad(x, y, g, a):
    return math_ops.where(math_ops.greater(y, _scalar(0, y)), g, array_ops.zeros_like(g))


def _relu6_grad(x, y, g, a):
    inside = math_ops.logical_and(math_ops.greater(y, _scalar(0, y)),
                                  math_ops.less(y, _scalar(6, y)))
    return math_ops.where(inside, g, array_ops.zeros_like(g))


def _leaky_relu_grad(x, y, g, a):
    return math_ops.where(math_ops.greater(x, _scalar(0, x)), g,
                          math_ops.multiply(g, _scalar(a["alpha"], g)))


def _elu_grad(x, y, g, a):
    # TF's EluGrad: y < 0 ? dy * (y + 1) : dy, with d/dx (exp(x) - 1) = y + 1; at x = 0 (and
    # for a nan y) it takes the dy branch
    return math_ops.where(math_ops.less(y, _scalar(0, y)),
                          math_ops.multiply(g, math_ops.add(y, _scalar(1, y))), g)


def _selu_grad(x, y, g, a):
    # TF's SeluGrad: y < 0 ? dy * (y + scale * alpha) : dy * scale, with d/dx scale * alpha *
    # (exp(x) - 1) = y + scale * alpha; at x = 0 it takes the linear branch (scale)
    negative = math_ops.multiply(g, math_ops.add(y, _scalar(SELU_SCALE * SELU_ALPHA, y)))
    return math_ops.where(math_ops.less(y, _scalar(0, y)), negative,
                          math_ops.multiply(g, _scalar(SELU_SCALE, g)))


def _softsign_grad(x, y, g, a):
    return math_ops.divide(g, math_ops.square(math_ops.add(math_ops.abs(x), _scalar(1, x))))


def _elu_kernel(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _softplus_kernel(x):
    return np.logaddexp(np.zeros((), x.dtype), x)


# op type -> (public name, NumPy kernel, allowed dtypes, gradient)
_ACTIVATIONS = {
    "Relu": ("relu", lambda x: np.maximum(x, 0).astype(x.dtype), _REALS, _relu_grad),
    "Relu6": ("relu6", lambda x: np.clip(x, 0, 6).astype(x.dtype), _REALS, _relu6_grad),
    "LeakyRelu": ("leaky_relu", lambda x, alpha: np.where(x > 0, x, x * x.dtype.type(alpha)),
                  _FLOATS, _leaky_relu_grad),
    "Elu": ("elu", _elu_kernel, _FLOATS, _elu_grad),
    "Selu": ("selu", lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * _elu_kernel(x)),
             _FLOATS, _selu_grad),
    "Softplus": ("softplus", _softplus_kernel, _FLOATS,
                 lambda x, y, g, a: math_ops.multiply(g, sigmoid(x))),
    "Softsign": ("softsign", lambda x: x / (1 + np.abs(x)), _FLOATS, _softsign_grad),
}


def _activation_infer(allowed):
    def infer(inputs, a):
        _check_dtype(inputs[0], allowed, "features")
        return inputs[0].shape, inputs[0].dtype
    return infer


def _activation_grad(grad_fn):
    def grad(op, g):
        return [grad_fn(op.inputs[0], op.outputs[0], g, op.attrs)]
    return grad


def _activation_function(op_type):
    def activation(features, name=None):
        x = convert_to_tensor(features)
        return _create(op_type, [x], name=name)
    activation.__name__ = _ACTIVATIONS[op_type][0]
    activation.__doc__ = f"Elementwise {op_type} of `features` (gc.nn.{activation.__name__})."
    return activation


for _type, (_public, _kernel, _allowed, _grad) in _ACTIVATIONS.items():
    register_op(_type, infer=_activation_infer(_allowed), kernel=_kernel,
                grad=_activation_grad(_grad), kind="elementwise", epilogue=True)
    if _type != "LeakyRelu":
        globals()[_public] = _activation_function(_type)


def leaky_relu(features, alpha=0.2, name=None):
    """max(features, alpha * features); integer features are cast to float32 as in TF."""
    x = convert_to_tensor(features)
    if x.dtype.is_integer:
        x = math_ops.cast(x, dtypes.float32)
    return _create("LeakyRelu", [x], {"alpha": float(alpha)}, name)


def gelu(features, approximate=False, name=None):
    """x * Phi(x) (TF2's gelu), or its tanh approximation 0.5 x (1 + tanh(z)),
    z = sqrt(2/pi) (x + 0.044715 x^3).

    TF writes them 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(z)); here they are
    0.5 x erfc(-x / sqrt 2) and x sigmoid(2z), the same functions: they agree with TF's to
    a few ulps for x > -1, but 1 + erf and 1 + tanh cancel for negative x (at x = -6 only 8
    of float64's 16 digits are left, and below about -8.3 TF's exact form gives 0 where the
    value is about 1e-16), which erfc and sigmoid do not."""
    with name_scope(name, "Gelu", [features]):
        x = convert_to_tensor(features)
        if approximate:
            cubic = math_ops.multiply(_scalar(0.044715, x), math_ops.pow(x, _scalar(3, x)))
            two_z = math_ops.multiply(_scalar(2 * np.sqrt(2.0 / np.pi), x), math_ops.add(x, cubic))
            return math_ops.multiply(x, sigmoid(two_z))
        half_x = math_ops.multiply(_scalar(0.5, x), x)
        scaled = math_ops.divide(math_ops.negative(x), _scalar(np.sqrt(2.0), x))
        return math_ops.multiply(half_x, math_ops.erfc(scaled))


# ----------------------------------------------------------------------------- softmax
def _softmax_infer(inputs, a):
    x = inputs[0]
    _check_dtype(x, _FLOATS, "logits")
    if x.shape.ndims == 0:
        raise ValueError("Shape must be at least rank 1 but is rank 0")
    return x.shape, x.dtype


def _row_max(x, axis):
    # rows of length 0 (logits of shape [n, 0]) have no max: their softmax is empty, as TF's
    return np.max(x, axis=axis, keepdims=True, initial=-np.inf)


def _softmax_kernel(x, axis):
    e = np.exp(x - _row_max(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_kernel(x, axis):
    if x.shape[axis] == 0:
        return x.copy()   # (the row sums would be log(0): no rows, nothing to warn of)
    shifted = x - _row_max(x, axis)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _sum_keep(x, axis):
    return reduction_ops.reduce_sum(x, axis=axis, keepdims=True)


def _softmax_grad(op, g):
    y, axis = op.outputs[0], op.attrs["axis"]
    return [math_ops.multiply(math_ops.subtract(g, _sum_keep(math_ops.multiply(g, y), axis)), y)]


def _log_softmax_grad(op, g):
    y, axis = op.outputs[0], op.attrs["axis"]
    return [math_ops.subtract(g, math_ops.multiply(_sum_keep(g, axis), math_ops.exp(y)))]


register_op("Softmax", infer=_softmax_infer, kernel=_softmax_kernel, grad=_softmax_grad,
            kind="reduction")
register_op("LogSoftmax", infer=_softmax_infer, kernel=_log_softmax_kernel,
            grad=_log_softmax_grad, kind="reduction")


def _pick_axis(axis, dim, default=-1):
    if axis is not None and dim is not None:
        raise ValueError("Cannot specify both 'axis' and 'dim'")
    axis = dim if axis is None else axis
    return default if axis is None else axis


def _static_axis(axis, x):
    """`axis` as a Python int; InvalidArgumentError at construction when out of range (TF1)."""
    if isinstance(axis, Tensor):
        value = constant_value(axis)
        if value is None:
            raise ValueError("axis must be known at graph-construction time")
        axis = value
    axis = int(axis)
    ndims = x.shape.ndims
    if ndims is not None and ndims > 0 and not -ndims <= axis < ndims:
        raise errors.InvalidArgumentError(
            None, None, f"Dimension ({axis}) must be in the range [{-ndims}, {ndims}) where "
                        f"{ndims} is the number of dimensions in the input.")
    return axis


def _softmax_op(op_type, logits, axis, name):
    x = convert_to_tensor(logits)
    return _create(op_type, [x], {"axis": _static_axis(axis, x)}, name)


def softmax(logits, axis=None, name=None, dim=None):
    """exp(logits) / sum(exp(logits), axis), computed stably."""
    return _softmax_op("Softmax", logits, _pick_axis(axis, dim), name)


def log_softmax(logits, axis=None, name=None, dim=None):
    """logits - log(sum(exp(logits), axis)), computed stably."""
    return _softmax_op("LogSoftmax", logits, _pick_axis(axis, dim), name)


# ----------------------------------------------------------------------------- bias_add
def _channel_axis(data_format):
    return 1 if data_format == "NCHW" else -1


def _bias_add_infer(inputs, a):
    value, bias = inputs
    nchw = a["data_format"] == "NCHW"
    min_rank = 3 if nchw else 2
    if value.shape.ndims is not None and value.shape.ndims < min_rank:
        raise ValueError(f"Shape must be at least rank {min_rank} but is rank {value.shape.ndims}")
    if bias.shape.ndims is not None and bias.shape.ndims != 1:
        raise ValueError(f"Shape must be rank 1 but is rank {bias.shape.ndims}")
    if value.dtype != bias.dtype:
        raise TypeError(f"Input 'bias' of 'BiasAdd' Op has type {bias.dtype.name} that does not "
                        f"match type {value.dtype.name} of argument 'value'.")
    if value.shape.ndims is None:
        return value.shape, value.dtype
    dims = value.shape.as_list()
    axis = _channel_axis(a["data_format"])
    channels = dims[axis]
    n = bias.shape[0].value if bias.shape.ndims == 1 else None
    if channels is not None and n is not None and channels != n:
        raise ValueError(f"Dimensions must be equal, but are {channels} and {n}")
    dims[axis] = channels if channels is not None else n
    return TensorShape(dims), value.dtype


def _bias_shape(value, data_format):
    """The shape `bias` broadcasts as against `value`."""
    return (-1,) + (1,) * (value.ndim - 2) if data_format == "NCHW" else (-1,)


def _bias_add_kernel(value, bias, data_format):
    channels = value.shape[_channel_axis(data_format)]
    if bias.shape != (channels,):
        raise errors.KernelError(f"Must provide as many biases as the channel dimension of the "
                                 f"input tensor: {list(bias.shape)} vs. {list(value.shape)}")
    return value + bias.reshape(_bias_shape(value, data_format))


def _bias_add_grad(op, g):
    fmt = op.attrs["data_format"]
    return [g, _create("BiasAddGrad", [g], {"data_format": fmt})]


def _bias_add_grad_infer(inputs, a):
    g = inputs[0]
    if g.shape.ndims is None:
        return TensorShape([None]), g.dtype
    return TensorShape([g.shape[_channel_axis(a["data_format"])].value]), g.dtype


def _bias_add_grad_kernel(g, data_format):
    axis = _channel_axis(data_format) % g.ndim
    return np.sum(g, axis=tuple(i for i in range(g.ndim) if i != axis))


def _bias_add_grad_grad(op, gg):
    # BiasAddGrad sums over all but the channel axis; its adjoint broadcasts gg back.
    g = op.inputs[0]
    return [bias_add(array_ops.zeros_like(g), gg, data_format=op.attrs["data_format"])]


register_op("BiasAdd", infer=_bias_add_infer, kernel=_bias_add_kernel, grad=_bias_add_grad,
            kind="elementwise")
register_op("BiasAddGrad", infer=_bias_add_grad_infer, kernel=_bias_add_grad_kernel,
            grad=_bias_add_grad_grad, kind="reduction")


def _normalize_data_format(data_format):
    if data_format is None:
        return "NHWC"
    if data_format.startswith("NC"):
        return "NCHW"
    if data_format.startswith("N") and data_format.endswith("C"):
        return "NHWC"
    raise ValueError("data_format must be of the form `N...C` or `NC...`")


def bias_add(value, bias, data_format=None, name=None):
    """value + bias, with the 1-D bias along the channel axis (last for NHWC, 1 for NCHW)."""
    fmt = _normalize_data_format(data_format)
    with name_scope(name, "BiasAdd", [value, bias]) as scope:
        value = convert_to_tensor(value)
        bias = convert_to_tensor(bias, dtype_hint=value.dtype)
        return _create("BiasAdd", [value, bias], {"data_format": fmt}, scope)


# ----------------------------------------------------------------------------- dropout
def _noise_shape(x, noise_shape):
    if noise_shape is None:
        if x.shape.is_fully_defined():
            return x.shape.as_list()
        return array_ops.shape(x)
    if isinstance(noise_shape, (list, tuple)) and any(d is None for d in noise_shape):
        # TF fills unknown entries from x's static shape
        dims = x.shape.as_list() if x.shape.ndims == len(noise_shape) else None
        if dims is None:
            raise ValueError(f"noise_shape {noise_shape} has unknown entries that cannot be "
                             f"taken from x of shape {x.shape}")
        return [d if d is not None else dims[i] for i, d in enumerate(noise_shape)]
    return noise_shape


def _check_probability(value, what, low_open):
    ok = (0 < value <= 1) if low_open else (0 <= value < 1)
    if not ok:
        interval = "(0, 1]" if low_open else "[0, 1)"
        raise ValueError(f"{what} must be a scalar tensor or a float in the range {interval}, "
                         f"got {value:g}")


def _as_probability(value, x, what):
    """A Python number stays one; anything else becomes a scalar tensor of x's dtype."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    t = convert_to_tensor(value, dtype=x.dtype, name=what)
    t.shape.assert_has_rank(0)
    known = constant_value(t)
    return float(known) if known is not None else t


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """Keeps each element with probability keep_prob (= 1 - rate), scaled by 1/keep_prob."""
    if keep_prob is not None and rate is not None:
        raise ValueError("Cannot specify both 'keep_prob' and 'rate'")
    if keep_prob is None and rate is None:
        raise ValueError("You must provide a rate to dropout.")
    with name_scope(name, "dropout", [x]):
        x = convert_to_tensor(x, name="x")
        if not x.dtype.is_floating:
            raise ValueError("x has to be a floating point tensor since it's going to be scaled. "
                             f"Got a {x.dtype.name} tensor instead.")
        if keep_prob is not None:
            keep = _as_probability(keep_prob, x, "keep_prob")
            if isinstance(keep, float):
                _check_probability(keep, "keep_prob", low_open=True)
        else:
            r = _as_probability(rate, x, "rate")
            if isinstance(r, float):
                _check_probability(r, "rate", low_open=False)
            keep = 1.0 - r if isinstance(r, float) else math_ops.subtract(_scalar(1, x), r)
        if isinstance(keep, float) and keep == 1.0:
            return x
        uniform = random_ops.random_uniform(_noise_shape(x, noise_shape), seed=seed,
                                            dtype=x.dtype)
        keep_t = _scalar(keep, x) if isinstance(keep, float) else keep
        mask = math_ops.cast(math_ops.less(uniform, keep_t), x.dtype)
        scale = math_ops.divide(_scalar(1, x), keep_t)
        out = math_ops.multiply(math_ops.multiply(x, scale), mask)
        out.set_shape(x.shape)
        return out


# ----------------------------------------------------------------------------- cross entropy
def _ensure_xent_args(name, sentinel, labels, logits):
    if sentinel is not None:
        raise ValueError(f"Only call `{name}` with named arguments (labels=..., logits=..., ...)")
    if labels is None or logits is None:
        raise ValueError("Both labels and logits must be provided.")


def _sparse_xent_infer(inputs, a):
    logits, labels = inputs
    _check_dtype(logits, _FLOATS, "features")
    _check_dtype(labels, _INDICES, "labels")
    _check_sparse_labels(labels.shape, logits.shape)
    if logits.shape.ndims is None:
        batch = labels.shape
        backprop = logits.shape if batch.ndims is None else batch.concatenate([None])
    else:
        batch = labels.shape.merge_with(logits.shape[:-1])
        backprop = batch.concatenate([logits.shape[-1]])
    return [(batch, logits.dtype), (backprop, logits.dtype)]


def _check_sparse_labels(labels_shape, logits_shape):
    """TF's static checks: logits not a scalar, labels of rank and shape logits[:-1]."""
    if logits_shape.ndims == 0:
        raise ValueError(f"Logits cannot be scalars - received shape {logits_shape}.")
    if logits_shape.ndims is None or labels_shape.ndims is None:
        return
    if labels_shape.ndims != logits_shape.ndims - 1:
        raise ValueError(f"Rank mismatch: Rank of labels (received {labels_shape.ndims}) should "
                         f"equal rank of logits minus 1 (received {logits_shape.ndims}).")
    if not labels_shape.is_compatible_with(logits_shape[:-1]):
        raise ValueError(f"Shape mismatch: The shape of labels (received {labels_shape}) should "
                         f"equal the shape of logits except for the last dimension (received "
                         f"{logits_shape}).")


def _sparse_xent_kernel(logits, labels):
    classes = logits.shape[-1]
    if labels.shape != logits.shape[:-1]:
        raise errors.KernelError(f"logits and labels must have the same first dimensions, got "
                                 f"logits shape {list(logits.shape)} and labels shape "
                                 f"{list(labels.shape)}")
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        raise errors.KernelError(
            f"Received a label value of {labels[bad][0]} which is outside the valid range of "
            f"[0, {classes}).  Label values: {' '.join(str(v) for v in labels.reshape(-1))}")
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    exps = np.exp(shifted)
    sums = np.sum(exps, axis=-1, keepdims=True)
    picked = np.take_along_axis(shifted, labels[..., None].astype(np.int64), axis=-1)
    loss = (np.log(sums) - picked)[..., 0]
    onehot = np.arange(classes) == labels[..., None]
    return loss, exps / sums - onehot


def _softmax_jvp(logits, v):
    """The softmax Jacobian applied to v, along the last axis: (v - <v, s>) * s."""
    s = softmax(logits)
    return math_ops.multiply(math_ops.subtract(v, _sum_keep(math_ops.multiply(v, s), -1)), s)


def _sparse_xent_grad(op, g_loss, g_backprop):
    logits, backprop = op.inputs[0], op.outputs[1]
    grad = math_ops.multiply(array_ops.expand_dims(g_loss, -1), backprop)
    if g_backprop is not None and g_backprop.op.type != "ZerosLike":
        # backprop = softmax(logits) - onehot also depends on logits (second derivatives)
        grad = math_ops.add(grad, _softmax_jvp(logits, g_backprop))
    return [grad, None]


register_op("SparseSoftmaxCrossEntropyWithLogits", infer=_sparse_xent_infer,
            kernel=_sparse_xent_kernel, grad=_sparse_xent_grad, kind="reduction")


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """-log(softmax(logits)[label]) per example; labels are class indices (rank logits-1)."""
    _ensure_xent_args("sparse_softmax_cross_entropy_with_logits", _sentinel, labels, logits)
    with name_scope(name, "SparseSoftmaxCrossEntropyWithLogits", [labels, logits]) as scope:
        labels = convert_to_tensor(labels)
        logits = convert_to_tensor(logits)
        _check_sparse_labels(labels.shape, logits.shape)
        op = logits.graph.create_op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                                    name=scope)
        return op.outputs[0]


def softmax_cross_entropy_with_logits_v2(labels, logits, axis=None, name=None, dim=None):
    """-sum(labels * log_softmax(logits), axis); differentiable w.r.t. labels too."""
    axis = _pick_axis(axis, dim)
    with name_scope(name, "softmax_cross_entropy_with_logits", [logits, labels]):
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, name="labels", dtype_hint=logits.dtype)
        labels = math_ops.cast(labels, logits.dtype)
        if not labels.shape.is_compatible_with(logits.shape):
            raise ValueError(f"logits and labels must be broadcastable: logits_size="
                             f"{logits.shape} labels_size={labels.shape}")
        log_probs = log_softmax(logits, axis=axis)
        return math_ops.negative(reduction_ops.reduce_sum(math_ops.multiply(labels, log_probs),
                                                          axis=axis))


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1,
                                      name=None, axis=None):
    """TF1's v1 cross entropy: like v2, but no gradient flows into labels."""
    _ensure_xent_args("softmax_cross_entropy_with_logits", _sentinel, labels, logits)
    axis = _pick_axis(axis, None if dim == -1 else dim)
    with name_scope(name, "softmax_cross_entropy_with_logits_sg", [logits, labels]):
        labels = array_ops.stop_gradient(labels, name="labels_stop_gradient")
        return softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits, axis=axis)


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """max(x, 0) - x * z + log(1 + exp(-|x|)): stable for logits of any magnitude."""
    _ensure_xent_args("sigmoid_cross_entropy_with_logits", _sentinel, labels, logits)
    with name_scope(name, "logistic_loss", [logits, labels]) as scope:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, name="labels", dtype_hint=logits.dtype)
        if not labels.shape.is_compatible_with(logits.shape):
            raise ValueError(f"logits and labels must have the same shape ({logits.shape} vs "
                             f"{labels.shape})")
        zeros = array_ops.zeros_like(logits)
        cond = math_ops.greater_equal(logits, zeros)
        relu_logits = math_ops.where(cond, logits, zeros)
        neg_abs_logits = math_ops.where(cond, math_ops.negative(logits), logits)
        return math_ops.add(math_ops.subtract(relu_logits, math_ops.multiply(logits, labels)),
                            math_ops.log1p(math_ops.exp(neg_abs_logits)), name=scope)


# ----------------------------------------------------------------------------- losses, norms
def _l2_loss_infer(inputs, a):
    _check_dtype(inputs[0], _FLOATS, "t")
    return TensorShape([]), inputs[0].dtype


register_op("L2Loss", infer=_l2_loss_infer,
            kernel=lambda t: np.sum(np.square(t)) / 2,
            grad=lambda op, g: [math_ops.multiply(op.inputs[0], g)], kind="reduction")


def l2_loss(t, name=None):
    """sum(t ** 2) / 2."""
    t = convert_to_tensor(t)
    return _create("L2Loss", [t], name=name)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """x / sqrt(max(sum(x ** 2, axis), epsilon))."""
    axis = _pick_axis(axis, dim, default=None)
    with name_scope(name, "l2_normalize", [x]) as scope:
        x = convert_to_tensor(x, name="x")
        square_sum = reduction_ops.reduce_sum(math_ops.square(x), axis=axis, keepdims=True)
        inv_norm = math_ops.rsqrt(math_ops.maximum(square_sum, _scalar(epsilon, x)))
        return math_ops.multiply(x, inv_norm, name=scope)


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None):
    """(mean, variance) of x over `axes`; `shift` is accepted and unused, as in TF."""
    if keep_dims is not None and keepdims is not None:
        raise ValueError("Cannot specify both 'keep_dims' and 'keepdims'")
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with name_scope(name, "moments", [x, axes]):
        x = convert_to_tensor(x)
        y = math_ops.cast(x, dtypes.float32) if x.dtype == dtypes.float16 else x
        mean = reduction_ops.reduce_mean(y, axis=axes, keepdims=True, name="mean")
        # TF stops the gradient through the centring mean; its first-order contribution
        # is zero anyway, and keeping it makes second derivatives right.
        variance = reduction_ops.reduce_mean(math_ops.squared_difference(y, mean), axis=axes,
                                             keepdims=True, name="variance")
        if not keep:
            mean = array_ops.squeeze(mean, axes)
            variance = array_ops.squeeze(variance, axes)
        if x.dtype == dtypes.float16:
            return math_ops.cast(mean, dtypes.float16), math_ops.cast(variance, dtypes.float16)
        return mean, variance


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """(x - mean) * scale / sqrt(variance + epsilon) + offset; offset/scale may be None."""
    with name_scope(name, "batchnorm", [x, mean, variance, scale, offset]):
        x = convert_to_tensor(x)
        variance = convert_to_tensor(variance, dtype_hint=x.dtype)
        mean = convert_to_tensor(mean, dtype_hint=x.dtype)
        # TF's expression, operator for operator, so the ops are named as TF's
        # (batchnorm/add_1 is the result)
        inv = math_ops.rsqrt(variance + _scalar(variance_epsilon, variance))
        if scale is not None:
            inv *= convert_to_tensor(scale, dtype_hint=x.dtype)
        if offset is not None:
            shift = convert_to_tensor(offset, dtype_hint=x.dtype) - mean * inv
        else:
            shift = -mean * inv
        return x * math_ops.cast(inv, x.dtype) + math_ops.cast(shift, x.dtype)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001,
                     data_format="NHWC", is_training=True, name=None,
                     exponential_avg_factor=1.0):
    """Batch norm of a 4-D x over all but the channel axis: (y, batch_mean, batch_var).

    Training normalizes with the batch's (biased) variance and returns the unbiased one, as
    TF's kernel does; with exponential_avg_factor f != 1 it returns the running averages
    (1 - f) * mean + f * batch_mean and (1 - f) * variance + f * unbiased batch variance.
    Inference uses the given mean and variance. A composite here."""
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be NHWC or NCHW, got {data_format}")
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError("Both `mean` and `variance` must be a 1D tensor when is_training is "
                         "False or exponential_avg_factor != 1.0.")
    epsilon = max(epsilon, 1.001e-5)  # TF's minimum for cuDNN compatibility
    with name_scope(name, "FusedBatchNorm", [x, scale, offset]):
        x = convert_to_tensor(x, name="input")
        x.shape.assert_has_rank(4)
        channel = 1 if data_format == "NCHW" else 3
        axes = [a for a in range(4) if a != channel]
        to_channel = [-1, 1, 1] if data_format == "NCHW" else [-1]

        def along_channel(t):
            t = convert_to_tensor(t, dtype_hint=x.dtype)
            return array_ops.reshape(t, to_channel) if data_format == "NCHW" else t
        if is_training:
            old = (mean, variance)
            mean, variance = moments(x, axes)
            count = math_ops.divide(math_ops.cast(array_ops.size(x), x.dtype),
                                    math_ops.cast(array_ops.shape(x)[channel], x.dtype))
            bessel = math_ops.divide(count, math_ops.maximum(
                math_ops.subtract(count, _scalar(1, count)), _scalar(1, count)))
            reported = math_ops.multiply(variance, bessel)
            reported_mean = mean
            if exponential_avg_factor != 1.0:
                reported_mean, reported = (_running_average(o, new, exponential_avg_factor)
                                           for o, new in zip(old, (mean, reported)))
        else:
            mean = reported_mean = convert_to_tensor(mean, dtype_hint=x.dtype)
            variance = reported = convert_to_tensor(variance, dtype_hint=x.dtype)
        y = batch_normalization(x, along_channel(mean), along_channel(variance),
                                along_channel(offset), along_channel(scale), epsilon)
        return y, reported_mean, reported


def _running_average(old, new, factor):
    """(1 - factor) * old + factor * new, as FusedBatchNorm's exponential_avg_factor."""
    old = convert_to_tensor(old, dtype_hint=new.dtype)
    return math_ops.add(math_ops.multiply(old, _scalar(1.0 - factor, new)),
                        math_ops.multiply(new, _scalar(factor, new)))


# ----------------------------------------------------------------------------- embeddings
def _shard_rows(shard):
    """The number of rows of a shard: an int when static, else an int64 scalar tensor."""
    rows = shard.shape[0].value if shard.shape.ndims else None
    if rows is not None:
        return rows
    return math_ops.cast(array_ops.shape(shard)[0], dtypes.int64)


def _shard_starts(rows):
    """The first row of each shard in the concatenation, as an int64 vector."""
    if all(isinstance(r, int) for r in rows):
        return constant(np.cumsum([0] + rows[:-1]), dtype=dtypes.int64)
    rows = [constant(r, dtype=dtypes.int64) if isinstance(r, int) else r for r in rows]
    return array_ops.stack([constant(0, dtype=dtypes.int64)] +
                           [math_ops.add_n(rows[:i]) for i in range(1, len(rows))])


def _shard_positions(shards, ids, partition_strategy):
    """Where each id lives in the concatenation of the shards, in TF's partitioning.

    Shards sized as TF's partitioners size them (the first total % n get one extra row)
    make the "div" order the concatenation order; "mod" puts id on shard id % n, row
    id // n. Ids outside [0, total) keep their value, which is out of range of the
    concatenation, so the gather reports them."""
    if partition_strategy == "div":
        return ids
    n = len(shards)
    ids = math_ops.cast(ids, dtypes.int64)
    rows = [_shard_rows(s) for s in shards]
    total = sum(rows) if all(isinstance(r, int) for r in rows) else math_ops.add_n(
        [constant(r, dtype=dtypes.int64) if isinstance(r, int) else r for r in rows])
    valid = math_ops.logical_and(math_ops.greater_equal(ids, _scalar(0, ids)),
                                 math_ops.less(ids, convert_to_tensor(total, dtype=ids.dtype)))
    positions = math_ops.add(array_ops.gather(_shard_starts(rows),
                                              math_ops.floormod(ids, _scalar(n, ids))),
                             math_ops.floordiv(ids, _scalar(n, ids)))
    return math_ops.where(valid, positions, ids)


def _clip_rows(x, ids_rank, max_norm):
    """Each embedding row scaled down to an L2 norm of at most max_norm (TF's clip_by_norm)."""
    if x.shape.ndims is None or ids_rank is None:
        raise ValueError("max_norm needs ids and params of known rank")
    axes = list(range(ids_rank, x.shape.ndims))
    if not axes:
        return x
    l2sum = reduction_ops.reduce_sum(math_ops.square(x), axis=axes, keepdims=True)
    positive = math_ops.greater(l2sum, array_ops.zeros_like(l2sum))
    # sqrt only of positive sums, so the gradient at zero rows is finite
    safe = math_ops.where(positive, l2sum, array_ops.ones_like(l2sum))
    norm = math_ops.where(positive, math_ops.sqrt(safe), l2sum)
    limit = _scalar(max_norm, x)
    return math_ops.divide(math_ops.multiply(x, limit), math_ops.maximum(norm, limit))


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None):
    """Rows of `params` (a tensor, variable, or list of shards) for each id in `ids`."""
    if partition_strategy not in ("mod", "div"):
        raise ValueError(f"Unrecognized partition strategy: {partition_strategy}")
    shards = list(params) if isinstance(params, (list, tuple)) else [params]
    if not shards:
        raise ValueError("Need at least one param")
    with name_scope(name, "embedding_lookup", shards + [ids]):
        shards = [convert_to_tensor(p) for p in shards]
        ids = convert_to_tensor(ids, name="ids")
        _check_dtype(ids, _INDICES, "indices")
        if len(shards) == 1:
            result = array_ops.gather(shards[0], ids)
        else:
            table = array_ops.concat(shards, 0)
            result = array_ops.gather(table, _shard_positions(shards, ids, partition_strategy))
        if max_norm is not None:
            result = _clip_rows(result, ids.shape.ndims, max_norm)
        return result
