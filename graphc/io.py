"""tf.io: the names of TF1's tf.io namespace that graphc has."""
from graphc import gfile  # noqa: F401
from graphc.ops.io_ops import matching_files, read_file, write_file  # noqa: F401
from graphc.ops.string_ops import decode_base64, decode_raw, encode_base64  # noqa: F401
from graphc.ops.image_decode import (decode_bmp, decode_gif, decode_image,  # noqa: F401
                                     decode_jpeg, decode_png, encode_jpeg, encode_png,
                                     is_jpeg)
