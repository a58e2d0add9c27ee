"""2-D convolution and pooling (gc.nn.conv2d, conv2d_transpose, max_pool, avg_pool), as in TF1.

Images are NHWC (or NCHW); filters are [height, width, in_channels, out_channels]. The
reference kernels work in NHWC: they gather every window of the padded input as a
strided view (N, OH, OW, KH, KW, C) and reduce it with one matmul/max/sum, and they
scatter gradients back with one slice-add per filter tap, never a loop over pixels.

Gradients follow TF: Conv2D's are Conv2DBackpropInput/Conv2DBackpropFilter, whose own
gradients are convolutions again (so second derivatives work); MaxPool's is MaxPoolGrad
(routing to the first maximum of each window, as TF's CPU kernel), whose gradient is
MaxPoolGradGrad; AvgPool's is AvgPoolGrad, whose gradient is AvgPool.
"""
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from graphc import dtypes, errors
from graphc.framework.graph import name_scope
from graphc.framework.op_def import register_op
from graphc.framework.static_value import shape_from_tensor
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops
from graphc.ops.constant_ops import constant, convert_to_tensor

__all__ = ["conv2d", "conv2d_transpose", "conv2d_backprop_input", "conv2d_backprop_filter",
           "max_pool", "max_pool2d", "avg_pool", "avg_pool2d"]

_PADDINGS = ("SAME", "VALID", "EXPLICIT")
_FORMATS = ("NHWC", "NCHW")


# ------------------------------------------------------------------ layout and attrs
def _hw(values, data_format):
    """The (height, width) entries of a 4-list given in `data_format` order."""
    return (values[1], values[2]) if data_format == "NHWC" else (values[2], values[3])


def _nhwc(dims, data_format):
    """[n, h, w, c] of a 4-list given in `data_format` order."""
    n, a, b, c = dims
    return [n, a, b, c] if data_format == "NHWC" else [n, b, c, a]


def _from_nhwc(dims, data_format):
    n, h, w, c = dims
    return [n, h, w, c] if data_format == "NHWC" else [n, c, h, w]


def _array_to_nhwc(x, data_format):
    return x if data_format == "NHWC" else x.transpose(0, 2, 3, 1)


def _array_from_nhwc(x, data_format):
    return x if data_format == "NHWC" else x.transpose(0, 3, 1, 2)


def _spatial_list(value, data_format, what, fill=1):
    """TF's int / list of 1, 2 or 4 -> a 4-list in `data_format` order.

    Other lengths pass through so that the op's shape inference reports them."""
    if value is None:
        raise ValueError(f"{what} must be given")
    if isinstance(value, (int, np.integer)):
        value = [value]
    value = [int(v) for v in value]
    if len(value) == 1:
        value = value * 2
    if len(value) == 2:
        return _from_nhwc([fill, value[0], value[1], fill], data_format)
    return value


def _padding_attrs(padding, data_format):
    """(padding string, explicit_paddings) from a string or a list of 4 [before, after]."""
    if isinstance(padding, (list, tuple)):
        pairs = [list(p) for p in padding]
        if len(pairs) != 4 or any(len(p) != 2 for p in pairs):
            raise ValueError(f"When padding is a list it must have 4 [before, after] pairs, "
                             f"got {padding}")
        n, h, w, c = _nhwc(pairs, data_format)
        if any(n) or any(c):
            raise ValueError(f"Nonzero explicit padding in the batch or depth dimensions is not "
                             f"supported, got {padding}")
        return "EXPLICIT", [int(v) for p in pairs for v in p]
    return padding, []


