"""tf.contrib.layers: the contrib layers and helpers TF1 scripts still import, with
contrib's names, defaults and variable names (fully_connected's "weights"/"biases" under
"fully_connected", conv2d's under "Conv", batch_norm's under "BatchNorm", layer_norm's
under "LayerNorm"), so checkpoints of such models line up.
"""
import math
import numbers

from graphc import dtypes, init_ops, layers as core_layers
from graphc.contrib.framework import add_arg_scope
from graphc.framework.graph import GraphKeys, get_default_graph, name_scope
from graphc.ops import array_ops, conv_ops, math_ops, nn_ops, random_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import identity
from graphc.ops.reduction_ops import reduce_sum
from graphc.variable_scope import get_variable, variable_scope

__all__ = ["xavier_initializer", "xavier_initializer_conv2d", "variance_scaling_initializer",
           "l1_regularizer", "l2_regularizer", "fully_connected", "conv2d", "flatten",
           "batch_norm", "layer_norm", "max_pool2d", "avg_pool2d", "dropout",
           "convolution2d", "apply_regularization"]


# ----------------------------------------------------------------------- initializers
class variance_scaling_initializer(init_ops.Initializer):  # noqa: N801 - TF's name
    """contrib's variance scaling: n = fan_in, fan_out or their mean (mode "FAN_IN",
    "FAN_OUT", "FAN_AVG"); uniform in +-sqrt(3 * factor / n), or a normal truncated at two
    standard deviations with stddev sqrt(1.3 * factor / n) (contrib's own constants)."""

    def __init__(self, factor=2.0, mode="FAN_IN", uniform=False, seed=None,
                 dtype=dtypes.float32):
        if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
            raise TypeError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
        dtype = dtypes.as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError("Cannot create initializer for non-floating point type.")
        self.factor, self.mode, self.uniform, self.seed, self.dtype = (factor, mode, uniform,
                                                                       seed, dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        shape = [int(d) for d in (partition_info.full_shape if partition_info is not None
                                  else shape)]
        dtype = dtypes.as_dtype(dtype or self.dtype)
        fan_in = float(shape[-2]) if len(shape) > 1 else float(shape[-1]) if shape else 1.0
        fan_out = float(shape[-1]) if shape else 1.0
        for dim in shape[:-2]:
            fan_in *= dim
            fan_out *= dim
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[self.mode]
        if self.uniform:
            limit = math.sqrt(3.0 * self.factor / n)
            return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)
        return random_ops.truncated_normal(shape, 0.0, math.sqrt(1.3 * self.factor / n), dtype,
                                           seed=self.seed)


def xavier_initializer(uniform=True, seed=None, dtype=dtypes.float32):
    """Glorot & Bengio's initializer: variance 1 / mean(fan_in, fan_out)."""
    return variance_scaling_initializer(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer


# ----------------------------------------------------------------------- regularizers
def _check_scale(scale):
    if isinstance(scale, numbers.Integral):
        raise ValueError(f"scale cannot be an integer: {scale}")
    if not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a number: {scale!r}")
    if scale < 0.0:
        raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale}")


def l2_regularizer(scale, scope=None):
    """weights -> scale * sum(weights ** 2) / 2 (None when scale is 0, as contrib)."""
    _check_scale(scale)
    if scale == 0.0:
        return lambda _: None

    def l2(weights):
        with name_scope(scope, "l2_regularizer", [weights]) as name:
            w = convert_to_tensor(weights)
            # the scale in the weights' dtype, as contrib: exact for float64 weights
            return math_ops.multiply(convert_to_tensor(scale, dtype=w.dtype.base_dtype),
                                     nn_ops.l2_loss(w), name=name)
    return l2


def l1_regularizer(scale, scope=None):
    """weights -> scale * sum(|weights|)."""
    _check_scale(scale)
    if scale == 0.0:
        return lambda _: None

    def l1(weights):
        with name_scope(scope, "l1_regularizer", [weights]) as name:
            w = convert_to_tensor(weights)
            return math_ops.multiply(convert_to_tensor(scale, dtype=w.dtype.base_dtype),
                                     reduce_sum(math_ops.abs(w)), name=name)
    return l1


