"""A minimal PNG encoder (8-bit gray, RGB or RGBA, no interlace) built on zlib."""
import struct
import zlib

import numpy as np

_COLOR_TYPE = {1: 0, 3: 2, 4: 6}  # channels -> PNG color type: gray, RGB, RGBA


def _chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(image):
    """PNG bytes of a uint8 array [height, width, channels], channels in 1, 3, 4."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    height, width, channels = image.shape
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPE[channels], 0, 0, 0)
    # each scanline starts with filter type 0 (None)
    rows = np.concatenate([np.zeros((height, 1), np.uint8),
                           image.reshape(height, width * channels)], axis=1)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + _chunk(b"IEND", b""))