def _check_attrs(a, window_attr=None):
    """Validates strides/padding/data_format (and ksize or dilations) as TF's shape fns."""
    fmt = a["data_format"]
    if fmt not in _FORMATS:
        raise ValueError(f"Invalid data format string: {fmt}")
    if a["padding"] not in _PADDINGS or (window_attr == "ksize" and a["padding"] == "EXPLICIT"):
        allowed = ", ".join(f"'{p}'" for p in _PADDINGS[:2 if window_attr == "ksize" else 3])
        raise ValueError(f"Attr 'padding' passed string '{a['padding']}' not in: {allowed}")
    for attr in ("strides", window_attr):
        if attr is None:
            continue
        values = list(a[attr])
        if len(values) != 4:
            raise ValueError(f"{attr} must specify 4 dimensions, got {values}")
        n, _, _, c = _nhwc(values, fmt)
        if n != 1 or c != 1:
            raise ValueError(f"Current implementation does not yet support {attr} in the batch "
                             f"and depth dimensions, got {values}")
        if min(values) < 1:
            raise ValueError(f"{attr} must be positive, got {values}")
    if a["padding"] == "EXPLICIT":
        pads = list(a["explicit_paddings"])
        if len(pads) != 8 or min(pads) < 0:
            raise ValueError(f"explicit_paddings must have 8 non-negative entries, got {pads}")


def _rank4(shape, what):
    if shape.ndims is None:
        return [None] * 4
    if shape.ndims != 4:
        raise ValueError(f"Shape must be rank 4 but is rank {shape.ndims} for {what} {shape}")
    return shape.as_list()


# ---------------------------------------------------------------------- geometry
class _Window(NamedTuple):
    """Where the windows of a pooling/convolution lie, per spatial axis (height, width)."""
    out: tuple        # output size
    pad: tuple        # (before, after) zero padding
    size: tuple       # window size in filter taps
    stride: tuple
    dilation: tuple


