"""Image decoding and encoding as TF1's tf.image.decode_* / encode_*: JPEG, PNG, GIF and BMP
bytes <-> uint8 tensors of shape [height, width, channels] (GIF: [frames, height, width,
3]); 16-bit PNGs decode to their high bytes, as TF's uint8 decoding (graphc has no
uint16).

Pillow reads and writes the files; the channel conversions are TF's own (libpng's and
libjpeg's as TF sets them up), done here so the pixels equal TF's: gray -> RGB repeats
the gray value, an added alpha is opaque (255), RGB -> gray for PNG is libpng's fixed
point (9798 R + 19235 G + 3735 B) >> 15, and a JPEG decoded to one channel is libjpeg's
own luma; JPEGs decode with libjpeg's accurate integer IDCT (TF's
dct_method="INTEGER_ACCURATE"). BMPs are read here (Pillow drops a 32-bit BMP's alpha,
TF keeps it). Host ops: a codec runs on bytes."""
import io

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError, UnimplementedError
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["decode_jpeg", "decode_png", "decode_bmp", "decode_gif", "decode_image",
           "encode_png", "encode_jpeg", "is_jpeg"]

_HOST = dict(kind="opaque", host_only=True)
_FORMATS = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"),
            (b"BM", "BMP"))
# what each op accepts: TF's DecodeJpeg and DecodePng also read each other's files and
# single-frame GIFs ("the interface is the same"), DecodeGif and DecodeBmp only their own
_ACCEPTS = {"DecodeJpeg": ("JPEG", "PNG", "GIF"), "DecodePng": ("JPEG", "PNG", "GIF"),
            "DecodeGif": ("GIF",), "DecodeBmp": ("BMP",),
            "DecodeImage": ("JPEG", "PNG", "GIF", "BMP")}
_CHANNELS = {"DecodeJpeg": (0, 1, 3), "DecodePng": (0, 1, 3, 4), "DecodeBmp": (0, 3, 4),
             "DecodeImage": (0, 1, 3, 4)}


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise KernelError("image decoding and encoding need Pillow: pip install pillow") \
            from None
    return Image


def _format_of(data):
    for magic, name in _FORMATS:
        if data.startswith(magic):
            return name
    return None


def _open(data, op_type):
    kind = _format_of(data)
    if kind not in _ACCEPTS[op_type]:
        wanted = " or ".join(_ACCEPTS[op_type])
        raise KernelError(f"{op_type}: unknown image file format; {wanted} required"
                          if kind is None else
                          f"{op_type}: the data is a {kind} image; {wanted} required")
    try:
        image = _pillow().open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, SyntaxError) as e:
        raise KernelError(f"{op_type}: invalid {kind} data: {e}") from None
    return kind, image


# ------------------------------------------------------------------ pixels as TF's
def _png_gray(rgb):
    """libpng's png_set_rgb_to_gray(1, 0.299, 0.587), which TF's PNG decoder asks for: fixed
    point coefficients of 2**15, truncated."""
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((9798 * r + 19235 * g + 3735 * b) >> 15).astype(rgb.dtype)[..., None]


def _with_channels(pixels, channels, kind, opaque=255):
    """pixels [h, w, c] (c in 1..4; 2 is gray + alpha) with `channels` (0: as stored); an
    added alpha channel holds `opaque`."""
    have = pixels.shape[-1]
    if channels == 0 or channels == have:
        return pixels
    color = pixels[..., :1].repeat(3, -1) if have in (1, 2) else pixels[..., :3]
    if channels == 1:
        if have in (1, 2):
            return pixels[..., :1]
        if kind != "PNG":  # libjpeg's luma is read by the JPEG path itself
            raise KernelError(f"cannot convert a {kind} image to one channel")
        return _png_gray(color)
    if channels == 3:
        return color
    alpha = pixels[..., -1:] if have in (2, 4) else np.full(pixels.shape[:-1] + (1,), opaque,
                                                          pixels.dtype)
    return np.concatenate([color, alpha], -1)


def _stored_pixels(image):
    """The image's pixels as stored: [h, w, c] uint8, or uint16 for 16-bit gray PNGs;
    palettes expanded to RGB, or RGBA when the palette has transparency."""
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode in ("I;16", "I;16B", "I"):
        return np.asarray(image, np.uint16)[..., None]
    elif mode == "LA":
        pass
    elif mode not in ("L", "RGB", "RGBA"):
        image = image.convert("RGBA" if "A" in mode else "RGB")
    pixels = np.asarray(image, np.uint8)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _as_depth(pixels, dtype):
    """16 -> 8 bits as libpng's png_set_strip_16, which TF asks for: the high byte."""
    if pixels.dtype == dtype:
        return pixels
    return (pixels >> 8).astype(np.uint8)


