"""Local response normalization and zero_fraction, composed of existing ops (so they compile
natively and differentiate through the composition)."""
from graphc import dtypes
from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["local_response_normalization", "lrn", "zero_fraction"]


def local_response_normalization(input, depth_radius=5, bias=1, alpha=1, beta=0.5,
                                 name=None):
    """input / (bias + alpha * sqr_sum) ** beta, sqr_sum[..., d] the sum of the squares of
    input[..., d - depth_radius : d + depth_radius + 1] (channels past either end count
    as zeros), over a 4-D NHWC input."""
    with name_scope(name, "LRN", [input]) as scope:
        x = convert_to_tensor(input, name="input")
        if x.dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
            raise TypeError(f"lrn: input must be float16, float32 or float64, got "
                            f"{x.dtype.name}")
        if x.shape.ndims is not None and x.shape.ndims != 4:
            raise ValueError(f"lrn: input must be 4-D, got shape {x.shape}")
        channels = x.shape[3].value if x.shape.ndims else None
        if channels is None:
            raise ValueError(f"lrn: the depth (last) dimension must be known, got shape "
                             f"{x.shape}")
        r = int(depth_radius)
        if r < 0:
            raise ValueError(f"lrn: depth_radius must be >= 0, got {r}")
        padded = array_ops.pad(math_ops.square(x), [[0, 0], [0, 0], [0, 0], [r, r]])
        windows = [padded[:, :, :, i:i + channels] for i in range(2 * r + 1)]
        sqr_sum = math_ops.add_n(windows) if len(windows) > 1 else windows[0]
        scale = math_ops.cast(bias, x.dtype) + math_ops.cast(alpha, x.dtype) * sqr_sum
        return math_ops.multiply(x, math_ops.pow(scale, math_ops.cast(-beta, x.dtype)),
                                 name=scope)


lrn = local_response_normalization


def zero_fraction(value, name=None):
    """The fraction of the elements of value that are zero, as float32."""
    with name_scope(name, "zero_fraction", [value]) as scope:
        value = convert_to_tensor(value, name="value")
        zero = math_ops.cast(0, value.dtype)
        is_zero = math_ops.cast(math_ops.equal(value, zero), dtypes.float32)
        return reduction_ops.reduce_mean(is_zero, name=scope)
