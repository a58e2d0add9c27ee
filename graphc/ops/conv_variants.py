"""Convolutions TF1 has besides conv2d, composed of conv2d: conv1d (a conv2d over a height
of 1), depthwise_conv2d (one conv2d with a block-diagonal filter: input channel c feeds
only its own channel_multiplier outputs, c * multiplier + m, TF's order),
separable_conv2d (depthwise, then a 1x1 conv2d), xw_plus_b and relu_layer. The compositions compile
as conv2d does and differentiate through it. The depthwise filter does C times the
multiply-adds of a true depthwise kernel for C input channels: fine for the narrow layers
of TF1 scripts, slow for very wide ones.
"""
from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, matmul_ops, nn_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import identity
from graphc.ops.conv_ops import conv2d

__all__ = ["conv1d", "depthwise_conv2d", "depthwise_conv2d_native", "separable_conv2d",
           "xw_plus_b", "relu_layer"]


def conv1d(value=None, filters=None, stride=None, padding=None, use_cudnn_on_gpu=None,
           data_format=None, name=None, input=None, dilations=None):
    """1-D convolution of [batch, width, in] (NWC, or NCW) with a [k, in, out] filter."""
    value = input if value is None else value
    data_format = data_format or "NWC"
    if data_format not in ("NWC", "NCW", "NHWC", "NCHW"):
        raise ValueError(f"conv1d: data_format must be NWC or NCW, got {data_format!r}")
    channels_last = data_format in ("NWC", "NHWC")
    with name_scope(name, "conv1d", [value, filters]) as scope:
        x = convert_to_tensor(value, name="input")
        if x.shape.ndims is not None and x.shape.ndims != 3:
            raise ValueError(f"conv1d: input must be rank 3, got shape {x.shape}")
        w = convert_to_tensor(filters, dtype_hint=x.dtype, name="filters")
        spatial = 1 if channels_last else 2  # the inserted height axis
        stride = _one(stride, "stride")
        dilation = _one(dilations if dilations is not None else 1, "dilations")
        strides = [1, 1, stride, 1] if channels_last else [1, 1, 1, stride]
        rates = [1, 1, dilation, 1] if channels_last else [1, 1, 1, dilation]
        y = conv2d(array_ops.expand_dims(x, spatial), array_ops.expand_dims(w, 0), strides,
                   padding, data_format="NHWC" if channels_last else "NCHW", dilations=rates)
        return array_ops.squeeze(y, [spatial], name=scope)


def _one(value, what):
    """conv1d's stride/dilation: an int, or a list of 1 or 3 (the outer ones 1)."""
    if isinstance(value, int):
        return value
    value = list(value)
    if len(value) == 1:
        return int(value[0])
    if len(value) == 3 and value[0] == value[2] == 1:
        return int(value[1])
    raise ValueError(f"conv1d: {what} must be an int or a list of 1 or 3 ints with 1 outside, "
                     f"got {value}")


def _block_diagonal(w, channels, multiplier):
    """[h, w, C, M] -> [h, w, C, C*M] with w[..., c, m] at [..., c, c*M + m], zeros
    elsewhere (selected, so an inf weight leaks no NaN into other channels)."""
    r = array_ops.range(channels)
    eye = math_ops.equal(array_ops.expand_dims(r, 1), array_ops.expand_dims(r, 0))
    eye = array_ops.reshape(eye, [1, 1, channels, channels, 1])
    dims = array_ops.shape(w)
    spread = array_ops.stack([dims[0], dims[1], channels, channels, multiplier])
    wide = array_ops.broadcast_to(array_ops.expand_dims(w, 3), spread)
    blocks = math_ops.where(array_ops.broadcast_to(eye, spread), wide,
                            array_ops.zeros_like(wide))
    return array_ops.reshape(blocks, array_ops.stack([dims[0], dims[1], channels,
                                                      channels * multiplier]))


def _rate(rate, dilations, data_format):
    """TF1's rate/dilations of depthwise_conv2d, [rate_h, rate_w], as conv2d's dilations."""
    rate = dilations if rate is None else rate
    if rate is None:
        return None
    rh, rw = (rate, rate) if isinstance(rate, int) else (int(r) for r in rate)
    return [1, rh, rw, 1] if data_format == "NHWC" else [1, 1, rh, rw]


def depthwise_conv2d(input, filter, strides, padding, rate=None, name=None,
                     data_format=None, dilations=None):
    """Each input channel convolved with its own [h, w, 1, multiplier] filter slice; the
    output has in_channels * multiplier channels."""
    data_format = data_format or "NHWC"
    with name_scope(name, "depthwise", [input, filter]) as scope:
        x = convert_to_tensor(input, name="input")
        w = convert_to_tensor(filter, dtype_hint=x.dtype, name="filter")
        if w.shape.ndims is not None and w.shape.ndims != 4:
            raise ValueError(f"depthwise_conv2d: filter must be rank 4 [h, w, in, multiplier],"
                             f" got shape {w.shape}")
        channels = w.shape[2].value if w.shape.ndims else None
        multiplier = w.shape[3].value if w.shape.ndims else None
        if channels is None or multiplier is None:
            raise ValueError(f"depthwise_conv2d: the filter's in_channels and multiplier must "
                             f"be known, got shape {w.shape}")
        axis = 3 if data_format == "NHWC" else 1
        if x.shape.ndims is not None and x.shape[axis].value not in (None, channels):
            raise ValueError(f"depthwise_conv2d: input has {x.shape[axis].value} channels, "
                             f"the filter {channels}")
        y = conv2d(x, _block_diagonal(w, channels, multiplier), strides, padding,
                   data_format=data_format, dilations=_rate(rate, dilations, data_format))
        return identity(y, name=scope)


def depthwise_conv2d_native(input, filter, strides, padding, data_format="NHWC",
                            dilations=None, name=None):
    return depthwise_conv2d(input, filter, strides, padding, name=name,
                            data_format=data_format, dilations=dilations)


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, rate=None,
                     name=None, data_format=None, dilations=None):
    """depthwise_conv2d, then a 1x1 conv2d mixing its channels."""
    data_format = data_format or "NHWC"
    with name_scope(name, "separable_conv2d", [input, depthwise_filter,
                                               pointwise_filter]) as scope:
        depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, rate=rate,
                                     data_format=data_format, dilations=dilations)
        pointwise = convert_to_tensor(pointwise_filter, dtype_hint=depthwise.dtype)
        y = conv2d(depthwise, pointwise, [1, 1, 1, 1], "VALID", data_format=data_format)
        return identity(y, name=scope)


def xw_plus_b(x, weights, biases, name=None):
    """matmul(x, weights) + biases."""
    with name_scope(name, "xw_plus_b", [x, weights, biases]) as scope:
        x = convert_to_tensor(x, name="x")
        return nn_ops.bias_add(matmul_ops.matmul(x, convert_to_tensor(weights, dtype_hint=x.dtype)),
                               convert_to_tensor(biases, dtype_hint=x.dtype), name=scope)


def relu_layer(x, weights, biases, name=None):
    """relu(matmul(x, weights) + biases)."""
    with name_scope(name, "relu_layer", [x, weights, biases]) as scope:
        x = convert_to_tensor(x, name="x")
        return nn_ops.relu(xw_plus_b(x, weights, biases), name=scope)