def _decode_still(data, op_type, channels, dtype=np.uint8):
    if _format_of(data) == "BMP" and "BMP" in _ACCEPTS[op_type]:
        return _decode_bmp(data, channels)
    kind, image = _open(data, op_type)
    if kind == "GIF":
        if getattr(image, "n_frames", 1) > 1:
            raise KernelError(f"{op_type}: the GIF has {image.n_frames} frames; use "
                              "decode_gif or decode_image for animations")
        image = image.convert("RGB")
    if kind == "JPEG" and channels == 1 and image.mode != "L":
        # libjpeg's own grayscale output (its luma), as TF's decoder asks for
        image = _pillow().open(io.BytesIO(data))
        image.draft("L", image.size)
        image = image.convert("L") if image.mode != "L" else image
    pixels = _stored_pixels(image)
    return _with_channels(_as_depth(pixels, dtype), channels, kind, _png_filler(data, kind))


def _png_filler(data, kind):
    """The alpha TF's PNG decoder adds: libpng's filler (1 << bit depth) - 1, where a
    palette image's bit depth is its index size (a 4-bit palette gets alpha 15, as TF)."""
    if kind != "PNG" or len(data) < 29 or data[25] != 3:  # IHDR color type 3: palette
        return 255
    return (1 << min(data[24], 8)) - 1


def _decode_bmp(data, channels):
    """TF's BMP decoder: uncompressed 8-, 24- or 32-bit rows (BGR or BGRA, alpha kept),
    bottom-up unless the height is negative, each row padded to 4 bytes."""
    import struct
    if len(data) < 30:
        raise KernelError("DecodeBmp: the BMP header is truncated")
    offset, = struct.unpack_from("<I", data, 10)
    width, height = struct.unpack_from("<ii", data, 18)
    bpp, = struct.unpack_from("<H", data, 28)
    if bpp not in (8, 24, 32) or width <= 0 or height == 0:
        raise KernelError(f"DecodeBmp: {bpp}-bit BMPs of {width}x{height} pixels are not "
                          "supported (8, 24 or 32 bits)")
    have = bpp // 8
    stride = (width * have + 3) // 4 * 4
    rows = abs(height)
    if offset + stride * rows > len(data):
        raise KernelError("DecodeBmp: the BMP pixel data is truncated")
    pixels = np.frombuffer(data, np.uint8, stride * rows, offset).reshape(rows, stride)
    pixels = pixels[:, :width * have].reshape(rows, width, have)
    if height > 0:
        pixels = pixels[::-1]
    if have >= 3:
        pixels = pixels[..., [2, 1, 0, 3][:have]]  # BGR(A) -> RGB(A)
    return _with_channels(np.ascontiguousarray(pixels), channels, "BMP")


def _gif_frames(data, op_type):
    _, image = _open(data, op_type)
    frames = []
    for i in range(getattr(image, "n_frames", 1)):
        image.seek(i)
        frames.append(np.asarray(image.convert("RGB"), np.uint8))
    return np.stack(frames)


# -------------------------------------------------------------------------- ops
def _scalar_bytes(t, op_type):
    if t.dtype != dtypes.string:
        raise TypeError(f"{op_type}: contents must be a string tensor, got {t.dtype.name}")
    if t.shape.ndims not in (None, 0):
        raise ValueError(f"{op_type}: contents must be a scalar, got shape {t.shape}")


def _decode_infer(op_type):
    def infer(inputs, a):
        _scalar_bytes(inputs[0], op_type)
        channels = a.get("channels", 0)
        dtype = a.get("dtype", dtypes.uint8)
        if op_type == "DecodeGif":
            return TensorShape([None, None, None, 3]), dtypes.uint8
        if op_type == "DecodeImage" and a["expand_animations"]:
            return TensorShape(None), dtype
        return TensorShape([None, None, channels or None]), dtype
    return infer


def _contents(value):
    return bytes(np.asarray(value, object)[()])


# TF's DecodeJpeg attrs at the only values graphc decodes with (a GraphDef TF wrote may
# hold others)
_JPEG_DEFAULTS = {"ratio": 1, "fancy_upscaling": True, "try_recover_truncated": False,
                  "acceptable_fraction": 1.0}