def _axis_geometry(size, k, stride, dilation, padding, explicit):
    """(output size, pad before, pad after) of one axis; output None when size is unknown."""
    if size is not None and k is None and padding == "SAME":
        return -(-size // stride), 0, 0  # SAME's output size does not depend on the window
    if size is None or k is None:
        return None, 0, 0
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2
    before, after = explicit if padding == "EXPLICIT" else (0, 0)
    num = size + before + after - eff + stride
    out = num // stride if num >= 0 else -(-num // stride)  # C's truncation, as TF
    if out < 0:
        raise ValueError(f"Computed output size would be negative: {out} [input_size: {size}, "
                         f"effective_filter_size: {eff}, stride: {stride}]")
    return out, before, after


def _window(in_hw, k_hw, a):
    """The _Window of input spatial size in_hw and window size k_hw under attrs `a`."""
    fmt = a["data_format"]
    strides = _hw(a["strides"], fmt)
    dilations = _hw(a.get("dilations") or [1, 1, 1, 1], fmt)
    pads = a.get("explicit_paddings") or [0] * 8
    pairs = _hw([pads[0:2], pads[2:4], pads[4:6], pads[6:8]], fmt)
    axes = [_axis_geometry(in_hw[i], k_hw[i], strides[i], dilations[i], a["padding"], pairs[i])
            for i in range(2)]
    return _Window(tuple(ax[0] for ax in axes), tuple(ax[1:] for ax in axes), tuple(k_hw),
                   tuple(strides), tuple(dilations))


def _patches(x, win, fill):
    """Every window of NHWC x as a strided view (N, OH, OW, KH, KW, C); pads with `fill`."""
    (oh, ow), (kh, kw) = win.out, win.size
    n, c = x.shape[0], x.shape[3]
    if oh * ow == 0:
        return np.zeros((n, oh, ow, kh, kw, c), x.dtype)
    (pt, pb), (pl, pr) = win.pad
    if pt or pb or pl or pr:
        x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    (sh, sw), (dh, dw) = win.stride, win.dilation
    view = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    return view[:, :oh * sh:sh, :ow * sw:sw, :, ::dh, ::dw].transpose(0, 1, 2, 4, 5, 3)


def _im2col(x, win):
    """The zero-padded windows of NHWC x as a contiguous (N * OH * OW, KH * KW * C) matrix."""
    return _matrix(np.ascontiguousarray(_patches(x, win, 0)), 3)


def _matrix(a, lead):
    """a as a (prod(a.shape[:lead]), prod(a.shape[lead:])) matrix: reshape(-1, k) cannot
    infer the rows of an empty array (a batch, a channel or a filter count of 0)."""
    return a.reshape(int(np.prod(a.shape[:lead])), int(np.prod(a.shape[lead:])))


def _scatter_patches(cols, nhwc, win):
    """The adjoint of _patches: adds cols (N, OH, OW, KH, KW, C) into an NHWC array."""
    n, h, w, c = nhwc
    (pt, pb), (pl, pr) = win.pad
    out = np.zeros((n, h + pt + pb, w + pl + pr, c), np.result_type(cols.dtype, np.float32))
    (oh, ow), (kh, kw) = win.out, win.size
    (sh, sw), (dh, dw) = win.stride, win.dilation
    if oh * ow:
        for i in range(kh):  # one strided slice-add per filter tap
            for j in range(kw):
                out[:, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                    j * dw:j * dw + (ow - 1) * sw + 1:sw, :] += cols[:, :, :, i, j]
    return out[:, pt:pt + h, pl:pl + w, :]


def _sizes(value, what):
    sizes = [int(v) for v in np.reshape(value, [-1])]
    if len(sizes) != 4 or min(sizes) < 0:
        raise errors.KernelError(f"{what} must be 4 non-negative sizes, got {sizes}")
    return sizes


def _check_out_backprop(dy_nhwc, n, win, channels, op_type):
    expected = (n, win.out[0], win.out[1], channels)
    if tuple(dy_nhwc.shape) != expected:
        raise errors.KernelError(f"{op_type}: Size of out_backprop {list(dy_nhwc.shape)} doesn't "
                                 f"match computed {list(expected)} (NHWC)")


# ------------------------------------------------------------------- conv kernels
def _conv2d_kernel(x, w, **a):
    data_format = a["data_format"]
    x = _array_to_nhwc(x, data_format)
    if x.shape[3] != w.shape[2]:
        raise errors.KernelError(f"input depth {x.shape[3]} must match filter depth {w.shape[2]}")
    win = _window(x.shape[1:3], w.shape[:2], a)
    y = _im2col(x, win) @ _matrix(w, 3)
    return _array_from_nhwc(y.reshape(x.shape[0], *win.out, w.shape[3]), data_format)


def _conv2d_backprop_input_kernel(input_sizes, w, dy, **a):
    data_format = a["data_format"]
    n, h, wd, c = _nhwc(_sizes(input_sizes, "input_sizes"), data_format)
    dy = _array_to_nhwc(dy, data_format)
    win = _window((h, wd), w.shape[:2], a)
    if c != w.shape[2]:
        raise errors.KernelError(f"input depth {c} must match filter depth {w.shape[2]}")
    _check_out_backprop(dy, n, win, w.shape[3], "Conv2DBackpropInput")
    cols = _matrix(dy, 3) @ _matrix(w, 3).T
    dx = _scatter_patches(cols.reshape(dy.shape[:3] + w.shape[:3]), (n, h, wd, c), win)
    return _array_from_nhwc(dx, data_format)


def _conv2d_backprop_filter_kernel(x, filter_sizes, dy, **a):
    data_format = a["data_format"]
    kh, kw, ci, co = _sizes(filter_sizes, "filter_sizes")
    x, dy = _array_to_nhwc(x, data_format), _array_to_nhwc(dy, data_format)
    if x.shape[3] != ci:
        raise errors.KernelError(f"input depth {x.shape[3]} must match filter depth {ci}")
    win = _window(x.shape[1:3], (kh, kw), a)
    _check_out_backprop(dy, x.shape[0], win, co, "Conv2DBackpropFilter")
    dw = _im2col(x, win).T @ _matrix(dy, 3)
    return dw.reshape(kh, kw, ci, co)


# -------------------------------------------------------------------- pool kernels
def _pool_window(nhwc_shape, ksize, a):
    return _window(nhwc_shape[1:3], _hw(ksize, a["data_format"]), a)


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_kernel(x, ksize, **a):
    x = _array_to_nhwc(x, a["data_format"])
    y = _patches(x, _pool_window(x.shape, ksize, a), _lowest(x.dtype)).max(axis=(3, 4))
    return _array_from_nhwc(y, a["data_format"])


def _argmax_positions(x, win):
    """Flat index into NHWC x of each window's first maximum (row-major in the window)."""
    index = np.arange(x.size).reshape(x.shape)
    taps = win.size[0] * win.size[1]
    flat = lambda p: p.reshape(p.shape[:3] + (taps, x.shape[3]))  # noqa: E731
    values = flat(_patches(x, win, _lowest(x.dtype)))
    where = flat(_patches(index, win, -1))
    first = np.take_along_axis(where, values.argmax(axis=3)[:, :, :, None], axis=3)[:, :, :, 0]
    # a padding cell can win only when every real value is the lowest: take the first real one
    real = (where >= 0).argmax(axis=3)[:, :, :, None]
    first_real = np.take_along_axis(where, real, axis=3)[:, :, :, 0]
    return np.where(first >= 0, first, first_real)


def _max_pool_grad_kernel(x, y, dy, ksize, **a):
    fmt = a["data_format"]
    x, dy = _array_to_nhwc(x, fmt), _array_to_nhwc(dy, fmt)
    win = _pool_window(x.shape, ksize, a)
    _check_out_backprop(dy, x.shape[0], win, x.shape[3], "MaxPoolGrad")
    dx = np.bincount(_argmax_positions(x, win).ravel(), weights=dy.ravel(), minlength=x.size)
    return _array_from_nhwc(dx.reshape(x.shape).astype(dy.dtype), fmt)


def _max_pool_grad_grad_kernel(x, y, g, ksize, **a):
    fmt = a["data_format"]
    x, g = _array_to_nhwc(x, fmt), _array_to_nhwc(g, fmt)
    if g.shape != x.shape:
        raise errors.KernelError(f"MaxPoolGradGrad: grad shape {list(g.shape)} must match the "
                                 f"input shape {list(x.shape)}")
    gathered = g.reshape(-1)[_argmax_positions(x, _pool_window(x.shape, ksize, a))]
    return _array_from_nhwc(gathered, fmt)


def _window_counts(in_hw, win):
    """(OH, OW, 1): how many real (unpadded) cells each window covers."""
    counts = []
    for axis in range(2):
        start = np.arange(win.out[axis]) * win.stride[axis] - win.pad[axis][0]
        end = np.minimum(start + win.size[axis], in_hw[axis])
        counts.append(end - np.maximum(start, 0))
    return np.multiply.outer(counts[0], counts[1])[..., None]


def _avg_pool_kernel(x, ksize, **a):
    x = _array_to_nhwc(x, a["data_format"])
    win = _pool_window(x.shape, ksize, a)
    y = _patches(x, win, 0).sum(axis=(3, 4)) / _window_counts(x.shape[1:3], win)
    return _array_from_nhwc(y.astype(x.dtype), a["data_format"])


def _avg_pool_grad_kernel(orig_input_shape, dy, ksize, **a):
    fmt = a["data_format"]
    nhwc = _nhwc(_sizes(orig_input_shape, "orig_input_shape"), fmt)
    dy = _array_to_nhwc(dy, fmt)
    win = _pool_window(nhwc, ksize, a)
    _check_out_backprop(dy, nhwc[0], win, nhwc[3], "AvgPoolGrad")
    share = dy / _window_counts(nhwc[1:3], win)
    n, oh, ow, c = share.shape
    cols = np.broadcast_to(share[:, :, :, None, None, :], (n, oh, ow, *win.size, c))
    return _array_from_nhwc(_scatter_patches(cols, nhwc, win).astype(dy.dtype), fmt)


# ------------------------------------------------------------------ shape inference
def _check_dtype(t, what, allowed_integer=False):
    if not (t.dtype.is_floating or (allowed_integer and t.dtype.is_integer)):
        kinds = "real numbers" if allowed_integer else "float16, float32, float64"
        raise TypeError(f"Value passed to parameter '{what}' has DataType {t.dtype.name} not in "
                        f"list of allowed values: {kinds}")


def _check_same_dtype(t, what, ref):
    if t.dtype != ref.dtype:
        raise TypeError(f"Input '{what}' has type {t.dtype.name} that does not match type "
                        f"{ref.dtype.name} of argument 'input'.")


def _check_equal(a, b, message):
    if a is not None and b is not None and a != b:
        raise ValueError(message.format(a, b))


def _sizes_shape(t, what):
    if not t.dtype.is_integer:
        raise TypeError(f"{what} must be int32 or int64, got {t.dtype.name}")
    if not t.shape.is_compatible_with([4]):
        raise ValueError(f"{what} must be a vector of 4 sizes, got shape {t.shape}")
    return _rank4(shape_from_tensor(t), what)


def _out_shape(nhwc, win, channels, a, out_backprop=None):
    """The output shape; checks that out_backprop (if given) has it."""
    dims = [nhwc[0], win.out[0], win.out[1], channels]
    if out_backprop is not None:
        actual = _nhwc(_rank4(out_backprop.shape, "out_backprop"), a["data_format"])
        for got, want in zip(actual, dims):
            _check_equal(got, want, "Size of out_backprop doesn't match computed: actual = {}, "
                                    "computed = {}")
    return TensorShape(_from_nhwc(dims, a["data_format"]))


def _conv_geometry(input_shape, filter_shape, a):
    """(input dims NHWC, filter dims HWIO, window), checking depths match."""
    _check_attrs(a, "dilations")
    nhwc = _nhwc(input_shape, a["data_format"])
    kh, kw, ci, co = filter_shape
    _check_equal(nhwc[3], ci, "Depth of input ({}) must match the input depth of filter ({})")
    return nhwc, (kh, kw, ci, co), _window(nhwc[1:3], (kh, kw), a)


def _conv2d_infer(inputs, a):
    x, w = inputs
    _check_dtype(x, "input")
    _check_same_dtype(w, "filter", x)
    nhwc, hwio, win = _conv_geometry(_rank4(x.shape, "input"), _rank4(w.shape, "filter"), a)
    return _out_shape(nhwc, win, hwio[3], a), x.dtype


def _conv2d_backprop_input_infer(inputs, a):
    sizes, w, dy = inputs
    _check_dtype(w, "filter")
    _check_same_dtype(dy, "out_backprop", w)
    input_shape = _sizes_shape(sizes, "input_sizes")
    nhwc, hwio, win = _conv_geometry(input_shape, _rank4(w.shape, "filter"), a)
    _out_shape(nhwc, win, hwio[3], a, out_backprop=dy)
    return TensorShape(input_shape), w.dtype


def _conv2d_backprop_filter_infer(inputs, a):
    x, sizes, dy = inputs
    _check_dtype(x, "input")
    _check_same_dtype(dy, "out_backprop", x)
    filter_shape = _sizes_shape(sizes, "filter_sizes")
    nhwc, hwio, win = _conv_geometry(_rank4(x.shape, "input"), filter_shape, a)
    _out_shape(nhwc, win, hwio[3], a, out_backprop=dy)
    return TensorShape(filter_shape), x.dtype


def _pool_geometry(input_shape, a):
    _check_attrs(a, "ksize")
    nhwc = _nhwc(input_shape, a["data_format"])
    return nhwc, _window(nhwc[1:3], _hw(a["ksize"], a["data_format"]), a)


def _pool_infer(allowed_integer):
    def infer(inputs, a):
        x = inputs[0]
        _check_dtype(x, "input", allowed_integer)
        nhwc, win = _pool_geometry(_rank4(x.shape, "input"), a)
        return _out_shape(nhwc, win, nhwc[3], a), x.dtype
    return infer


def _max_pool_grad_infer(inputs, a):
    x, y, dy = inputs
    _check_dtype(x, "orig_input", allowed_integer=True)
    _check_same_dtype(dy, "grad", x)
    nhwc, win = _pool_geometry(_rank4(x.shape, "orig_input"), a)
    _out_shape(nhwc, win, nhwc[3], a, out_backprop=dy)
    return x.shape.merge_with(TensorShape([None] * 4)), dy.dtype


def _max_pool_grad_grad_infer(inputs, a):
    x, y, g = inputs
    _check_dtype(x, "orig_input", allowed_integer=True)
    nhwc, win = _pool_geometry(_rank4(x.shape.merge_with(g.shape), "orig_input"), a)
    return _out_shape(nhwc, win, nhwc[3], a), g.dtype


def _avg_pool_grad_infer(inputs, a):
    sizes, dy = inputs
    _check_dtype(dy, "grad")
    input_shape = _sizes_shape(sizes, "orig_input_shape")
    nhwc, win = _pool_geometry(input_shape, a)
    _out_shape(nhwc, win, nhwc[3], a, out_backprop=dy)
    return TensorShape(input_shape), dy.dtype


# ---------------------------------------------------------------------- gradients
def _shape_tensor(x):
    """x's shape as an int32 tensor: a constant when static, else a Shape op."""
    if x.shape.is_fully_defined():
        return constant(np.array(x.shape.as_list(), dtype=np.int32))
    return array_ops.shape(x)


def _create(op_type, inputs, attrs, name=None):
    return inputs[-1].graph.create_op(op_type, inputs, dict(attrs), name or op_type).outputs[0]


def _conv2d_grad(op, g):
    x, w = op.inputs
    return [_create("Conv2DBackpropInput", [_shape_tensor(x), w, g], op.attrs),
            _create("Conv2DBackpropFilter", [x, _shape_tensor(w), g], op.attrs)]


def _conv2d_backprop_input_grad(op, g):
    _, w, dy = op.inputs
    return [None,
            _create("Conv2DBackpropFilter", [g, _shape_tensor(w), dy], op.attrs),
            _create("Conv2D", [g, w], op.attrs)]


def _conv2d_backprop_filter_grad(op, g):
    x, _, dy = op.inputs
    return [_create("Conv2DBackpropInput", [_shape_tensor(x), g, dy], op.attrs),
            None,
            _create("Conv2D", [x, g], op.attrs)]


def _max_pool_grad(op, g):
    return [_create("MaxPoolGrad", [op.inputs[0], op.outputs[0], g], op.attrs)]


def _max_pool_grad_grad(op, g):
    # the routing depends on orig_input only through which cell is largest: zero almost everywhere
    x, y, _ = op.inputs
    return [None, None, _create("MaxPoolGradGrad", [x, y, g], op.attrs)]


def _max_pool_grad_grad_grad(op, g):
    x, y, _ = op.inputs
    return [None, None, _create("MaxPoolGrad", [x, y, g], op.attrs)]


def _avg_pool_grad(op, g):
    return [_create("AvgPoolGrad", [_shape_tensor(op.inputs[0]), g], op.attrs)]


def _avg_pool_grad_grad(op, g):
    return [None, _create("AvgPool", [g], op.attrs)]


# (type, infer, kernel, grad, kind): pooling and its gradients are "window" ops (gather
# form: each output reads a window of its input)
_OPS = [
    ("Conv2D", _conv2d_infer, _conv2d_kernel, _conv2d_grad, "conv"),
    ("Conv2DBackpropInput", _conv2d_backprop_input_infer, _conv2d_backprop_input_kernel,
     _conv2d_backprop_input_grad, "conv"),
    ("Conv2DBackpropFilter", _conv2d_backprop_filter_infer, _conv2d_backprop_filter_kernel,
     _conv2d_backprop_filter_grad, "conv"),
    ("MaxPool", _pool_infer(allowed_integer=True), _max_pool_kernel, _max_pool_grad, "window"),
    ("MaxPoolGrad", _max_pool_grad_infer, _max_pool_grad_kernel, _max_pool_grad_grad,
     "window"),
    ("MaxPoolGradGrad", _max_pool_grad_grad_infer, _max_pool_grad_grad_kernel,
     _max_pool_grad_grad_grad, "window"),
    ("AvgPool", _pool_infer(allowed_integer=False), _avg_pool_kernel, _avg_pool_grad,
     "window"),
    ("AvgPoolGrad", _avg_pool_grad_infer, _avg_pool_grad_kernel, _avg_pool_grad_grad,
     "window"),
]
for _type, _infer, _kernel, _grad, _kind in _OPS:
    register_op(_type, infer=_infer, kernel=_kernel, grad=_grad, kind=_kind)


# ----------------------------------------------------------------- public functions
def _alias(value, alias, name, alias_name):
    if value is not None and alias is not None:
        raise ValueError(f"Only one of '{name}' and '{alias_name}' may be given")
    return alias if value is None else value


def _operand(value, like):
    """A tensor operand; Python/NumPy values take the dtype of `like`, as TF's op helper."""
    return convert_to_tensor(value, dtype_hint=like.dtype)


def _conv_attrs(strides, padding, dilations, data_format, use_cudnn_on_gpu=True):
    padding, explicit = _padding_attrs(padding, data_format)
    return {"strides": _spatial_list(strides, data_format, "strides"), "padding": padding,
            "explicit_paddings": explicit,
            "dilations": _spatial_list(dilations or 1, data_format, "dilations"),
            "data_format": data_format, "use_cudnn_on_gpu": bool(use_cudnn_on_gpu)}


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format="NHWC", dilations=[1, 1, 1, 1], name=None, filters=None):
    """2-D cross-correlation of a 4-D input with a [h, w, in, out] filter."""
    filter = _alias(filter, filters, "filter", "filters")
    x = convert_to_tensor(input)
    w = _operand(filter, x)
    attrs = _conv_attrs(strides, padding, dilations, data_format, use_cudnn_on_gpu)
    return x.graph.create_op("Conv2D", [x, w], attrs, name or "Conv2D").outputs[0]


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
                          use_cudnn_on_gpu=True, data_format="NHWC", dilations=[1, 1, 1, 1],
                          name=None, filters=None):
    """The gradient of conv2d with respect to its input (of shape `input_sizes`)."""
    filter = _alias(filter, filters, "filter", "filters")
    dy = convert_to_tensor(out_backprop)
    w = _operand(filter, dy)
    sizes = convert_to_tensor(input_sizes, dtype_hint=dtypes.int32)
    attrs = _conv_attrs(strides, padding, dilations, data_format, use_cudnn_on_gpu)
    return dy.graph.create_op("Conv2DBackpropInput", [sizes, w, dy], attrs,
                              name or "Conv2DBackpropInput").outputs[0]


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                           use_cudnn_on_gpu=True, data_format="NHWC", dilations=[1, 1, 1, 1],
                           name=None):
    """The gradient of conv2d with respect to its filter (of shape `filter_sizes`)."""
    x = convert_to_tensor(input)
    dy = _operand(out_backprop, x)
    sizes = convert_to_tensor(filter_sizes, dtype_hint=dtypes.int32)
    attrs = _conv_attrs(strides, padding, dilations, data_format, use_cudnn_on_gpu)
    return x.graph.create_op("Conv2DBackpropFilter", [x, sizes, dy], attrs,
                             name or "Conv2DBackpropFilter").outputs[0]


