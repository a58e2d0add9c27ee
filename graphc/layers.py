"""gc.layers: TF1's functional layers (tf.compat.v1.layers) built from graphc ops.

Each call opens a variable scope named after the layer ("dense", "dense_1", ... or the
given `name`), creates its variables there with get_variable, and builds its ops in
the matching name scope, as tf.layers does. `reuse=True`/`AUTO_REUSE` with the same
`name` shares the variables of an earlier call.

Defaults that TF writes as initializer instances (bias/beta: zeros, gamma/moving
variance: ones) are written `None` here and mean the same thing.
"""
import contextlib
import numbers

from graphc import dtypes, init_ops
from graphc.framework.graph import GraphKeys, Tensor, get_default_graph, name_scope
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, conv_ops, conv_variants, math_ops, matmul_ops, nn_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import identity
from graphc.variable_scope import get_variable, variable_scope

__all__ = ["dense", "Dense", "conv1d", "conv2d", "conv2d_transpose", "max_pooling2d", "average_pooling2d", "flatten", "dropout",
           "batch_normalization"]


# ----------------------------------------------------------------------------- scopes
@contextlib.contextmanager
def _layer_scope(name, default_name, reuse, inputs):
    """The variable scope of one layer call, as tf.layers' Layer._set_scope picks it."""
    if name is None and reuse:
        name = default_name  # reusing an unnamed layer means the first one of its kind
    with variable_scope(name, default_name=default_name, values=[inputs], reuse=reuse) as scope:
        yield scope


def _float_inputs(inputs):
    """Inputs as a tensor of the layer's dtype: floating inputs keep theirs, others -> float32."""
    x = convert_to_tensor(inputs)
    return x if x.dtype.is_floating else math_ops.cast(x, dtypes.float32)


def _layer_output(outputs, units, use_bias, bias_initializer, bias_regularizer,
                  bias_constraint, trainable, activation, activity_regularizer,
                  data_format=None):
    """What every layer ends with: its bias variable added (on the channel axis of
    `data_format`), its activation, and its activity regularization loss."""
    if use_bias:
        bias = get_variable("bias", [units], outputs.dtype,
                            initializer=_zeros(bias_initializer), regularizer=bias_regularizer,
                            trainable=trainable, constraint=bias_constraint)
        outputs = nn_ops.bias_add(outputs, bias, data_format=data_format)
    if activation is not None:
        outputs = activation(outputs)
    _apply_activity_regularizer(outputs, activity_regularizer)
    return outputs


def _apply_activity_regularizer(outputs, activity_regularizer):
    if activity_regularizer is not None:
        with name_scope("ActivityRegularizer"):
            loss = activity_regularizer(outputs)
        if loss is not None:
            get_default_graph().add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)


def _pair(value, what):
    """kernel_size=3 -> (3, 3); (2, 3) stays."""
    if isinstance(value, numbers.Integral):
        return (int(value), int(value))
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"The `{what}` argument must be a tuple of 2 integers. Received: {value}")
    return value


def _padding(padding):
    p = padding.upper()
    if p not in ("VALID", "SAME"):
        raise ValueError(f"The `padding` argument must be one of 'valid', 'same'. "
                         f"Received: {padding}")
    return p


def _nn_data_format(data_format):
    if data_format == "channels_last":
        return "NHWC"
    if data_format == "channels_first":
        return "NCHW"
    raise ValueError(f"The `data_format` argument must be one of 'channels_first', "
                     f"'channels_last'. Received: {data_format}")


def _is_tensor(value):
    return isinstance(value, Tensor) or hasattr(value, "_as_tensor")


def _zeros(initializer):
    return init_ops.zeros_initializer() if initializer is None else initializer


def _ones(initializer):
    return init_ops.ones_initializer() if initializer is None else initializer