def apply_regularization(regularizer, weights_list=None):
    """The sum of regularizer(w) over weights_list (default: the WEIGHTS collection), a
    scalar added to REGULARIZATION_LOSSES; a regularizer returning None adds 0."""
    weights_list = weights_list or get_default_graph().get_collection(GraphKeys.WEIGHTS)
    if not weights_list:
        raise ValueError("apply_regularization: no weights to regularize (weights_list is "
                         "empty and so is the WEIGHTS collection).")
    with name_scope("get_regularization_penalty", values=weights_list) as scope:
        penalties = [regularizer(w) for w in weights_list]
        penalties = [convert_to_tensor(0.0) if p is None else p for p in penalties]
        for p in penalties:
            if p.shape.ndims != 0:
                raise ValueError(f"apply_regularization: regularizer must return a scalar "
                                 f"Tensor instead of a Tensor with rank {p.shape.ndims}.")
        total = math_ops.add_n(penalties, name=scope)
    get_default_graph().add_to_collection(GraphKeys.REGULARIZATION_LOSSES, total)
    return total


# ------------------------------------------------------------------------------ layers
def _model_variable(name, shape, dtype, initializer, regularizer, trainable, collections):
    """A variable also in MODEL_VARIABLES (and `collections`), as contrib's model_variable."""
    var = get_variable(name, shape, dtype, initializer=initializer, regularizer=regularizer,
                       trainable=trainable)
    graph = get_default_graph()
    for key in [GraphKeys.MODEL_VARIABLES] + _collection_list(collections, name):
        if var not in graph.get_collection(key):
            graph.add_to_collection(key, var)
    return var


def _collection_list(collections, name):
    if collections is None:
        return []
    if isinstance(collections, dict):
        collections = collections.get(name, [])
    return [collections] if isinstance(collections, str) else list(collections)


def _collect_output(outputs_collections, outputs):
    for key in _collection_list(outputs_collections, None):
        get_default_graph().add_to_collection(key, outputs)
    return outputs


def _finish(outputs, normalizer_fn, normalizer_params, activation_fn):
    if normalizer_fn is not None:
        outputs = normalizer_fn(outputs, **(normalizer_params or {}))
    if activation_fn is not None:
        outputs = activation_fn(outputs)
    return outputs


@add_arg_scope
def fully_connected(inputs, num_outputs, activation_fn=nn_ops.relu, normalizer_fn=None,
                    normalizer_params=None, weights_initializer=None,
                    weights_regularizer=None, biases_initializer=init_ops.zeros_initializer(),
                    biases_regularizer=None, reuse=None, variables_collections=None,
                    outputs_collections=None, trainable=True, scope=None):
    """activation_fn(normalizer_fn(inputs @ weights) or inputs @ weights + biases) over the
    last axis; weights_initializer defaults to xavier_initializer(); no biases when a
    normalizer_fn is given or biases_initializer is None."""
    x = convert_to_tensor(inputs)
    in_dim = x.shape[-1].value if x.shape.ndims else None
    if in_dim is None:
        raise ValueError(f"fully_connected: the last dimension of the inputs must be known, "
                         f"got shape {x.shape}")
    with variable_scope(scope, "fully_connected", [x], reuse=reuse):
        weights = _model_variable("weights", [in_dim, num_outputs], x.dtype,
                                  weights_initializer or xavier_initializer(),
                                  weights_regularizer, trainable, variables_collections)
        outputs = core_layers._matmul_last_axis(x, weights, num_outputs)
        if normalizer_fn is None and biases_initializer is not None:
            biases = _model_variable("biases", [num_outputs], x.dtype, biases_initializer,
                                     biases_regularizer, trainable, variables_collections)
            outputs = nn_ops.bias_add(outputs, biases)
        outputs = _finish(outputs, normalizer_fn, normalizer_params, activation_fn)
        return _collect_output(outputs_collections, outputs)


def _pair(value):
    return (int(value), int(value)) if isinstance(value, numbers.Integral) else \
        tuple(int(v) for v in value)