def conv2d_transpose(value=None, filter=None, output_shape=None, strides=None, padding="SAME",
                     data_format="NHWC", name=None, input=None, filters=None, dilations=None):
    """The transpose of conv2d (its gradient w.r.t. the input): filter is [h, w, out, in]."""
    value = _alias(value, input, "value", "input")
    filter = _alias(filter, filters, "filter", "filters")
    with name_scope(name, "conv2d_transpose", [value, filter, output_shape]) as scope:
        dy = convert_to_tensor(value)
        w = _operand(filter, dy)
        sizes = convert_to_tensor(output_shape, dtype_hint=dtypes.int32)
        if sizes.shape.ndims is not None and not sizes.shape.is_compatible_with([4]):
            raise ValueError(f"output_shape must have shape (4,), got {sizes.shape}")
        attrs = _conv_attrs(strides, padding, dilations, data_format)
        return dy.graph.create_op("Conv2DBackpropInput", [sizes, w, dy], attrs,
                                  scope).outputs[0]


def _pool(op_type, value, ksize, strides, padding, data_format, name):
    x = convert_to_tensor(value)
    attrs = {"ksize": _spatial_list(ksize, data_format, "ksize"),
             "strides": _spatial_list(strides, data_format, "strides"),
             "padding": padding, "data_format": data_format}
    return x.graph.create_op(op_type, [x], attrs, name or op_type).outputs[0]


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):
    """The maximum of each ksize window (padding cells never win)."""
    value = _alias(value, input, "value", "input")
    return _pool("MaxPool", value, ksize, strides, padding, data_format, name)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name)


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):
    """The mean of each ksize window over its real (unpadded) cells."""
    value = _alias(value, input, "value", "input")
    return _pool("AvgPool", value, ksize, strides, padding, data_format, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name)
