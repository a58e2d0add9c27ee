"""tf.image: TF1's image functions on numeric tensors (graphc/ops/image_ops.py).

The decoders and encoders (decode_jpeg, decode_png, decode_image, ...) work on string
tensors, on the host (graphc/ops/image_decode.py)."""
from graphc.ops.image_ops import (  # noqa: F401
    ResizeMethod, adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation,
    central_crop, convert_image_dtype, crop_to_bounding_box, flip_left_right, flip_up_down,
    grayscale_to_rgb, hsv_to_rgb, pad_to_bounding_box, per_image_standardization,
    random_brightness, random_contrast, random_flip_left_right, random_flip_up_down,
    random_hue, random_saturation, resize_area, resize_bicubic, resize_bilinear,
    resize_image_with_crop_or_pad, resize_images, resize_nearest_neighbor, rgb_to_grayscale,
    rgb_to_hsv, rot90, total_variation, transpose_image)
from graphc.ops.random_ops import random_crop  # noqa: F401
from graphc.ops.image_decode import (decode_bmp, decode_gif, decode_image,  # noqa: F401
                                     decode_jpeg, decode_png, encode_jpeg, encode_png,
                                     is_jpeg)

# TF1's other names for the same functions
resize = resize_images
resize_with_crop_or_pad = resize_image_with_crop_or_pad
transpose = transpose_image