@add_arg_scope
def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format=None,
           rate=1, activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None,
           weights_initializer=None, weights_regularizer=None,
           biases_initializer=init_ops.zeros_initializer(), biases_regularizer=None,
           reuse=None, variables_collections=None, outputs_collections=None, trainable=True,
           scope=None):
    """contrib/slim conv2d: weights [kh, kw, in, num_outputs] and biases under "Conv"."""
    x = convert_to_tensor(inputs)
    fmt = data_format or "NHWC"
    if fmt not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format has to be either NCHW or NHWC, got {fmt!r}")
    if x.shape.ndims is not None and x.shape.ndims != 4:
        raise ValueError(f"conv2d: inputs must be rank 4, got shape {x.shape}")
    channels = x.shape[3 if fmt == "NHWC" else 1].value if x.shape.ndims else None
    if channels is None:
        raise ValueError(f"conv2d: the channel dimension of the inputs must be known, got "
                         f"shape {x.shape}")
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride)
    rh, rw = _pair(rate)
    with variable_scope(scope, "Conv", [x], reuse=reuse):
        weights = _model_variable("weights", [kh, kw, channels, num_outputs], x.dtype,
                                  weights_initializer or xavier_initializer(),
                                  weights_regularizer, trainable, variables_collections)
        strides = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
        dilations = [1, rh, rw, 1] if fmt == "NHWC" else [1, 1, rh, rw]
        outputs = conv_ops.conv2d(x, weights, strides, padding.upper(), data_format=fmt,
                                  dilations=dilations)
        if normalizer_fn is None and biases_initializer is not None:
            biases = _model_variable("biases", [num_outputs], x.dtype, biases_initializer,
                                     biases_regularizer, trainable, variables_collections)
            outputs = nn_ops.bias_add(outputs, biases, data_format=fmt)
        outputs = _finish(outputs, normalizer_fn, normalizer_params, activation_fn)
        return _collect_output(outputs_collections, outputs)


convolution2d = conv2d


def _model_variable_collections(var, collections):
    graph = get_default_graph()
    for key in [GraphKeys.MODEL_VARIABLES] + _collection_list(collections, None):
        if var not in graph.get_collection(key):
            graph.add_to_collection(key, var)


@add_arg_scope
def flatten(inputs, outputs_collections=None, scope=None):
    """[batch, ...] -> [batch, k]."""
    with name_scope(scope, "Flatten", [inputs]):
        outputs = core_layers.flatten(inputs)
        return _collect_output(outputs_collections, outputs)


@add_arg_scope
def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC",
               outputs_collections=None, scope=None):
    return _pool(conv_ops.max_pool, "MaxPool2D", inputs, kernel_size, stride, padding,
                 data_format, outputs_collections, scope)


@add_arg_scope
def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC",
               outputs_collections=None, scope=None):
    return _pool(conv_ops.avg_pool, "AvgPool2D", inputs, kernel_size, stride, padding,
                 data_format, outputs_collections, scope)


def _pool(pool, default_name, inputs, kernel_size, stride, padding, data_format,
          outputs_collections, scope):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format has to be either NCHW or NHWC, got {data_format!r}")
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride)
    ksize = [1, kh, kw, 1] if data_format == "NHWC" else [1, 1, kh, kw]
    strides = [1, sh, sw, 1] if data_format == "NHWC" else [1, 1, sh, sw]
    with name_scope(scope, default_name, [inputs]):
        outputs = pool(convert_to_tensor(inputs), ksize, strides, padding.upper(),
                       data_format=data_format)
        return _collect_output(outputs_collections, outputs)


@add_arg_scope
def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True,
            outputs_collections=None, scope=None, seed=None):
    """Keeps each unit with probability keep_prob (scaled by 1/keep_prob) when
    is_training (a bool or a bool tensor); the identity otherwise."""
    with name_scope(scope, "Dropout", [inputs]):
        outputs = core_layers.dropout(inputs, rate=1 - keep_prob, noise_shape=noise_shape,
                                      seed=seed, training=is_training)
        return _collect_output(outputs_collections, outputs)