# ------------------------------------------------------------------------------ dense
def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
          trainable=True, name=None, reuse=None):
    """activation(inputs @ kernel + bias), over the last axis of inputs of any rank >= 2."""
    x = _float_inputs(inputs)
    with _layer_scope(name, "dense", reuse, x):
        return _dense_in_scope(x, units, activation, use_bias, kernel_initializer,
                               bias_initializer, kernel_regularizer, bias_regularizer,
                               activity_regularizer, kernel_constraint, bias_constraint,
                               trainable)


def _dense_in_scope(x, units, activation, use_bias, kernel_initializer, bias_initializer,
                    kernel_regularizer, bias_regularizer, activity_regularizer,
                    kernel_constraint, bias_constraint, trainable):
    """dense()'s variables (in the current variable scope) and outputs."""
    in_dim = x.shape[-1].value if x.shape.ndims else None
    if in_dim is None:
        raise ValueError("The last dimension of the inputs to `Dense` should be defined. "
                         "Found `None`.")
    kernel = get_variable("kernel", [in_dim, units], x.dtype, initializer=kernel_initializer,
                          regularizer=kernel_regularizer, trainable=trainable,
                          constraint=kernel_constraint)
    outputs = _matmul_last_axis(x, kernel, units)
    return _layer_output(outputs, units, use_bias, bias_initializer, bias_regularizer,
                         bias_constraint, trainable, activation, activity_regularizer)


