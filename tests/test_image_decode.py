"""Image decoding and encoding (graphc/ops/image_decode.py; TF1's tf.image.decode_* and
encode_*): pixels of images made here from known arrays, TF's channel conversions written
out here, and tiny files in tests/data/images whose pixels TensorFlow 2.21 decoded
(tf_decoded.npz; JPEGs with dct_method="INTEGER_ACCURATE")."""
import io
import os

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.ops import image_decode as im
from tests.conftest import BACKENDS

Image = pytest.importorskip("PIL.Image")
DATA = os.path.join(os.path.dirname(__file__), "data", "images")


def encoded(pixels, fmt, **kwargs):
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, **kwargs)
    return out.getvalue()


def run(fetches, feed_dict=None):
    with gc.Session() as sess:
        return sess.run(fetches, feed_dict)


RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, (4, 6, 3), dtype=np.uint8)
RGBA = RNG.integers(0, 256, (4, 6, 4), dtype=np.uint8)
GRAY = RNG.integers(0, 256, (4, 6), dtype=np.uint8)


def png_gray(rgb):
    """TF's PNG RGB -> gray: libpng's rgb_to_gray(0.299, 0.587) in 2**15 fixed point."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    return ((9798 * r + 19235 * g + 3735 * b) >> 15).astype(np.uint8)[..., None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_png_channels_of_an_rgb_image(backend):
    data = gc.placeholder(gc.string, [])
    outs = [im.decode_png(data, channels=c) for c in (0, 1, 3, 4)]
    assert outs[1].shape.as_list() == [None, None, 1] and outs[0].dtype == gc.uint8
    got = run(outs, {data: encoded(RGB, "PNG")})
    np.testing.assert_array_equal(got[0], RGB)
    np.testing.assert_array_equal(got[1], png_gray(RGB))
    np.testing.assert_array_equal(got[2], RGB)
    np.testing.assert_array_equal(got[3], np.concatenate([RGB, np.full((4, 6, 1), 255,
                                                                       np.uint8)], -1))


def test_decode_png_of_gray_and_rgba_images():
    gray = encoded(GRAY, "PNG")
    rgba = encoded(RGBA, "PNG")
    got = run([im.decode_png(gray), im.decode_png(gray, 3), im.decode_png(gray, 4),
               im.decode_png(rgba), im.decode_png(rgba, 3), im.decode_png(rgba, 1)])
    np.testing.assert_array_equal(got[0], GRAY[..., None])
    np.testing.assert_array_equal(got[1], np.repeat(GRAY[..., None], 3, -1))
    np.testing.assert_array_equal(got[2][..., :3], np.repeat(GRAY[..., None], 3, -1))
    assert (got[2][..., 3] == 255).all()
    np.testing.assert_array_equal(got[3], RGBA)
    np.testing.assert_array_equal(got[4], RGBA[..., :3])
    np.testing.assert_array_equal(got[5], png_gray(RGBA))  # alpha dropped, then gray


@pytest.mark.parametrize("name", ["rgb_png", "rgba_png", "gray_png", "pal_png",
                                  "gray16_png", "rgb_jpg", "gray_jpg", "rgb_bmp",
                                  "rgba_bmp"])
def test_decoded_pixels_equal_tensorflows(name):
    want = np.load(os.path.join(DATA, "tf_decoded.npz"))
    path = os.path.join(DATA, name.replace("_", "."))
    decode = {"png": im.decode_png, "jpg": im.decode_jpeg, "bmp": im.decode_bmp}[
        name.rsplit("_", 1)[1]]
    contents = gc.read_file(path)
    channels = [c for c in (0, 1, 3, 4) if f"{name}_c{c}" in want.files]
    got = run([decode(contents, channels=c) for c in channels])
    for c, g in zip(channels, got):
        expected = want[f"{name}_c{c}"]
        assert g.dtype == np.uint8 and g.shape == expected.shape, (name, c)
        np.testing.assert_array_equal(g, expected, err_msg=f"{name} channels={c}")


def test_decode_gif_frames_equal_tensorflows():
    want = np.load(os.path.join(DATA, "tf_decoded.npz"))["anim"]
    contents = gc.read_file(os.path.join(DATA, "anim.gif"))
    frames, image = run([im.decode_gif(contents), im.decode_image(contents)])
    assert frames.shape == (3, 5, 7, 3)
    np.testing.assert_array_equal(frames, want)
    np.testing.assert_array_equal(image, want)


def test_decode_jpeg_is_close_to_the_pixels_and_reads_pngs():
    rows, cols = np.meshgrid(np.arange(16) * 8, np.arange(16) * 4, indexing="ij")
    smooth = np.stack([rows, cols, np.full((16, 16), 100)], -1).astype(np.uint8)
    jpeg = encoded(smooth, "JPEG", quality=100, subsampling=0)
    got_jpeg, got_png, is_jpeg = run([im.decode_jpeg(jpeg), im.decode_jpeg(encoded(RGB, "PNG")),
                                      im.is_jpeg(jpeg)])
    assert got_jpeg.shape == (16, 16, 3)
    assert np.abs(got_jpeg.astype(int) - smooth).max() <= 3  # lossy, at quality 100
    np.testing.assert_array_equal(got_png, RGB)  # TF's decode_jpeg reads PNGs too
    assert is_jpeg


def test_decode_image_tells_formats_apart_and_scales_floats():
    for data, want in ((encoded(RGB, "PNG"), RGB), (encoded(RGB, "BMP"), RGB),
                       (encoded(GRAY, "PNG"), GRAY[..., None])):
        np.testing.assert_array_equal(run(im.decode_image(data)), want)
    for dtype in (np.float32, np.float64):
        got = run(im.decode_image(encoded(RGB, "PNG"), dtype=gc.as_dtype(dtype)))
        assert got.dtype == dtype
        # convert_image_dtype's scaling: the float times 1 / 255 in that float type
        np.testing.assert_array_equal(got, RGB.astype(dtype) * dtype(1 / 255))


def test_decode_bmp_keeps_a_32_bit_alpha():
    bmp = encoded(RGBA, "BMP")
    got = run([im.decode_bmp(bmp), im.decode_bmp(bmp, channels=3)])
    np.testing.assert_array_equal(got[0], RGBA)
    np.testing.assert_array_equal(got[1], RGBA[..., :3])


@pytest.mark.parametrize("decode, data, match", [
    (im.decode_png, b"not an image", "unknown image file format"),
    (im.decode_bmp, "PNG", "the data is a PNG image; BMP required"),
    (im.decode_gif, "PNG", "GIF required"),
    (im.decode_png, b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "invalid PNG data")])
def test_bad_image_data_is_invalid_argument(decode, data, match):
    data = encoded(RGB, "PNG") if data == "PNG" else data
    with pytest.raises(errors.InvalidArgumentError, match=match):
        run(decode(data))


def test_bad_channels_and_dtypes_are_refused_when_built():
    with pytest.raises(ValueError, match="channels must be one of 0, 1, 3"):
        im.decode_jpeg(b"", channels=4)
    with pytest.raises(TypeError, match="uint8 only"):
        im.decode_png(b"", dtype=gc.int32)
    with pytest.raises(ValueError, match="requested dtype string"):
        im.decode_png(gc.constant([1.0]))


@pytest.mark.parametrize("pixels", [RGB, RGBA, GRAY[..., None]])
def test_encode_png_round_trips_exactly(pixels):
    image = gc.placeholder(gc.uint8, [None, None, pixels.shape[-1]])
    png = im.encode_png(image)
    data, back = run([png, im.decode_png(png)], {image: pixels})
    assert data.startswith(b"\x89PNG")
    np.testing.assert_array_equal(back, pixels)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data))).reshape(
        pixels.shape), pixels)


def test_encode_jpeg_decodes_close_to_its_pixels():
    smooth = np.repeat(np.arange(0, 256, 16, dtype=np.uint8)[None, :, None], 16, 0)
    smooth = np.repeat(smooth, 3, -1)
    data = run(im.encode_jpeg(gc.constant(smooth), quality=95))
    assert data.startswith(b"\xff\xd8\xff")
    back = np.asarray(Image.open(io.BytesIO(data)))
    assert back.shape == smooth.shape and np.abs(back.astype(int) - smooth).max() <= 8


def test_encode_refuses_non_uint8_and_bad_channels():
    with pytest.raises(TypeError, match="EncodePng: image must be uint8"):
        im.encode_png(gc.constant(np.zeros((2, 2, 3), np.float32)))
    with pytest.raises(ValueError, match="EncodeJpeg: image must have 1 or 3 channels"):
        im.encode_jpeg(gc.constant(np.zeros((2, 2, 4), np.uint8)))


def test_graph_def_with_image_ops_recorded_by_tensorflow():
    """images_tf.pb: TF 2.21 (tf.compat.v1 graph mode) wrote decode_png(channels=1),
    decode_jpeg(channels=3, dct_method="INTEGER_ACCURATE") and decode_image(channels=4)
    cast and doubled; TF's outputs for rgb.png and rgb.jpg are those in tf_decoded.npz."""
    pytest.importorskip("tensorboard")
    gd = gc.GraphDef()
    with open(os.path.join(DATA, "..", "tf_formats", "images_tf.pb"), "rb") as f:
        gd.ParseFromString(f.read())
    want = np.load(os.path.join(DATA, "tf_decoded.npz"))
    with gc.Graph().as_default():
        fetched = gc.import_graph_def(gd, name="", return_elements=[
            "png_gray:0", "jpg_rgb:0", "png_rgba2:0"])
        with open(os.path.join(DATA, "rgb.png"), "rb") as f:
            png = f.read()
        with open(os.path.join(DATA, "rgb.jpg"), "rb") as f:
            jpg = f.read()
        got = run(fetched, {"png:0": png, "jpg:0": jpg})
    np.testing.assert_array_equal(got[0], want["rgb_png_c1"])
    np.testing.assert_array_equal(got[1], want["rgb_jpg_c3"])
    np.testing.assert_array_equal(got[2], want["rgb_png_c4"].astype(np.float32) * 2)


def test_a_jpeg_decode_graphc_cannot_do_as_asked_is_unimplemented():
    with pytest.raises(NotImplementedError, match="INTEGER_ACCURATE"):
        im.decode_jpeg(b"", dct_method="INTEGER_FAST")
    # the same attrs in a graph file: refused when it runs, not decoded differently
    contents = gc.constant(encoded(RGB, "JPEG"))
    op = contents.graph.create_op("DecodeJpeg", [contents], {"channels": 0, "ratio": 2})
    with pytest.raises(errors.UnimplementedError, match="ratio"):
        run(op.outputs[0])
