"""tf.image on numeric tensors: resizing, flips and rotations, crops and pads, dtype and
colour conversions.

Every function here is composed of graphc ops (gather, slice, pad, strided_slice,
elementwise math), so every backend compiles it and its gradient is those ops' gradient.
The arithmetic follows TF1's kernels step by step, not just their formulas: resizing
computes each output's source coordinate in float32 as `i * scale` (TF1's legacy mapping,
no half-pixel centers unless asked), interpolates in the same order as the C++ kernels,
and area and bicubic weights are built in NumPy float32 exactly as those kernels build
theirs. Images are [height, width, channels] or [batch, height, width, channels].
"""
import numpy as np

from graphc import dtypes
from graphc.framework.graph import format_location, name_scope, user_frame
from graphc.framework.static_value import constant_value
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.control_flow_ops import Assert, identity


class ResizeMethod:
    """TF1's tf.image.ResizeMethod (ResizeMethodV1): the `method` of resize_images."""
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


# resize_images also takes TF2's string methods, as TF1.15's resize_images does
_METHOD_BY_NAME = {"bilinear": ResizeMethod.BILINEAR, "nearest": ResizeMethod.NEAREST_NEIGHBOR,
                   "bicubic": ResizeMethod.BICUBIC, "area": ResizeMethod.AREA}


# ------------------------------------------------------------------------ checks
def _image_error(api, message):
    """A ValueError naming the tf.image function and the user's line that called it."""
    return ValueError(f"tf.image.{api}: {message}\n  called at {format_location(user_frame())}")


def _batched(image, api):
    """(image as a rank-4 tensor, whether it was rank 4): TF's functions take one image
    or a batch and answer in kind."""
    image = convert_to_tensor(image, name="image")
    rank = image.shape.ndims
    if rank is None:
        raise _image_error(api, "'image' has an unknown rank; it must be 3-D [height, "
                                "width, channels] or 4-D [batch, height, width, channels]")
    if rank not in (3, 4):
        raise _image_error(api, f"'image' (shape {image.shape}) must have either 3 or 4 "
                                "dimensions")
    return (image, True) if rank == 4 else (array_ops.expand_dims(image, 0), False)


def _unbatched(image, is_batch):
    return image if is_batch else array_ops.squeeze(image, axis=[0])


def _dim(image, axis):
    """A dim of `image`: its Python int when static, else an int32 scalar tensor."""
    d = image.shape[axis].value
    return d if d is not None else array_ops.shape(image)[axis]