class Dense:
    """tf.layers.Dense: dense() as an object. The first call makes kernel and bias in the
    layer's variable scope (named as dense() names it); every later call, from any scope,
    uses the same variables."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 trainable=True, name=None, dtype=None, _reuse=None):
        if int(units) <= 0:
            raise ValueError(f"Dense: units must be a positive integer, got {units!r}")
        self.units = int(units)
        self._options = dict(activation=activation, use_bias=use_bias,
                             kernel_initializer=kernel_initializer,
                             bias_initializer=bias_initializer,
                             kernel_regularizer=kernel_regularizer,
                             bias_regularizer=bias_regularizer,
                             activity_regularizer=activity_regularizer,
                             kernel_constraint=kernel_constraint,
                             bias_constraint=bias_constraint, trainable=trainable)
        self._name, self._reuse, self._scope = name, _reuse, None
        self._variables = []

    activation = property(lambda self: self._options["activation"])
    use_bias = property(lambda self: self._options["use_bias"])
    trainable = property(lambda self: self._options["trainable"])
    built = property(lambda self: self._scope is not None)
    name = property(lambda self: self._scope.name.rsplit("/", 1)[-1] if self._scope
                    else self._name or "dense")
    variables = weights = property(lambda self: list(self._variables))
    trainable_variables = trainable_weights = property(
        lambda self: list(self._variables) if self.trainable else [])
    non_trainable_variables = non_trainable_weights = property(
        lambda self: [] if self.trainable else list(self._variables))
    kernel = property(lambda self: self._variable("kernel"))
    bias = property(lambda self: self._variable("bias") if self.use_bias else None)

    def __call__(self, inputs):
        x = _float_inputs(inputs)
        if self._scope is None:
            with _layer_scope(self._name, "dense", self._reuse, x) as scope:
                self._scope = scope
        all_variables = get_default_graph().get_collection_ref(GraphKeys.GLOBAL_VARIABLES)
        before = len(all_variables)
        with variable_scope(self._scope, reuse=True if self._variables else self._reuse):
            outputs = _dense_in_scope(x, self.units, **self._options)
        if not self._variables:  # the variables the first call made (or reused)
            self._variables = all_variables[before:] or [
                v for v in all_variables if v.op.name.startswith(self._scope.name + "/")]
        return outputs

    apply = __call__

    def _variable(self, which):
        found = [v for v in self._variables if v.op.name.endswith("/" + which)]
        if not found:
            raise AttributeError(f"Dense layer {self.name!r} has no {which} until it is "
                                 f"called on an input")
        return found[0]

    def compute_output_shape(self, input_shape):
        shape = TensorShape(input_shape)
        if shape.ndims is not None and shape.ndims < 2:
            raise ValueError(f"Dense: the input shape must have rank >= 2, got {shape}")
        return shape[:-1].concatenate([self.units])


def _matmul_last_axis(x, kernel, units):
    """x @ kernel contracting x's last axis (TF's tensordot for rank > 2)."""
    if x.shape.ndims == 2:
        return matmul_ops.matmul(x, kernel)
    flat = array_ops.reshape(x, [-1, kernel.shape[0].value])
    y = matmul_ops.matmul(flat, kernel)
    if x.shape[:-1].is_fully_defined():
        out_shape = x.shape[:-1].as_list() + [units]
    else:
        out_shape = array_ops.concat([array_ops.shape(x)[:-1], [units]], 0)
    y = array_ops.reshape(y, out_shape)
    y.set_shape(x.shape[:-1].concatenate([units]))
    return y


# ----------------------------------------------------------------------- convolution
def _input_channels(x, layer, ndims, fmt):
    """The channel count of a conv layer's input `x` (Keras's checks and messages: the rank
    the layer takes, and a known channel dim to size the kernel)."""
    if x.shape.ndims is not None and x.shape.ndims != ndims:
        raise ValueError(f"Input 0 of layer {layer} is incompatible with the layer: expected "
                         f"ndim={ndims}, found ndim={x.shape.ndims}. Full shape received: "
                         f"{x.shape}")
    channels = x.shape[-1 if fmt == "NHWC" else 1].value if x.shape.ndims else None
    if channels is None:
        raise ValueError("The channel dimension of the inputs should be defined. Found `None`.")
    return channels


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
           data_format="channels_last", dilation_rate=(1, 1), activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
           bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None):
    """2-D convolution layer: kernel [kh, kw, in_channels, filters], bias [filters]."""
    x = _float_inputs(inputs)
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilation_rate, "dilation_rate")
    fmt = _nn_data_format(data_format)
    channels = _input_channels(x, "conv2d", 4, fmt)
    with _layer_scope(name, "conv2d", reuse, x):
        kernel = get_variable("kernel", [kh, kw, channels, filters], x.dtype,
                              initializer=kernel_initializer, regularizer=kernel_regularizer,
                              trainable=trainable, constraint=kernel_constraint)
        stride4 = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
        conv_kwargs = {"strides": stride4, "padding": _padding(padding)}
        if fmt != "NHWC":
            conv_kwargs["data_format"] = fmt
        if (dh, dw) != (1, 1):
            conv_kwargs["dilations"] = [1, dh, dw, 1] if fmt == "NHWC" else [1, 1, dh, dw]
        outputs = conv_ops.conv2d(x, kernel, **conv_kwargs)
        return _layer_output(outputs, filters, use_bias, bias_initializer, bias_regularizer,
                             bias_constraint, trainable, activation, activity_regularizer, fmt)


def _single(value, what):
    """kernel_size=3 or (3,) -> 3."""
    if isinstance(value, numbers.Integral):
        return int(value)
    value = tuple(int(v) for v in value)
    if len(value) != 1:
        raise ValueError(f"The `{what}` argument must be a tuple of 1 integer. Received: {value}")
    return value[0]


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid",
           data_format="channels_last", dilation_rate=1, activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
           bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None):
    """1-D convolution layer over [batch, steps, channels] (or channels_first): kernel
    [k, in_channels, filters], bias [filters]."""
    x = _float_inputs(inputs)
    k = _single(kernel_size, "kernel_size")
    stride = _single(strides, "strides")
    rate = _single(dilation_rate, "dilation_rate")
    fmt = _nn_data_format(data_format)
    channels = _input_channels(x, "conv1d", 3, fmt)
    with _layer_scope(name, "conv1d", reuse, x):
        kernel = get_variable("kernel", [k, channels, filters], x.dtype,
                              initializer=kernel_initializer, regularizer=kernel_regularizer,
                              trainable=trainable, constraint=kernel_constraint)
        outputs = conv_variants.conv1d(x, kernel, stride, _padding(padding),
                                       data_format="NWC" if fmt == "NHWC" else "NCW",
                                       dilations=rate)
        return _layer_output(outputs, filters, use_bias, bias_initializer, bias_regularizer,
                             bias_constraint, trainable, activation, activity_regularizer, fmt)


def _transposed_length(size, kernel, stride, padding):
    """The output length of a transposed convolution (Keras' deconv_output_length)."""
    if size is None:
        return None
    return size * stride + max(kernel - stride, 0) if padding == "VALID" else size * stride


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
                     data_format="channels_last", activation=None, use_bias=True,
                     kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
                     bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                     bias_constraint=None, trainable=True, name=None, reuse=None):
    """Transposed 2-D convolution layer (the gradient of conv2d w.r.t. its input): kernel
    [kh, kw, filters, in_channels]; each spatial dim grows to in * stride (+ kernel - stride
    for 'valid')."""
    x = _float_inputs(inputs)
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(strides, "strides")
    fmt = _nn_data_format(data_format)
    pad = _padding(padding)
    channels = _input_channels(x, "conv2d_transpose", 4, fmt)
    h_axis = 1 if fmt == "NHWC" else 2
    with _layer_scope(name, "conv2d_transpose", reuse, x):
        kernel = get_variable("kernel", [kh, kw, filters, channels], x.dtype,
                              initializer=kernel_initializer, regularizer=kernel_regularizer,
                              trainable=trainable, constraint=kernel_constraint)
        dims = array_ops.shape(x)
        out_h = _transposed_length(dims[h_axis], kh, sh, pad)
        out_w = _transposed_length(dims[h_axis + 1], kw, sw, pad)
        spatial = [out_h, out_w]
        out_dims = ([dims[0]] + spatial + [filters] if fmt == "NHWC"
                    else [dims[0], filters] + spatial)
        stride4 = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
        outputs = conv_ops.conv2d_transpose(x, kernel, array_ops.stack(out_dims), stride4,
                                            padding=pad, data_format=fmt)
        static = [x.shape[0].value] + [
            _transposed_length(x.shape[h_axis + i].value, k, st, pad)
            for i, (k, st) in enumerate([(kh, sh), (kw, sw)])]
        outputs.set_shape(static + [filters] if fmt == "NHWC"
                          else [static[0], filters] + static[1:])
        return _layer_output(outputs, filters, use_bias, bias_initializer, bias_regularizer,
                             bias_constraint, trainable, activation, activity_regularizer, fmt)