def _decode_kernel(op_type):
    def kernel(contents, channels=0, dtype=dtypes.uint8, dct_method="", **jpeg_attrs):
        unsupported = {k: v for k, v in jpeg_attrs.items() if _JPEG_DEFAULTS.get(k) != v}
        if unsupported or dct_method not in ("", "INTEGER_ACCURATE"):
            raise KernelError(f"{op_type}: graphc decodes JPEGs at full size with the "
                              f"accurate integer IDCT only, not with {unsupported or dct_method}",
                              UnimplementedError)
        return _decode_still(_contents(contents), op_type, channels, dtype.np)
    return kernel


def _decode_image_kernel(contents, channels=0, dtype=dtypes.uint8, expand_animations=True):
    data = _contents(contents)
    if _format_of(data) == "GIF" and expand_animations:
        pixels = _gif_frames(data, "DecodeImage")
        pixels = _with_channels(pixels, channels, "GIF") if channels else pixels
    else:
        pixels = _decode_still(data, "DecodeImage", channels)
    if dtype.is_floating:
        # convert_image_dtype's scaling: the integer times 1 / its type's max, in dtype
        return pixels.astype(dtype.np) * dtype.np.type(1.0 / np.iinfo(pixels.dtype).max)
    return pixels


for _type in ("DecodeJpeg", "DecodePng", "DecodeBmp"):
    register_op(_type, infer=_decode_infer(_type), kernel=_decode_kernel(_type), **_HOST)
register_op("DecodeGif", infer=_decode_infer("DecodeGif"),
            kernel=lambda contents: _gif_frames(_contents(contents), "DecodeGif"), **_HOST)
register_op("DecodeImage", infer=_decode_infer("DecodeImage"), kernel=_decode_image_kernel,
            **_HOST)


def _is_jpeg_kernel(contents):
    return np.bool_(_format_of(_contents(contents)) == "JPEG")


register_op("IsJpeg", infer=lambda inputs, a: (TensorShape([]), dtypes.bool),
            kernel=_is_jpeg_kernel, **_HOST)


def _decode(op_type, contents, name, channels=0, **attrs):
    if channels not in _CHANNELS.get(op_type, (0,)):
        raise ValueError(f"{op_type}: channels must be one of "
                         f"{', '.join(map(str, _CHANNELS[op_type]))}, got {channels}")
    c = convert_to_tensor(contents, dtype=dtypes.string, name="contents")
    return c.graph.create_op(op_type, [c], dict(attrs, channels=int(channels)),
                             name or op_type).outputs[0]


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True,
                try_recover_truncated=False, acceptable_fraction=1, dct_method="", name=None):
    """uint8 [height, width, channels] of JPEG bytes (PNG and one-frame GIF bytes too, as
    TF's); channels 0: as stored, 1: gray (libjpeg's luma), 3: RGB."""
    if ratio != 1 or not fancy_upscaling or try_recover_truncated or \
            acceptable_fraction != 1 or dct_method not in ("", "INTEGER_ACCURATE"):
        # dct_method "" is TF's system-specific default; graphc's is INTEGER_ACCURATE
        raise NotImplementedError("decode_jpeg: graphc decodes at full size with libjpeg's "
                                  "accurate integer IDCT only (ratio=1, fancy_upscaling, "
                                  "dct_method='INTEGER_ACCURATE')")
    return _decode("DecodeJpeg", contents, name, channels)


def decode_png(contents, channels=0, dtype=dtypes.uint8, name=None):
    """uint8 or uint16 [height, width, channels] of PNG bytes (JPEG and one-frame GIF bytes
    too); channels 0: as stored, 1: gray, 3: RGB, 4: RGBA."""
    dtype = dtypes.as_dtype(dtype)
    if dtype != dtypes.uint8:  # graphc has no uint16 dtype
        raise TypeError(f"decode_png: graphc decodes to uint8 only, got {dtype.name}")
    return _decode("DecodePng", contents, name, channels, dtype=dtype)


def decode_bmp(contents, channels=0, name=None):
    """uint8 [height, width, channels] of BMP bytes; channels 0, 3 or 4."""
    return _decode("DecodeBmp", contents, name, channels)


def decode_gif(contents, name=None):
    """uint8 [frames, height, width, 3] of GIF bytes, each frame as displayed."""
    c = convert_to_tensor(contents, dtype=dtypes.string, name="contents")
    return c.graph.create_op("DecodeGif", [c], {}, name or "DecodeGif").outputs[0]


def decode_image(contents, channels=None, dtype=dtypes.uint8, name=None,
                 expand_animations=True):
    """The pixels of JPEG, PNG, GIF or BMP bytes, told apart by their first bytes: 3-D
    [height, width, channels], or 4-D [frames, ...] for a GIF when expand_animations;
    a float dtype scales to [0, 1] as convert_image_dtype."""
    dtype = dtypes.as_dtype(dtype)
    if not (dtype == dtypes.uint8 or dtype.is_floating):
        raise TypeError(f"decode_image: dtype must be uint8 or a float type, got "
                        f"{dtype.name}")
    return _decode("DecodeImage", contents, name, channels or 0, dtype=dtype,
                   expand_animations=bool(expand_animations))