def _static_int(value):
    """An int, or the value of an int tensor known at graph-build time, else None."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    v = constant_value(convert_to_tensor(value))
    return None if v is None or np.size(v) != 1 else int(np.reshape(v, [-1])[0])


def _checked(image, checks, api):
    """`image` after the run-time checks (condition, message) whose condition is not
    known at graph-build time; a condition known false is a ValueError now."""
    pending = []
    for condition, message in checks:
        if not isinstance(condition, (bool, np.bool_)):
            value = constant_value(condition)
            if value is None:
                pending.append(Assert(condition, [f"tf.image.{api}: {message}"]))
                continue
            condition = bool(value)
        if not condition:
            raise _image_error(api, message)
    if not pending:
        return image
    from graphc.framework.graph import control_dependencies
    with control_dependencies(pending):
        return identity(image)


# ------------------------------------------------------------------------ resizing
def _resize_size(size, api):
    try:
        size = convert_to_tensor(size, dtype=dtypes.int32, name="size")
    except (TypeError, ValueError) as e:
        raise _image_error(api, f"'size' must be a 1-D int32 Tensor ({e})") from None
    if not size.shape.is_compatible_with([2]):
        raise _image_error(api, "'size' must be a 1-D Tensor of 2 elements: new_height, "
                                f"new_width; got shape {size.shape}")
    return size


def _static_size(size):
    v = constant_value(size)
    if v is None:
        return None, None
    new_h, new_w = (int(d) for d in np.reshape(v, [-1]))
    return new_h, new_w


def _check_resize_dims(images, new_h, new_w, api):
    if (new_h is not None and new_h <= 0) or (new_w is not None and new_w <= 0):
        raise _image_error(api, f"output dimensions must be positive, got size "
                                f"[{new_h}, {new_w}]")
    h, w = images.shape[1].value, images.shape[2].value
    if h == 0 or w == 0:
        raise _image_error(api, f"input image must be of non-zero size, got "
                                f"{images.shape}")


def _scale(in_size, out_size, align_corners):
    """TF's CalculateResizeScale in float32, on int32 scalar tensors. Aligned corners need
    an input of more than one pixel too (TF >= 2.4; TF1 divided by a zero scale there and
    resize_area answered NaN)."""
    in_f = math_ops.cast(in_size, dtypes.float32)
    out_f = math_ops.cast(out_size, dtypes.float32)
    if not align_corners:
        return in_f / out_f
    aligned = math_ops.logical_and(math_ops.greater(in_size, 1), math_ops.greater(out_size, 1))
    return math_ops.where(aligned, (in_f - 1.0) / (out_f - 1.0), in_f / out_f)


def _source_coords(in_size, out_size, align_corners, half_pixel_centers, shift):
    """The float32 source coordinate of each output index: TF's LegacyScaler `i * scale`,
    or with half-pixel centers `(i + 0.5) * scale - shift` (shift 0.5 for bilinear's
    HalfPixelScaler, 0 for nearest's HalfPixelScalerForNN)."""
    in_size = convert_to_tensor(in_size, dtype=dtypes.int32)
    out_size = convert_to_tensor(out_size, dtype=dtypes.int32)
    scale = _scale(in_size, out_size, align_corners)
    i = math_ops.cast(array_ops.range(out_size), dtypes.float32)
    if not half_pixel_centers:
        return i * scale
    coords = (i + 0.5) * scale
    return coords - shift if shift else coords


def _check_resize_flags(align_corners, half_pixel_centers, api):
    if align_corners and half_pixel_centers:
        raise _image_error(api, "If half_pixel_centers is True, align_corners must be False.")


def _along(values, axis):
    """A per-row (axis 1) or per-column (axis 2) vector shaped to broadcast over NHWC."""
    return array_ops.reshape(values, [1, -1, 1, 1] if axis == 1 else [1, 1, -1, 1])


def _linear_taps(in_size, out_size, align_corners, half_pixel_centers):
    """TF's compute_interpolation_weights: (lower, upper, lerp) for each output index."""
    coords = _source_coords(in_size, out_size, align_corners, half_pixel_centers, 0.5)
    floor = math_ops.floor(coords)
    lower = math_ops.maximum(math_ops.cast(floor, dtypes.int32), 0)
    upper = math_ops.minimum(math_ops.cast(math_ops.ceil(coords), dtypes.int32),
                             convert_to_tensor(in_size, dtype=dtypes.int32) - 1)
    return lower, upper, coords - floor


def _bilinear(images, size, align_corners, half_pixel_centers):
    images = math_ops.cast(images, dtypes.float32)  # the kernel reads each value as float
    top, bottom, y_lerp = _linear_taps(_dim(images, 1), size[0], align_corners,
                                       half_pixel_centers)
    left, right, x_lerp = _linear_taps(_dim(images, 2), size[1], align_corners,
                                       half_pixel_centers)
    # top_left + (top_right - top_left) * x_lerp for every input row first: the output's
    # top and bottom rows are then rows of it, the same numbers for less work
    left_cols = array_ops.gather(images, left, axis=2)
    across = left_cols + (array_ops.gather(images, right, axis=2) - left_cols) \
        * _along(x_lerp, 2)
    top_row = array_ops.gather(across, top, axis=1)
    bottom_row = array_ops.gather(across, bottom, axis=1)
    return top_row + (bottom_row - top_row) * _along(y_lerp, 1)


def _nearest_index(in_size, out_size, align_corners, half_pixel_centers):
    coords = _source_coords(in_size, out_size, align_corners, half_pixel_centers, 0.0)
    floor = math_ops.floor(coords)
    if align_corners:
        # roundf: halves away from zero (coords >= 0); coords - floor is exact in float32
        floor = floor + math_ops.cast(math_ops.greater_equal(coords - floor, 0.5),
                                      dtypes.float32)
    index = math_ops.cast(floor, dtypes.int32)
    return math_ops.minimum(index, convert_to_tensor(in_size, dtype=dtypes.int32) - 1)


def _nearest(images, size, align_corners, half_pixel_centers):
    rows = _nearest_index(_dim(images, 1), size[0], align_corners, half_pixel_centers)
    cols = _nearest_index(_dim(images, 2), size[1], align_corners, half_pixel_centers)
    return array_ops.gather(array_ops.gather(images, rows, axis=1), cols, axis=2)


def _static_scale(in_size, out_size, align_corners):
    if align_corners and in_size > 1 and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _area_taps(in_size, out_size, align_corners):
    """resize_area_op.cc's per-output (indices, weights): the input cells that output
    index i covers, [floor(i * scale), ceil((i + 1) * scale)), each weighted by the part of
    it covered, indices clamped to the input. Padded with weight 0 to a common count."""
    scale = _static_scale(in_size, out_size, align_corners)
    taps = []
    for i in range(out_size):
        lo = np.float32(i) * scale
        hi = np.float32(i + 1) * scale
        cells = []
        for j in range(int(np.floor(lo)), int(np.ceil(hi))):
            if j < lo:
                w = scale if j + 1 > hi else np.float32(np.float32(j + 1) - lo)
            else:
                w = np.float32(hi - np.float32(j)) if j + 1 > hi else np.float32(1.0)
            cells.append((min(j, in_size - 1), np.float32(w)))
        taps.append(cells)
    return _padded(taps), scale


def _padded(taps):
    count = max(len(t) for t in taps)
    index = np.zeros((len(taps), count), np.int32)
    weight = np.zeros((len(taps), count), np.float32)
    for i, cells in enumerate(taps):
        for k, (j, w) in enumerate(cells):
            index[i, k], weight[i, k] = j, w
    return index, weight


_CUBIC_TABLE_SIZE = 1024


def _cubic_table():
    """resize_bicubic_op.cc's InitCoeffsTable(-0.75): computed in double, kept in float."""
    a = -0.75
    x = (np.arange(_CUBIC_TABLE_SIZE + 1) * 1.0 / _CUBIC_TABLE_SIZE).astype(np.float32)
    x = x.astype(np.float64)
    near = (((a + 2) * x - (a + 3)) * x * x + 1).astype(np.float32)
    x1 = (x.astype(np.float32) + np.float32(1.0)).astype(np.float64)
    far = (((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a).astype(np.float32)
    return near, far


def _bicubic_taps(in_size, out_size, align_corners):
    """resize_bicubic_op.cc's GetWeightsAndIndices (legacy scaler, table of 1024 steps):
    four clamped indices around floor(i * scale) and their table weights."""
    scale = _static_scale(in_size, out_size, align_corners)
    near, far = _cubic_table()
    taps = []
    for i in range(out_size):
        coord = np.float32(i) * scale
        base = int(np.floor(coord))
        delta = np.float32(coord - np.float32(base))
        offset = int(np.rint(delta * np.float32(_CUBIC_TABLE_SIZE)))
        weights = (far[offset], near[offset], near[_CUBIC_TABLE_SIZE - offset],
                   far[_CUBIC_TABLE_SIZE - offset])
        taps.append([(min(max(base + k - 1, 0), in_size - 1), w)
                     for k, w in enumerate(weights)])
    return _padded(taps)


def _weighted_taps(images, index, weight, axis):
    """sum_k gather(images, index[:, k], axis) * weight[:, k], added in k's order as the
    C++ loops add them."""
    total = None
    for k in range(index.shape[1]):
        term = array_ops.gather(images, constant(index[:, k]), axis=axis)
        term = term * _along(constant(weight[:, k]), axis)
        total = term if total is None else total + term
    return total


def _static_hw(images, size, api):
    h, w = images.shape[1].value, images.shape[2].value
    new_h, new_w = _static_size(size)
    if None in (h, w, new_h, new_w):
        raise _image_error(api, "graphc builds the area and bicubic weights when the graph "
                                "is built, so the input height and width and 'size' must be "
                                f"known then; got image shape {images.shape} and size "
                                f"[{new_h}, {new_w}]")
    return h, w, new_h, new_w


def _area(images, size, align_corners, api="resize_area"):
    h, w, new_h, new_w = _static_hw(images, size, api)
    images = math_ops.cast(images, dtypes.float32)
    (x_index, x_weight), x_scale = _area_taps(w, new_w, align_corners)
    (y_index, y_weight), y_scale = _area_taps(h, new_h, align_corners)
    # per row: start cell * start_scale + middle cells + last cell * its scale; then the
    # rows weighted and summed; then the whole times 1 / (height_scale * width_scale)
    row_sums = _weighted_taps(images, x_index, x_weight, 2)
    total = _weighted_taps(row_sums, y_index, y_weight, 1)
    inverse_area = np.float32(np.float64(1.0) / np.float64(np.float32(y_scale * x_scale)))
    return total * inverse_area


def _bicubic(images, size, align_corners, api="resize_bicubic"):
    h, w, new_h, new_w = _static_hw(images, size, api)
    images = math_ops.cast(images, dtypes.float32)
    x_index, x_weight = _bicubic_taps(w, new_w, align_corners)
    y_index, y_weight = _bicubic_taps(h, new_h, align_corners)
    # the kernel interpolates down each of the four columns, then across them
    return _weighted_taps(_weighted_taps(images, y_index, y_weight, 1), x_index, x_weight, 2)


def _resize_op(images, size, align_corners, name, api, resizer, half_pixel_centers=False):
    """The body of one resize op (TF's ResizeBilinear, ...): 4-D images only."""
    with name_scope(name, api, [images, size]):
        images = convert_to_tensor(images, name="images")
        if images.shape.ndims != 4:
            raise _image_error(api, f"input must be 4-dimensional, got shape {images.shape}")
        if not (images.dtype.is_floating or images.dtype.is_integer):
            raise _image_error(api, f"'images' must be a numeric tensor, got "
                                    f"{images.dtype.name}")
        _check_resize_flags(align_corners, half_pixel_centers, api)
        size = _resize_size(size, api)
        new_h, new_w = _static_size(size)
        _check_resize_dims(images, new_h, new_w, api)
        out = resizer(images, size, align_corners, half_pixel_centers)
        out.set_shape([images.shape[0].value, new_h, new_w, images.shape[3].value])
        return out


def _area_or_bicubic(resizer, api):
    def resize(images, size, align_corners, half_pixel_centers):
        return resizer(images, size, align_corners, api)
    return resize


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF1's ResizeBilinear: float32 output for every input dtype."""
    return _resize_op(images, size, align_corners, name, "resize_bilinear", _bilinear,
                      half_pixel_centers)


def resize_nearest_neighbor(images, size, align_corners=False, name=None,
                            half_pixel_centers=False):
    """TF1's ResizeNearestNeighbor: the input's dtype."""
    return _resize_op(images, size, align_corners, name, "resize_nearest_neighbor",
                      _nearest, half_pixel_centers)


def resize_area(images, size, align_corners=False, name=None):
    """TF1's ResizeArea: each output the area-weighted mean of the input cells it covers."""
    return _resize_op(images, size, align_corners, name, "resize_area",
                      _area_or_bicubic(_area, "resize_area"))


def resize_bicubic(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF1's ResizeBicubic (Keys' cubic with a = -0.75, the legacy kernel)."""
    if half_pixel_centers:
        raise _image_error("resize_bicubic", "half_pixel_centers=True (TF2's Keys cubic "
                                             "kernel) is not implemented in graphc")
    return _resize_op(images, size, align_corners, name, "resize_bicubic",
                      _area_or_bicubic(_bicubic, "resize_bicubic"))


_RESIZERS = {ResizeMethod.BILINEAR: resize_bilinear,
             ResizeMethod.NEAREST_NEIGHBOR: resize_nearest_neighbor,
             ResizeMethod.BICUBIC: resize_bicubic, ResizeMethod.AREA: resize_area}


def _aspect_size(images, size):
    """TF's preserve_aspect_ratio: the largest size within `size` keeping H:W, in float32
    with round-half-to-even as TF computes it (in NumPy when everything is static, so that
    the output shape is static too)."""
    h, w = images.shape[1].value, images.shape[2].value
    new_h, new_w = _static_size(size)
    if None not in (h, w, new_h, new_w):
        h32, w32 = np.float32(h), np.float32(w)
        factor = min(np.float32(new_h) / h32, np.float32(new_w) / w32)
        return constant([int(np.round(factor * h32)), int(np.round(factor * w32))],
                        dtype=dtypes.int32)
    h = math_ops.cast(_dim(images, 1), dtypes.float32)
    w = math_ops.cast(_dim(images, 2), dtypes.float32)
    factor = math_ops.minimum(math_ops.cast(size[0], dtypes.float32) / h,
                              math_ops.cast(size[1], dtypes.float32) / w)
    return array_ops.stack([math_ops.cast(math_ops.round(factor * h), dtypes.int32),
                            math_ops.cast(math_ops.round(factor * w), dtypes.int32)])


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False,
                  preserve_aspect_ratio=False, name=None):
    """TF1's tf.image.resize_images: images of the same size come back unchanged (their
    dtype too); otherwise bilinear, bicubic and area give float32, nearest the input dtype."""
    resizer = _RESIZERS.get(_METHOD_BY_NAME.get(method, method)
                            if isinstance(method, str) else method)
    if resizer is None:
        raise _image_error("resize_images", f"Resize method is not implemented: {method!r}")
    with name_scope(name, "resize", [images, size]):
        images = convert_to_tensor(images, name="images")
        images4, is_batch = _batched(images, "resize_images")
        size = _resize_size(size, "resize_images")
        if preserve_aspect_ratio:
            size = _aspect_size(images4, size)
        new_h, new_w = _static_size(size)
        if (new_h, new_w) == (images4.shape[1].value, images4.shape[2].value) \
                and new_h is not None:
            return images
        return _unbatched(resizer(images4, size, align_corners=align_corners), is_batch)


# ------------------------------------------------------------------------ flips, rotations
def _flip(image, axis, api):
    with name_scope(None, api, [image]):
        image4, is_batch = _batched(image, api)
        return _unbatched(array_ops.reverse(image4, [axis]), is_batch)


def flip_left_right(image):
    return _flip(image, 2, "flip_left_right")


def flip_up_down(image):
    return _flip(image, 1, "flip_up_down")


def _random_flip(image, axis, seed, api):
    """TF1's _random_flip: one image flips when a uniform draw is < 0.5; in a batch each
    image flips when round(its draw) is 1, blended as flips * flipped + (1 - flips) * image."""
    from graphc.ops.random_ops import random_uniform
    with name_scope(None, api, [image]):
        image4, is_batch = _batched(image, api)
        flipped = array_ops.reverse(image4, [axis])
        if not is_batch:
            mirror = math_ops.less(random_uniform([], 0, 1.0, seed=seed), 0.5)
            return array_ops.squeeze(math_ops.where(mirror, flipped, image4), axis=[0])
        batch = array_ops.shape(image4)[0]
        draws = random_uniform(array_ops.stack([batch]), 0, 1.0, seed=seed)
        flips = math_ops.cast(math_ops.round(array_ops.reshape(draws, [-1, 1, 1, 1])),
                              image4.dtype)
        return flips * flipped + (1 - flips) * image4


def random_flip_left_right(image, seed=None):
    return _random_flip(image, 2, seed, "random_flip_left_right")


def random_flip_up_down(image, seed=None):
    return _random_flip(image, 1, seed, "random_flip_up_down")


def transpose_image(image, name=None):
    """Swaps height and width (tf.image.transpose_image; tf.image.transpose in TF2)."""
    with name_scope(name, "transpose", [image]):
        image4, is_batch = _batched(image, "transpose_image")
        return _unbatched(array_ops.transpose(image4, [0, 2, 1, 3]), is_batch)


def _rot90_static(images, k):
    if k == 1:
        return array_ops.transpose(array_ops.reverse(images, [2]), [0, 2, 1, 3])
    if k == 2:
        return array_ops.reverse(images, [1, 2])
    if k == 3:
        return array_ops.reverse(array_ops.transpose(images, [0, 2, 1, 3]), [2])
    return identity(images)


def rot90(image, k=1, name=None):
    """Rotates by k * 90 degrees counter-clockwise; k may be a tensor."""
    with name_scope(name, "rot90", [image, k]):
        image4, is_batch = _batched(image, "rot90")
        k = convert_to_tensor(k, dtype=dtypes.int32, name="k")
        if k.shape.ndims not in (None, 0):
            raise _image_error("rot90", f"'k' must be a scalar, got shape {k.shape}")
        static_k = _static_int(k)
        if static_k is not None:
            return _unbatched(_rot90_static(image4, static_k % 4), is_batch)
        from graphc.ops.cond_v2 import case
        k = math_ops.mod(k, 4)
        result = case([(math_ops.equal(k, q), lambda q=q: _rot90_static(image4, q))
                       for q in (1, 2, 3)], default=lambda: identity(image4), exclusive=True)
        return _unbatched(result, is_batch)


# ------------------------------------------------------------------------ crops and pads
def _is_static(*values):
    return all(isinstance(v, (int, np.integer)) for v in values)


def _int_arg(value):
    """A box argument: a Python int when known at graph-build time, else an int32 tensor."""
    static = _static_int(value)
    return static if static is not None else convert_to_tensor(value, dtype=dtypes.int32)


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """The [target_height, target_width] window at (offset_height, offset_width)."""
    api = "crop_to_bounding_box"
    with name_scope(None, api, [image]):
        image4, is_batch = _batched(image, api)
        oh, ow, th, tw = (_int_arg(v) for v in (offset_height, offset_width, target_height,
                                                target_width))
        h, w = _dim(image4, 1), _dim(image4, 2)
        image4 = _checked(image4, [
            (_ge(ow, 0), "offset_width must be >= 0."),
            (_ge(oh, 0), "offset_height must be >= 0."),
            (_gt(tw, 0), "target_width must be > 0."),
            (_gt(th, 0), "target_height must be > 0."),
            (_ge(w, _add(tw, ow)), "width must be >= target + offset."),
            (_ge(h, _add(th, oh)), "height must be >= target + offset.")], api)
        cropped = array_ops.slice(image4, array_ops.stack([0, oh, ow, 0]),
                                  array_ops.stack([-1, th, tw, -1]))
        cropped.set_shape([image4.shape[0].value, th if _is_static(th) else None,
                           tw if _is_static(tw) else None, image4.shape[3].value])
        return _unbatched(cropped, is_batch)


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """`image` placed at (offset_height, offset_width) in zeros of [target_height,
    target_width]."""
    api = "pad_to_bounding_box"
    with name_scope(None, api, [image]):
        image4, is_batch = _batched(image, api)
        oh, ow, th, tw = (_int_arg(v) for v in (offset_height, offset_width, target_height,
                                                target_width))
        after_w = _sub(_sub(tw, ow), _dim(image4, 2))
        after_h = _sub(_sub(th, oh), _dim(image4, 1))
        image4 = _checked(image4, [
            (_ge(oh, 0), "offset_height must be >= 0"),
            (_ge(ow, 0), "offset_width must be >= 0"),
            (_ge(after_w, 0), "width must be <= target - offset"),
            (_ge(after_h, 0), "height must be <= target - offset")], api)
        paddings = array_ops.reshape(array_ops.stack([0, 0, oh, after_h, ow, after_w, 0, 0]),
                                     [4, 2])
        padded = array_ops.pad(image4, paddings)
        padded.set_shape([image4.shape[0].value, th if _is_static(th) else None,
                          tw if _is_static(tw) else None, image4.shape[3].value])
        return _unbatched(padded, is_batch)


def _binary(py, tf):
    def op(a, b):
        return py(a, b) if _is_static(a, b) else tf(a, b)
    return op


_add = _binary(lambda a, b: a + b, math_ops.add)
_sub = _binary(lambda a, b: a - b, math_ops.subtract)
_ge = _binary(lambda a, b: a >= b, math_ops.greater_equal)
_gt = _binary(lambda a, b: a > b, math_ops.greater)
_max = _binary(max, math_ops.maximum)
_min = _binary(min, math_ops.minimum)
_floordiv = _binary(lambda a, b: a // b, math_ops.floordiv)


def resize_image_with_crop_or_pad(image, target_height, target_width):
    """Centrally crops or zero-pads each of height and width to the target (a crop takes
    the floor of half the excess from the top/left, a pad adds the floor of half the gap
    there)."""
    api = "resize_image_with_crop_or_pad"
    with name_scope(None, api, [image]):
        image4, is_batch = _batched(image, api)
        th, tw = _int_arg(target_height), _int_arg(target_width)
        image4 = _checked(image4, [(_gt(tw, 0), "target_width must be > 0."),
                                   (_gt(th, 0), "target_height must be > 0.")], api)
        h, w = _dim(image4, 1), _dim(image4, 2)
        width_diff, height_diff = _sub(tw, w), _sub(th, h)
        cropped = crop_to_bounding_box(
            image4, _max(_floordiv(_sub(0, height_diff), 2), 0),
            _max(_floordiv(_sub(0, width_diff), 2), 0), _min(th, h), _min(tw, w))
        resized = pad_to_bounding_box(cropped, _max(_floordiv(height_diff, 2), 0),
                                      _max(_floordiv(width_diff, 2), 0), th, tw)
        return _unbatched(resized, is_batch)


def central_crop(image, central_fraction):
    """The central `central_fraction` of height and width: a border of
    int((size - size * fraction) / 2) (computed in float64, as TF does) is cut from each
    side."""
    api = "central_crop"
    with name_scope(None, api, [image]):
        fraction = _static_float(central_fraction)
        if fraction is not None and not 0.0 < fraction <= 1.0:
            raise _image_error(api, f"central_fraction must be within (0, 1], got {fraction}")
        if fraction == 1.0:
            return image
        image4, is_batch = _batched(image, api)
        starts = [_border(_dim(image4, axis), central_fraction, fraction) for axis in (1, 2)]
        sizes = [_sub(_dim(image4, axis), _mul2(s)) for axis, s in zip((1, 2), starts)]
        cropped = array_ops.slice(image4, array_ops.stack([0, starts[0], starts[1], 0]),
                                  array_ops.stack([-1, sizes[0], sizes[1], -1]))
        cropped.set_shape([image4.shape[0].value] + [s if _is_static(s) else None
                                                     for s in sizes]
                          + [image4.shape[3].value])
        return _unbatched(cropped, is_batch)


def _static_float(value):
    if isinstance(value, (int, float, np.number)):
        return float(value)
    v = constant_value(convert_to_tensor(value))
    return None if v is None else float(v)


def _border(size, fraction_tensor, fraction):
    if _is_static(size) and fraction is not None:
        return int((float(size) - float(size) * fraction) / 2)
    size_d = math_ops.cast(size, dtypes.float64)
    fraction_d = math_ops.cast(fraction_tensor, dtypes.float64)
    return math_ops.cast((size_d - size_d * fraction_d) / 2.0, dtypes.int32)


def _mul2(x):
    return x * 2 if _is_static(x) else math_ops.multiply(x, 2)


# ------------------------------------------------------------------------ dtypes
def convert_image_dtype(image, dtype, saturate=False, name=None):
    """TF1's scaling between image dtypes: floats span [0, 1], integers [0, MAX]; integer
    to integer shifts by the ratio of (MAX + 1)s; float to integer multiplies by
    MAX + 0.5 and truncates (saturating first when asked)."""
    image = convert_to_tensor(image, name="image")
    dtype = dtypes.as_dtype(dtype)
    for what, dt in (("dtype", dtype), ("image dtype", image.dtype)):
        if not (dt.is_floating or dt.is_integer):
            raise _image_error("convert_image_dtype",
                               f"{what} must be either floating point or integer, "
                               f"got {dt.name}")
    if dtype == image.dtype:
        return identity(image, name=name)
    with name_scope(name, "convert_image", [image]):
        if image.dtype.is_integer and dtype.is_integer:
            scale_in, scale_out = image.dtype.max, dtype.max
            if scale_in > scale_out:
                scaled = math_ops.floordiv(image, (scale_in + 1) // (scale_out + 1))
                return (math_ops.saturate_cast if saturate else math_ops.cast)(scaled, dtype)
            cast = (math_ops.saturate_cast if saturate else math_ops.cast)(image, dtype)
            return math_ops.multiply(cast, (scale_out + 1) // (scale_in + 1))
        if image.dtype.is_floating and dtype.is_floating:
            return math_ops.cast(image, dtype)
        if image.dtype.is_integer:
            return math_ops.multiply(math_ops.cast(image, dtype), 1.0 / image.dtype.max)
        scaled = math_ops.multiply(image, dtype.max + 0.5)
        return (math_ops.saturate_cast if saturate else math_ops.cast)(scaled, dtype)


# ------------------------------------------------------------------------ colour
_GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)


def rgb_to_grayscale(images, name=None):
    """ITU-R 601 luma of the last axis (3 channels), kept as a last axis of size 1."""
    with name_scope(name, "rgb_to_grayscale", [images]):
        images = convert_to_tensor(images, name="images")
        channels = images.shape[-1].value if images.shape.ndims else None
        if images.shape.ndims is not None and (images.shape.ndims < 1 or
                                               channels not in (None, 3)):
            raise _image_error("rgb_to_grayscale", "the last dimension must be 3 (RGB), "
                                                   f"got shape {images.shape}")
        flt = convert_image_dtype(images, dtypes.float32)
        # tensordot over the channels: ((r * w_r + g * w_g) + b * w_b)
        gray = None
        for c, weight in enumerate(_GRAY_WEIGHTS):
            term = flt[..., c] * np.float32(weight)
            gray = term if gray is None else gray + term
        return convert_image_dtype(array_ops.expand_dims(gray, -1), images.dtype)


def grayscale_to_rgb(images, name=None):
    """The single channel repeated three times."""
    with name_scope(name, "grayscale_to_rgb", [images]):
        images = convert_to_tensor(images, name="images")
        rank = images.shape.ndims
        if rank is None or rank < 2 or images.shape[-1].value not in (None, 1):
            raise _image_error("grayscale_to_rgb", "'images' must be at least 2-D with a last "
                                                   f"dimension of 1, got shape {images.shape}")
        return array_ops.tile(images, [1] * (rank - 1) + [3])


def _float_image(image):
    """TF's adjust_* work on float16/float32 images as they are, on others in float32."""
    if image.dtype in (dtypes.float16, dtypes.float32):
        return image
    return convert_image_dtype(image, dtypes.float32)


def adjust_brightness(image, delta):
    """image + delta in float, converted back to image's dtype with saturation."""
    with name_scope(None, "adjust_brightness", [image, delta]):
        image = convert_to_tensor(image, name="image")
        flt = _float_image(image)
        adjusted = math_ops.add(flt, math_ops.cast(delta, flt.dtype))
        return convert_image_dtype(adjusted, image.dtype, saturate=True)


def adjust_contrast(images, contrast_factor):
    """(x - mean) * contrast_factor + mean, the mean over height and width of each image
    and channel (TF's AdjustContrastv2: the sum times 1 / (height * width), in float32),
    converted back with saturation."""
    with name_scope(None, "adjust_contrast", [images, contrast_factor]):
        images = convert_to_tensor(images, name="images")
        if images.shape.ndims is not None and images.shape.ndims < 3:
            raise _image_error("adjust_contrast", "'images' must be at least 3-D, got shape "
                                                  f"{images.shape}")
        flt = _float_image(images)
        work = math_ops.cast(flt, dtypes.float32)  # the kernel computes float16 in float32
        pixels = math_ops.cast(reduction_ops.reduce_prod(array_ops.shape(work)[-3:-1]),
                               dtypes.float32)
        mean = reduction_ops.reduce_sum(work, axis=[-3, -2], keepdims=True) * (1.0 / pixels)
        adjusted = mean + (work - mean) * math_ops.cast(contrast_factor, dtypes.float32)
        return convert_image_dtype(math_ops.cast(adjusted, flt.dtype), images.dtype,
                                   saturate=True)


def random_brightness(image, max_delta, seed=None):
    """adjust_brightness by a delta drawn uniformly from [-max_delta, max_delta)."""
    if max_delta < 0:
        raise _image_error("random_brightness", "max_delta must be non-negative.")
    from graphc.ops.random_ops import random_uniform
    return adjust_brightness(image, random_uniform([], -max_delta, max_delta, seed=seed))


def random_contrast(image, lower, upper, seed=None):
    """adjust_contrast by a factor drawn uniformly from [lower, upper)."""
    if upper <= lower:
        raise _image_error("random_contrast", "upper must be > lower.")
    if lower < 0:
        raise _image_error("random_contrast", "lower must be non-negative.")
    from graphc.ops.random_ops import random_uniform
    return adjust_contrast(image, random_uniform([], lower, upper, seed=seed))


def _rgb_channels(images, api):
    images = convert_to_tensor(images, name="images")
    if not images.dtype.is_floating:
        raise _image_error(api, f"'images' must be float16, float32 or float64, got "
                                f"{images.dtype.name}")
    if images.shape.ndims is not None and (images.shape.ndims < 1 or
                                           images.shape[-1].value not in (None, 3)):
        raise _image_error(api, f"the last dimension must be 3, got shape {images.shape}")
    return images, [images[..., c] for c in range(3)]


def _select(*branches):
    """where(c1, a1, where(c2, a2, ... default)): branches are (condition, value) pairs
    and a last default value."""
    result = branches[-1]
    for condition, value in reversed(branches[:-1]):
        result = math_ops.where(condition, value, result)
    return result


def rgb_to_hsv(images, name=None):
    """TF's RGBToHSV: hue and saturation in [0, 1), value = max(r, g, b); a grey pixel
    has hue 0. Computed as the Eigen kernel does, in the images' dtype."""
    with name_scope(name, "rgb_to_hsv", [images]):
        images, (r, g, b) = _rgb_channels(images, "rgb_to_hsv")
        dt = images.dtype.as_numpy_dtype
        v = math_ops.maximum(math_ops.maximum(r, g), b)
        chroma = v - math_ops.minimum(math_ops.minimum(r, g), b)
        zero = array_ops.zeros_like(v)
        s = math_ops.where(math_ops.greater(v, 0), chroma / v, zero)
        norm = (dt(1) / chroma) * (dt(1) / dt(6))
        h = _select((math_ops.equal(r, v), norm * (g - b)),
                    (math_ops.equal(g, v), norm * (b - r) + dt(2) / dt(6)),
                    norm * (r - g) + dt(4) / dt(6))
        h = math_ops.where(math_ops.greater(chroma, 0), h, zero)
        h = math_ops.where(math_ops.less(h, 0), h + dt(1), h)
        return array_ops.stack([h, s, v], axis=-1)


def hsv_to_rgb(images, name=None):
    """TF's HSVToRGB, the inverse of rgb_to_hsv (hue in [0, 1])."""
    with name_scope(name, "hsv_to_rgb", [images]):
        images, (h, s, v) = _rgb_channels(images, "hsv_to_rgb")
        dt = images.dtype.as_numpy_dtype
        dh = h * dt(6)

        def ramp(value):
            return math_ops.minimum(math_ops.maximum(value, dt(0)), dt(1))

        dr = ramp(math_ops.abs(dh - dt(3)) - dt(1))
        dg = ramp(-math_ops.abs(dh - dt(2)) + dt(2))
        db = ramp(-math_ops.abs(dh - dt(4)) + dt(2))
        one_s = -s + dt(1)
        return array_ops.stack([(one_s + s * d) * v for d in (dr, dg, db)], axis=-1)


def _saturation_kernel_hsv(r, g, b):
    """adjust_saturation_op.cc's rgb_to_hsv (float32, its own arithmetic: the hue offsets
    2/6 and 4/6 are doubles added to a float)."""
    v = math_ops.maximum(r, math_ops.maximum(g, b))
    chroma = v - math_ops.minimum(r, math_ops.minimum(g, b))
    zero = array_ops.zeros_like(v)
    s = math_ops.where(math_ops.greater(v, 0), chroma / v, zero)
    norm = np.float32(1) / (np.float32(6) * chroma)

    def plus_double(x, offset):
        return math_ops.cast(math_ops.cast(x, dtypes.float64) + offset, dtypes.float32)

    h = _select((math_ops.equal(r, v), norm * (g - b)),
                (math_ops.equal(g, v), plus_double(norm * (b - r), 2.0 / 6.0)),
                plus_double(norm * (r - g), 4.0 / 6.0))
    h = math_ops.where(math_ops.less_equal(chroma, 0), zero, h)
    h = math_ops.where(math_ops.less(h, 0), h + np.float32(1), h)
    return h, s, v


def _saturation_kernel_rgb(h, s, v):
    """adjust_saturation_op.cc's hsv_to_rgb: the hue's sextant picks which of chroma,
    x and 0 each channel gets, m = v - chroma is added to all."""
    c = s * v
    m = v - c
    dh = h * np.float32(6)
    sextant = math_ops.cast(dh, dtypes.int32)  # static_cast<int>: truncation
    # fmodu: dh reduced into [0, 2) by adding or subtracting 2 (each step exact here)
    fmodu = dh - np.float32(2) * math_ops.floor(dh * np.float32(0.5))
    x = c * (np.float32(1) - math_ops.abs(fmodu - np.float32(1)))
    zero = array_ops.zeros_like(c)
    picks = {0: (c, x, zero), 1: (x, c, zero), 2: (zero, c, x), 3: (zero, x, c),
             4: (x, zero, c), 5: (c, zero, x)}
    channels = []
    for k in range(3):
        branches = [(math_ops.equal(sextant, q), picks[q][k]) for q in range(6)]
        channels.append(_select(*branches, zero) + m)
    return channels


def adjust_saturation(image, saturation_factor, name=None):
    """Scales each pixel's HSV saturation by `saturation_factor`, clipped to [0, 1] (TF's
    AdjustSaturation kernel, in float32; other dtypes are converted there and back)."""
    with name_scope(name, "adjust_saturation", [image]):
        image = convert_to_tensor(image, name="image")
        flt, _ = _rgb_channels(_float_image(image), "adjust_saturation")
        work = math_ops.cast(flt, dtypes.float32)
        h, s, v = _saturation_kernel_hsv(work[..., 0], work[..., 1], work[..., 2])
        factor = math_ops.cast(saturation_factor, dtypes.float32)
        s = math_ops.minimum(np.float32(1), math_ops.maximum(np.float32(0), s * factor))
        rgb = array_ops.stack(_saturation_kernel_rgb(h, s, v), axis=-1)
        return convert_image_dtype(math_ops.cast(rgb, flt.dtype), image.dtype)


def _hue_sextant(r, g, b):
    """adjust_hue_op.cc's rgb_to_hv_range: (hue in [0, 6), v_min, v_max); ties between
    channels fall on the side the kernel's comparisons put them."""
    r_lt_g = math_ops.less(r, g)
    # (max, mid, min, sextant) in the kernel's six branches
    below = (math_ops.less(b, r), (g, r, b, 1)), (math_ops.greater(b, g), (b, g, r, 3)), \
        (g, b, r, 2)
    above = (math_ops.less(b, g), (r, g, b, 0)), (math_ops.greater(b, r), (b, r, g, 4)), \
        (r, b, g, 5)

    def pick(k):
        def part(branches):
            (c1, v1), (c2, v2), v3 = branches
            value = [v1[k], v2[k], v3[k]]
            if k == 3:
                value = [array_ops.zeros_like(r) + np.float32(v) for v in value]
            return _select((c1, value[0]), (c2, value[1]), value[2])
        return math_ops.where(r_lt_g, part(below), part(above))

    v_max, v_mid, v_min, sextant = (pick(k) for k in range(4))
    ratio = (v_mid - v_min) / (v_max - v_min)
    odd = math_ops.equal(math_ops.floormod(math_ops.cast(sextant, dtypes.int32), 2), 1)
    hue = sextant + math_ops.where(odd, np.float32(1) - ratio, ratio)
    hue = math_ops.where(math_ops.equal(v_max, v_min), array_ops.zeros_like(hue), hue)
    return hue, v_min, v_max


def _hue_to_rgb(hue, v_min, v_max):
    """adjust_hue_op.cc's hv_range_to_rgb."""
    sextant = math_ops.cast(hue, dtypes.int32)
    ratio = hue - math_ops.cast(sextant, dtypes.float32)
    odd = math_ops.equal(math_ops.floormod(sextant, 2), 1)
    ratio = math_ops.where(odd, np.float32(1) - ratio, ratio)
    v_mid = v_min + ratio * (v_max - v_min)
    orders = {0: (v_max, v_mid, v_min), 1: (v_mid, v_max, v_min), 2: (v_min, v_max, v_mid),
              3: (v_min, v_mid, v_max), 4: (v_mid, v_min, v_max)}
    default = (v_max, v_min, v_mid)
    return [_select(*[(math_ops.equal(sextant, q), orders[q][k]) for q in range(5)],
                    default[k]) for k in range(3)]


def adjust_hue(image, delta, name=None):
    """Rotates each pixel's hue by `delta` (a fraction of the colour wheel, in [-1, 1]), as
    TF's AdjustHue kernel does in float32; other dtypes are converted there and back."""
    with name_scope(name, "adjust_hue", [image]):
        image = convert_to_tensor(image, name="image")
        flt, _ = _rgb_channels(_float_image(image), "adjust_hue")
        work = math_ops.cast(flt, dtypes.float32)
        hue, v_min, v_max = _hue_sextant(work[..., 0], work[..., 1], work[..., 2])
        hue = hue + math_ops.cast(delta, dtypes.float32) * np.float32(6)
        # the kernel's `while (h < 0) h += 6; while (h >= 6) h -= 6;`, unrolled for the
        # documented range of delta (|delta| <= 1 moves the hue by at most one turn)
        turns = _wrap_turns(delta)
        for _ in range(turns):
            hue = math_ops.where(math_ops.less(hue, 0), hue + np.float32(6), hue)
        for _ in range(turns):
            hue = math_ops.where(math_ops.greater_equal(hue, 6), hue - np.float32(6), hue)
        rgb = array_ops.stack(_hue_to_rgb(hue, v_min, v_max), axis=-1)
        return convert_image_dtype(math_ops.cast(rgb, flt.dtype), image.dtype)


def _wrap_turns(delta):
    """How many +-6 steps the hue wrap needs: enough for |delta| <= 1, or for a static
    delta beyond that."""
    static = _static_float(delta)
    return 2 if static is None or abs(static) <= 1 else int(np.ceil(abs(static))) + 1


def random_hue(image, max_delta, seed=None):
    """adjust_hue by a delta drawn uniformly from [-max_delta, max_delta), max_delta <= 0.5."""
    if max_delta > 0.5:
        raise _image_error("random_hue", "max_delta must be <= 0.5.")
    if max_delta < 0:
        raise _image_error("random_hue", "max_delta must be non-negative.")
    from graphc.ops.random_ops import random_uniform
    return adjust_hue(image, random_uniform([], -max_delta, max_delta, seed=seed))


def random_saturation(image, lower, upper, seed=None):
    """adjust_saturation by a factor drawn uniformly from [lower, upper)."""
    if upper <= lower:
        raise _image_error("random_saturation", "upper must be > lower.")
    if lower < 0:
        raise _image_error("random_saturation", "lower must be non-negative.")
    from graphc.ops.random_ops import random_uniform
    return adjust_saturation(image, random_uniform([], lower, upper, seed=seed))


def per_image_standardization(image):
    """(x - mean) / max(stddev, 1 / sqrt(N)) per image, in float32, N = H * W * C."""
    with name_scope(None, "per_image_standardization", [image]):
        image = convert_to_tensor(image, name="image")
        if image.shape.ndims is not None and image.shape.ndims < 3:
            raise _image_error("per_image_standardization", "'image' must be at least 3-D, "
                                                            f"got shape {image.shape}")
        image = math_ops.cast(image, dtypes.float32)
        axes = [-1, -2, -3]
        num_pixels = reduction_ops.reduce_prod(array_ops.shape(image)[-3:])
        mean = reduction_ops.reduce_mean(image, axis=axes, keepdims=True)
        stddev = math_ops.sqrt(reduction_ops.reduce_mean(
            math_ops.square(image - mean), axis=axes, keepdims=True))
        min_stddev = math_ops.rsqrt(math_ops.cast(num_pixels, dtypes.float32))
        return math_ops.divide(image - mean, math_ops.maximum(stddev, min_stddev))


def total_variation(images, name=None):
    """Sum of absolute differences of neighbouring pixels, per image for a batch."""
    with name_scope(name, "total_variation"):
        images = convert_to_tensor(images, name="images")
        rank = images.shape.ndims
        if rank == 3:
            dy = images[1:, :, :] - images[:-1, :, :]
            dx = images[:, 1:, :] - images[:, :-1, :]
            axis = None
        elif rank == 4:
            dy = images[:, 1:, :, :] - images[:, :-1, :, :]
            dx = images[:, :, 1:, :] - images[:, :, :-1, :]
            axis = [1, 2, 3]
        else:
            raise _image_error("total_variation", "'images' must be either 3 or "
                                                  f"4-dimensional, got shape {images.shape}")
        return (reduction_ops.reduce_sum(math_ops.abs(dy), axis=axis)
                + reduction_ops.reduce_sum(math_ops.abs(dx), axis=axis))