def _pooling2d(pool_fn, default_name, inputs, pool_size, strides, padding, data_format, name):
    x = convert_to_tensor(inputs)
    ph, pw = _pair(pool_size, "pool_size")
    sh, sw = _pair(strides, "strides")
    fmt = _nn_data_format(data_format)
    window = [1, ph, pw, 1] if fmt == "NHWC" else [1, 1, ph, pw]
    stride4 = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
    kwargs = {} if fmt == "NHWC" else {"data_format": fmt}
    with name_scope(name, default_name, [x]):
        return pool_fn(x, ksize=window, strides=stride4, padding=_padding(padding), **kwargs)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    return _pooling2d(conv_ops.max_pool, "max_pooling2d", inputs, pool_size, strides, padding,
                      data_format, name)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    return _pooling2d(conv_ops.avg_pool, "average_pooling2d", inputs, pool_size, strides,
                      padding, data_format, name)


# ------------------------------------------------------------------ reshaping, dropout
def flatten(inputs, name=None, data_format="channels_last"):
    """[batch, d1, d2, ...] -> [batch, d1 * d2 * ...]; the batch dimension may be unknown."""
    x = convert_to_tensor(inputs)
    with name_scope(name, "flatten", [x]):
        if data_format == "channels_first" and x.shape.ndims is not None and x.shape.ndims > 2:
            x = array_ops.transpose(x, [0] + list(range(2, x.shape.ndims)) + [1])
        if x.shape.ndims == 1:
            return array_ops.expand_dims(x, 1)
        rest = x.shape[1:] if x.shape.ndims is not None else TensorShape(None)
        if rest.is_fully_defined():
            y = array_ops.reshape(x, [-1, rest.num_elements()])
        else:
            y = array_ops.reshape(x, array_ops.stack([array_ops.shape(x)[0], -1]))
        batch = x.shape[0] if x.shape.ndims else None
        y.set_shape([batch, rest.num_elements() if rest.is_fully_defined() else None])
        return y


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Drops units with probability `rate` (scaling the rest by 1/(1-rate)) when training.

    `training` is a Python bool or a bool tensor; for a tensor both results are built and
    gc.where picks one at run time."""
    x = convert_to_tensor(inputs)
    with name_scope(name, "dropout", [x]):
        if not _is_tensor(training):
            if not training:
                return identity(x)
            return nn_ops.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)
        training = convert_to_tensor(training, dtype=dtypes.bool)
        dropped = nn_ops.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)
        pick = array_ops.broadcast_to(training, array_ops.shape(x))
        return math_ops.where(pick, dropped, x)


# ------------------------------------------------------------------ batch normalization
def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None,
                        moving_mean_initializer=None, moving_variance_initializer=None,
                        beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                        gamma_constraint=None, training=False, trainable=True, name=None,
                        reuse=None, renorm=False, renorm_clipping=None, renorm_momentum=0.99,
                        fused=None, virtual_batch_size=None, adjustment=None):
    """Normalizes over all axes but `axis`: batch statistics when training, the moving
    averages otherwise. The moving-average updates go to GraphKeys.UPDATE_OPS; run them
    with the train op (`with gc.control_dependencies(gc.get_collection(UPDATE_OPS))`)."""
    if renorm or virtual_batch_size is not None or adjustment is not None:
        raise ValueError("batch_normalization: renorm, virtual_batch_size and adjustment are "
                         "not supported by graphc")
    x = _float_inputs(inputs)
    rank = x.shape.ndims
    if rank is None:
        raise ValueError(f"Input has undefined rank: {x.shape}")
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"Invalid axis: {axis}")
    channels = x.shape[axis].value
    if channels is None:
        raise ValueError(f"Input has undefined `axis` dimension. Input shape: {x.shape}")
    use_fused = _fused_batch_norm_applies(fused, rank, axis, x.dtype)
    reduce_axes = [i for i in range(rank) if i != axis]
    # parameters of shape [C] broadcast against x only when C is the last axis
    param_shape = None if axis == rank - 1 else [channels if i == axis else 1
                                                 for i in range(rank)]
    with _layer_scope(name, "batch_normalization", reuse, x):
        gamma = get_variable("gamma", [channels], x.dtype, initializer=_ones(gamma_initializer),
                             regularizer=gamma_regularizer, trainable=trainable,
                             constraint=gamma_constraint) if scale else None
        beta = get_variable("beta", [channels], x.dtype, initializer=_zeros(beta_initializer),
                            regularizer=beta_regularizer, trainable=trainable,
                            constraint=beta_constraint) if center else None
        moving_mean = get_variable("moving_mean", [channels], x.dtype,
                                   initializer=_zeros(moving_mean_initializer), trainable=False)
        moving_var = get_variable("moving_variance", [channels], x.dtype,
                                  initializer=_ones(moving_variance_initializer), trainable=False)
        if use_fused:
            return _fused_batch_norm(x, axis, gamma, beta, moving_mean, moving_var, epsilon,
                                     training, momentum)
        mean, variance = _batchnorm_statistics(x, reduce_axes, training, momentum,
                                               moving_mean, moving_var)
        params = [mean, variance, beta, gamma]
        if param_shape is not None:
            params = [None if p is None else array_ops.reshape(p, param_shape) for p in params]
        mean, variance, beta, gamma = params
        return nn_ops.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def _fused_batch_norm_applies(fused, rank, axis, dtype):
    """Whether tf.compat.v1.layers takes the fused kernel's path. Its build() turns
    fused=None or True into `rank == 4 and _fused_can_be_used()` (channel axis 1 or 3, a
    float16/float32 compute dtype: FusedBatchNorm has no float64 kernel) and keeps
    fused=False; the paths differ in the moving variance (see _fused_batch_norm)."""
    if fused is False:
        return False
    return rank == 4 and axis in (1, 3) and dtype in (dtypes.float16, dtypes.float32)


def _fused_batch_norm(x, axis, gamma, beta, moving_mean, moving_var, epsilon, training,
                      momentum):
    """TF's fused path: nn.fused_batch_norm normalizes with the batch's biased variance but
    reports the Bessel-corrected one (n/(n-1), n = N*H*W), and Keras' v1 layer keeps that
    correction (_bessels_correction_test_only) in the moving-variance update."""
    fmt = "NCHW" if axis == 1 else "NHWC"
    channels = x.shape[axis].value
    scale = gamma.value() if gamma is not None else array_ops.ones([channels], x.dtype)
    offset = beta.value() if beta is not None else array_ops.zeros([channels], x.dtype)
    is_tensor = _is_tensor(training)
    if not is_tensor and not training:
        return nn_ops.fused_batch_norm(x, scale, offset, moving_mean.value(), moving_var.value(),
                                       epsilon, data_format=fmt, is_training=False)[0]
    y, batch_mean, batch_var = nn_ops.fused_batch_norm(x, scale, offset, epsilon=epsilon,
                                                       data_format=fmt)
    if is_tensor:
        training = convert_to_tensor(training, dtype=dtypes.bool)
        inferred = nn_ops.fused_batch_norm(x, scale, offset, moving_mean.value(),
                                           moving_var.value(), epsilon, data_format=fmt,
                                           is_training=False)[0]
        y = math_ops.where(training, y, inferred)
    _add_moving_average_updates(moving_mean, moving_var, batch_mean, batch_var,
                                _decay(training, is_tensor, momentum, x.dtype))
    return y


def _batchnorm_statistics(x, reduce_axes, training, momentum, moving_mean, moving_var):
    """(mean, variance) to normalize with; adds the moving-average updates when training."""
    is_tensor = _is_tensor(training)
    if not is_tensor and not training:
        return moving_mean.value(), moving_var.value()
    batch_mean, batch_var = nn_ops.moments(x, reduce_axes)
    mean, variance = batch_mean, batch_var
    if is_tensor:
        training = convert_to_tensor(training, dtype=dtypes.bool)
        mean = math_ops.where(training, batch_mean, moving_mean.value())
        variance = math_ops.where(training, batch_var, moving_var.value())
    _add_moving_average_updates(moving_mean, moving_var, batch_mean, batch_var,
                                _decay(training, is_tensor, momentum, x.dtype))
    return mean, variance


def _decay(training, is_tensor, momentum, dtype):
    """1 - momentum; off-training runs (a false `training` tensor) leave the averages as
    they are: decay 0."""
    if is_tensor:
        return math_ops.cast(training, dtype) * (1.0 - momentum)
    return convert_to_tensor(1.0 - momentum, dtype=dtype)


def _add_moving_average_updates(moving_mean, moving_var, batch_mean, batch_var, decay):
    g = get_default_graph()
    for var, stat in [(moving_mean, batch_mean), (moving_var, batch_var)]:
        with name_scope("AssignMovingAvg") as scope:
            # var -= (var - stat) * (1 - momentum), as Keras' _assign_moving_average, whose
            # assign_sub takes the scope's name
            update = var.assign_sub((var.value() - array_ops.stop_gradient(stat)) * decay,
                                    name=scope)
        g.add_to_collection(GraphKeys.UPDATE_OPS, update)