def is_jpeg(contents, name=None):
    """bool: whether the bytes start as a JPEG file does."""
    c = convert_to_tensor(contents, dtype=dtypes.string, name="contents")
    return c.graph.create_op("IsJpeg", [c], {}, name or "IsJpeg").outputs[0]


# ---------------------------------------------------------------------- encoding
def _encode_infer(op_type, channels):
    def infer(inputs, a):
        image = inputs[0]
        if image.dtype != dtypes.uint8:
            raise TypeError(f"{op_type}: image must be uint8, got {image.dtype.name}")
        if image.shape.ndims not in (None, 3):
            raise ValueError(f"{op_type}: image must be 3-D [height, width, channels], got "
                             f"shape {image.shape}")
        c = image.shape[-1].value if image.shape.ndims else None
        if c is not None and c not in channels:
            raise ValueError(f"{op_type}: image must have {' or '.join(map(str, channels))} "
                             f"channels, got {c}")
        return TensorShape([]), dtypes.string
    return infer


_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def _as_pillow(image):
    pixels = image[..., 0] if image.shape[-1] == 1 else image
    return _pillow().fromarray(np.ascontiguousarray(pixels), _MODES[image.shape[-1]])


def _encode_png_kernel(image, compression=-1):
    out = io.BytesIO()
    level = 6 if compression == -1 else compression  # zlib's default, as libpng's
    _as_pillow(image).save(out, "PNG", compress_level=level)
    return np.array(out.getvalue(), object)


def _encode_jpeg_kernel(image, quality=95, progressive=False, optimize_size=False,
                        chroma_downsampling=True, x_density=300, y_density=300, **unused):
    out = io.BytesIO()
    _as_pillow(image).save(out, "JPEG", quality=quality, progressive=progressive,
                           optimize=optimize_size, dpi=(x_density, y_density),
                           subsampling="4:2:0" if chroma_downsampling else "4:4:4")
    return np.array(out.getvalue(), object)


register_op("EncodePng", infer=_encode_infer("EncodePng", (1, 2, 3, 4)),
            kernel=_encode_png_kernel, **_HOST)
register_op("EncodeJpeg", infer=_encode_infer("EncodeJpeg", (1, 3)),
            kernel=_encode_jpeg_kernel, **_HOST)
not_differentiable("DecodeJpeg", "DecodePng", "DecodeBmp", "DecodeGif", "DecodeImage",
                   "IsJpeg", "EncodePng", "EncodeJpeg")


def encode_png(image, compression=-1, name=None):
    """PNG bytes of a uint8 [height, width, 1|2|3|4] image (compression -1: zlib's
    default, else 0-9). The pixels round-trip exactly; the bytes are zlib's and may
    differ from TF's."""
    if not -1 <= int(compression) <= 9:
        raise ValueError(f"encode_png: compression must be -1..9, got {compression}")
    x = convert_to_tensor(image, name="image")
    return x.graph.create_op("EncodePng", [x], {"compression": int(compression)},
                             name or "EncodePng").outputs[0]


def encode_jpeg(image, format="", quality=95, progressive=False, optimize_size=False,
                chroma_downsampling=True, density_unit="in", x_density=300, y_density=300,
                xmp_metadata="", name=None):
    """JPEG bytes of a uint8 [height, width, 1|3] image, with TF's defaults (quality 95,
    4:2:0 chroma, 300 dpi)."""
    if format not in ("", "grayscale", "rgb"):
        raise ValueError(f"encode_jpeg: format must be '', 'grayscale' or 'rgb', got "
                         f"{format!r}")
    if not 0 <= int(quality) <= 100:
        raise ValueError(f"encode_jpeg: quality must be 0..100, got {quality}")
    if density_unit != "in" or xmp_metadata:
        raise NotImplementedError("encode_jpeg: graphc writes densities in dots per inch "
                                  "and no XMP metadata")
    x = convert_to_tensor(image, name="image")
    return x.graph.create_op("EncodeJpeg", [x], {
        "quality": int(quality), "progressive": bool(progressive),
        "optimize_size": bool(optimize_size), "chroma_downsampling": bool(chroma_downsampling),
        "x_density": int(x_density), "y_density": int(y_density)},
        name or "EncodeJpeg").outputs[0]