@add_arg_scope
def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001,
               activation_fn=None, param_initializers=None, param_regularizers=None,
               updates_collections=GraphKeys.UPDATE_OPS, is_training=True, reuse=None,
               variables_collections=None, outputs_collections=None, trainable=True,
               batch_weights=None, fused=None, data_format="NHWC",
               zero_debias_moving_mean=False, scope=None, renorm=False, renorm_clipping=None,
               renorm_decay=0.99, adjustment=None):
    """contrib's batch_norm: core batch normalization under "BatchNorm" with contrib's
    defaults (decay 0.999, no gamma unless scale, is_training True). Rank-2 inputs take
    the fused kernel's path as in contrib (the moving variance gets the batch's
    Bessel-corrected variance). The moving-average updates go to updates_collections, or
    run with the output when it is None."""
    if batch_weights is not None or renorm or zero_debias_moving_mean or adjustment is not None:
        raise ValueError("batch_norm: batch_weights, renorm, zero_debias_moving_mean and "
                         "adjustment are not supported by graphc")
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None:
        raise ValueError(f"Inputs {x.name} has undefined rank.")
    initializers = param_initializers or {}
    regularizers = param_regularizers or {}
    graph = get_default_graph()
    before = list(graph.get_collection(GraphKeys.UPDATE_OPS))
    with variable_scope(scope, "BatchNorm", [x], reuse=reuse) as sc:
        flat = rank == 2 and fused is not False
        y = array_ops.reshape(x, [-1, 1, 1, x.shape[1].value]) if flat else x
        axis = 1 if data_format == "NCHW" and not flat else -1
        outputs = core_layers.batch_normalization(
            y, axis=axis, momentum=decay, epsilon=epsilon, center=center, scale=scale,
            beta_initializer=initializers.get("beta"), gamma_initializer=initializers.get("gamma"),
            moving_mean_initializer=initializers.get("moving_mean"),
            moving_variance_initializer=initializers.get("moving_variance"),
            beta_regularizer=regularizers.get("beta"), gamma_regularizer=regularizers.get("gamma"),
            training=is_training, trainable=trainable, name=sc, fused=fused)
        if flat:
            outputs = array_ops.reshape(outputs, array_ops.shape(x))
            outputs.set_shape(x.shape)
        for var in graph.get_collection(GraphKeys.GLOBAL_VARIABLES, sc.name + "/"):
            _model_variable_collections(var, variables_collections)
        updates = [u for u in graph.get_collection(GraphKeys.UPDATE_OPS) if u not in before]
        if updates_collections != GraphKeys.UPDATE_OPS and updates:
            kept = graph.get_collection_ref(GraphKeys.UPDATE_OPS)
            kept[:] = [u for u in kept if u not in updates]
            if updates_collections is None:
                with graph.control_dependencies(updates):
                    outputs = identity(outputs)
            else:
                for key in _collection_list(updates_collections, None):
                    for u in updates:
                        graph.add_to_collection(key, u)
        if activation_fn is not None:
            outputs = activation_fn(outputs)
        return _collect_output(outputs_collections, outputs)


@add_arg_scope
def layer_norm(inputs, center=True, scale=True, activation_fn=None, reuse=None,
               variables_collections=None, outputs_collections=None, trainable=True,
               begin_norm_axis=1, begin_params_axis=-1, scope=None):
    """Normalizes over dims begin_norm_axis.. (mean 0, variance 1, epsilon 1e-12 as
    contrib's), then scales by gamma and shifts by beta of shape inputs.shape[begin_params_axis:]."""
    x = convert_to_tensor(inputs)
    rank = x.shape.ndims
    if rank is None:
        raise ValueError(f"Inputs {x.name} has undefined rank.")
    begin_norm_axis = begin_norm_axis + rank if begin_norm_axis < 0 else begin_norm_axis
    begin_params_axis = begin_params_axis + rank if begin_params_axis < 0 else begin_params_axis
    if not 0 <= begin_norm_axis < rank or not 0 <= begin_params_axis < rank:
        raise ValueError(f"begin_norm_axis ({begin_norm_axis}) and begin_params_axis "
                         f"({begin_params_axis}) must be < rank(inputs) ({rank})")
    params_shape = x.shape[begin_params_axis:]
    if not params_shape.is_fully_defined():
        raise ValueError(f"Inputs {x.name}: shape[{begin_params_axis}:] is not fully "
                         f"defined: {x.shape}")
    with variable_scope(scope, "LayerNorm", [x], reuse=reuse):
        shape = params_shape.as_list()
        beta = _model_variable("beta", shape, x.dtype, init_ops.zeros_initializer(), None,
                               trainable, variables_collections) if center else None
        gamma = _model_variable("gamma", shape, x.dtype, init_ops.ones_initializer(), None,
                                trainable, variables_collections) if scale else None
        mean, variance = nn_ops.moments(x, list(range(begin_norm_axis, rank)), keep_dims=True)
        outputs = nn_ops.batch_normalization(x, mean, variance, beta, gamma, 1e-12)
        outputs.set_shape(x.shape)
        if activation_fn is not None:
            outputs = activation_fn(outputs)
        return _collect_output(outputs_collections, outputs)
